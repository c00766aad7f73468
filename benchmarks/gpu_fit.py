"""The plain Keras rows of ``benchmarks/gpu_jax.py``: ``model.fit`` and ``model.predict`` on uint8 NumPy arrays.

Issue 26, part 4. What a user writes, timed in the same run as the jitted step of ``gpu_jax.py`` (modes
``fit`` and ``predict`` beside ``train`` and ``infer``), on the JAX backend:

* the data: ``--fit-steps`` batches of random ``uint8`` images ``(batch, size, size, 3)`` and ``int32`` labels
  in host memory (one byte per channel crosses to the device; keras_vit's rescaling is inside the model);
* ``model.compile(optimizer=AdamW(1e-4, weight_decay=0.05), loss=SparseCategoricalCrossentropy(from_logits=True),
  steps_per_execution=--steps-per-execution, jit_compile=True)``, the optimizer and loss of the jitted step;
* ``fit``: one warm-up ``fit(x, y, batch_size, epochs=1, shuffle=False)`` (compilation), then one
  ``fit(..., epochs=--repeats)``; each epoch timed by a callback from its start to its end, the median epoch is
  ``images_per_second`` (``fit_wall_images_per_second``: the whole timed call, its set-up included);
* ``predict``: one warm-up ``predict(x, batch_size)``, then ``--repeats`` timed calls over the same array.

keras-hub (``--frameworks kerashub``): ``keras_hub.models.ViTBackbone`` of the same sizes, fed the same uint8
images through ``Rescaling(1 / 127.5, offset=-1)`` (the [-1, 1] inputs keras_vit makes inside its model), its
class token through the same ``Dense(1000)`` head; the jitted modes and these modes alike. Where keras-hub does
not import, every row is recorded as skipped with the import error.
"""

from __future__ import annotations

import math
import statistics
import time


def kerashub_model(dims, size, patch_size, num_classes):
    """keras-hub's ViT backbone of ``dims`` ``(hidden, layers, heads, mlp)`` with keras_vit's input and head."""
    import keras
    import keras_hub

    hidden, layers, heads, mlp = dims
    backbone = keras_hub.models.ViTBackbone(image_shape=(size, size, 3), patch_size=patch_size, num_layers=layers,
                                            num_heads=heads, hidden_dim=hidden, mlp_dim=mlp)
    inputs = keras.Input((size, size, 3))
    x = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0)(inputs)
    tokens = backbone(x)
    outputs = keras.layers.Dense(num_classes, dtype="float32", name="head")(tokens[:, 0])
    return keras.Model(inputs, outputs, name=f"keras_hub_vit_{hidden}_{layers}"), f"keras-hub {keras_hub.__version__}"


def _data(batch, steps, size, num_classes, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (steps * batch, size, size, 3), dtype=np.uint8)
    y = rng.integers(0, num_classes, (steps * batch,), dtype=np.int32)
    return x, y


def calls_worker(spec, emit, model, size, num_classes, peak_mb):
    """``model.fit`` (mode ``fit``) or ``model.predict`` (mode ``predict``) rows, one per batch size."""
    import keras

    steps, per_execution, repeats = spec["fit_steps"], spec["steps_per_execution"], spec["repeats"]
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=per_execution, jit_compile=True)
    for batch in spec["batch_sizes"]:
        x, y = _data(batch, steps, size, num_classes)
        images = steps * batch
        common = {"batch_size": batch, "input_dtype": str(x.dtype), "steps_per_call": steps,
                  "steps_per_execution": per_execution, "host_bytes_per_image": int(x[0].nbytes)}
        if spec["mode"] == "fit":
            times = []

            class Epochs(keras.callbacks.Callback):
                def on_epoch_begin(self, epoch, logs=None):
                    self.start = time.perf_counter()

                def on_epoch_end(self, epoch, logs=None):
                    times.append(time.perf_counter() - self.start)

            t = time.perf_counter()
            history = model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
            compile_s = time.perf_counter() - t
            t = time.perf_counter()
            history = model.fit(x, y, batch_size=batch, epochs=repeats, shuffle=False, verbose=0,
                                callbacks=[Epochs()])
            wall = time.perf_counter() - t
            rates = [images / s for s in times]
            last = float(history.history["loss"][-1])
            extra = {"last_loss": last, "finite": math.isfinite(last), "fit_wall_images_per_second": repeats * images / wall}
        else:
            t = time.perf_counter()
            model.predict(x, batch_size=batch, verbose=0)
            compile_s = time.perf_counter() - t
            rates = []
            out = None
            for _ in range(repeats):
                t = time.perf_counter()
                out = model.predict(x, batch_size=batch, verbose=0)
                rates.append(images / (time.perf_counter() - t))
            import numpy as np

            extra = {"finite": bool(np.isfinite(out).all()), "output_dtype": str(out.dtype)}
        median = statistics.median(rates)
        emit(dict(common, images_per_second=median, latency_ms=1000.0 * batch / median,
                  repeats_images_per_second=rates, compile_s=compile_s, peak_memory_mb=peak_mb(),
                  peak_memory_scope="process, batch sizes ascending", **extra))
