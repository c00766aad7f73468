"""The CUDA GPUs the current Keras backend sees, and their compute capability.

Example:
>>> GPU("NVIDIA A100", (8, 0)).native_bfloat16, GPU("Tesla T4", (7, 5)).capability_label
(True, '7.5')
"""

import dataclasses

import keras


@dataclasses.dataclass(frozen=True)
class GPU:
    """A CUDA GPU: its ``name`` and compute ``capability`` as ``(major, minor)`` (None if unknown)."""

    name: str
    capability: tuple = None

    @property
    def native_bfloat16(self):
        return self.capability is not None and tuple(self.capability) >= (8, 0)

    @property
    def capability_label(self):
        """The compute capability as text: ``"8.0"``, or ``"unknown"``."""
        return "unknown" if self.capability is None else ".".join(str(v) for v in self.capability)


def gpu_info():
    """The CUDA GPUs the current Keras backend sees, as :class:`GPU` (an empty list on a CPU machine)."""
    backend = keras.backend.backend()
    gpus = []
    if backend == "tensorflow":
        import tensorflow as tf  # deferred: asked of the TensorFlow backend only (absent on the others)

        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            gpus.append(GPU(details.get("device_name", device.name), details.get("compute_capability")))
    elif backend == "jax":
        import jax  # deferred: asked of the JAX backend only

        for device in jax.devices():
            if device.platform == "gpu":
                capability = getattr(device, "compute_capability", None)
                if isinstance(capability, str):  # "8.0" on CUDA; a ROCm target ("gfx90a") is not a CUDA capability
                    try:
                        capability = tuple(int(v) for v in capability.split("."))
                    except ValueError:
                        capability = None
                gpus.append(GPU(device.device_kind, capability))
    elif backend == "torch":
        import torch  # deferred: asked of the PyTorch backend only

        for i in range(torch.cuda.device_count()):
            gpus.append(GPU(torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i)))
    return gpus
