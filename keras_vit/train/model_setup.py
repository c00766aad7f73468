"""Switches set on a model before training: precision, frozen layers, loss and metrics; and its evaluation.

* :func:`set_precision` -- the 16-bit type the hardware runs natively, else float32.
* :func:`freeze` -- freeze the embedding and the first blocks for fine-tuning.
* :func:`compile_model` -- categorical cross-entropy with label smoothing, accuracy.
* :func:`evaluate` -- ``model.evaluate`` as a dict with the number of examples.

Example:
>>> block_number("transformer_block_3"), block_number("head")
(3, None)
>>> model = keras_vit.ViT(image_size=28, patch_size=7, hidden_size=32,   # doctest: +SKIP
...                       num_layers=2, num_heads=4, mlp_dim=64, num_classes=10)
>>> freeze(model, 1)                                                     # doctest: +SKIP
['patch_encoder', 'transformer_block_0']
"""

import re

import keras
import numpy as np

from keras_vit.hardware.precision import mixed_policy

_BLOCK = re.compile(r"^transformer_block_(\d+)$")


def block_number(layer_name):
    """``i`` for a Transformer block's layer name ``transformer_block_{i}``, else None."""
    match = _BLOCK.match(layer_name)
    return int(match.group(1)) if match else None


def set_precision(mode, *, cpu=None, gpus=None, notify=print):
    """Set the global dtype policy: ``"float32"``, ``"mixed"`` or a policy name.

    ``"mixed"`` picks what the hardware runs natively (:func:`keras_vit.hardware.precision.mixed_policy`):
    bfloat16 on GPUs of compute capability 8.0+ and on CPUs with AVX512_BF16 or
    AMX, float16 with loss scaling on older GPUs, and float32 on CPUs without
    native bfloat16, where ``notify`` (default ``print``) receives a one-line
    notice saying so. Call before building the model. Returns the policy name set.

    Args:
        mode: ``"float32"`` (or None/False), ``"mixed"`` (or True), or one of
            ``"mixed_bfloat16"``, ``"mixed_float16"``, ``"bfloat16"``.
        cpu, gpus: the hardware to decide for (default: this machine's).
        notify: called with the notice when ``"mixed"`` falls back to float32.
    """
    if mode in (None, False, "float32", "none"):
        policy = "float32"
    elif mode in (True, "mixed", "auto"):
        policy, reason = mixed_policy(cpu, gpus)
        if policy == "float32" and notify is not None:
            notify(f"mixed precision: float32, since {reason}")
    elif mode in ("mixed_bfloat16", "mixed_float16", "bfloat16"):
        policy = mode
    else:
        raise ValueError(
            "Unknown precision: expected 'float32', 'mixed', 'mixed_bfloat16' or 'mixed_float16'. "
            f"Received: mixed_precision={mode!r}"
        )
    keras.mixed_precision.set_global_policy(policy)
    return policy


def freeze(model, num_blocks):
    """Freeze the embedding (and any stem) and the first ``num_blocks`` Transformer blocks.

    ``num_blocks=-1`` freezes every block (a linear probe: only the final
    norm and the head train). Returns the names of the frozen layers.
    """
    blocks = sorted(b for b in (block_number(layer.name) for layer in model.layers) if b is not None)
    if num_blocks < 0:
        num_blocks = len(blocks)
    if num_blocks > len(blocks):
        raise ValueError(f"The model has {len(blocks)} blocks. Received: num_blocks={num_blocks}")
    frozen = []
    seen_block = False
    for layer in model.layers:
        block = block_number(layer.name)
        if block is not None:
            seen_block = True
            if block < num_blocks:
                layer.trainable = False
                frozen.append(layer.name)
        elif not seen_block and layer.weights:
            layer.trainable = False
            frozen.append(layer.name)
    return frozen


def compile_model(model, optimizer, label_smoothing=0.1, *, jit_compile=False):
    """Compile with categorical cross-entropy (one-hot labels, label smoothing) and accuracy."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.CategoricalCrossentropy(label_smoothing=label_smoothing),
        metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model


def evaluate(model, dataset):
    """``model.evaluate`` as a dict, plus the number of examples seen."""
    count = 0
    for _, labels in dataset:
        count += int(np.shape(labels)[0])
    result = model.evaluate(dataset, verbose=0, return_dict=True)
    result["num_examples"] = count
    return result
