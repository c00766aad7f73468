"""A keras_vit ``.keras`` model as a checkpoint: its weights in the original layout, for the one loader.

Its variables are named by the original keys (:func:`keras_vit.weights.mapping.targets_of`, read backwards) and,
for weights the original layout has no key for (none today), ``keras/<layer>/<weight>``
(:func:`keras_vit.weights.mapping.keras_targets`); the loader treats it as any checkpoint.
"""

import functools
import os

import keras
import numpy as np

from keras_vit.architecture.model import VisionTransformer
from keras_vit.architecture.state import model_state
from keras_vit.errors import CheckpointError
from keras_vit.saving import load_model, read_metadata
from keras_vit.weights.declared import declare
from keras_vit.weights.mapping import keras_targets, targets_of
from keras_vit.weights.source import CheckpointInfo, Source

FORMAT = "keras"
_ENTRIES = ("config.json", "model.weights.h5")  # what `model.save("x.keras")` writes


def is_keras_archive(names):
    """Whether the entry names of a zip archive are those of a ``.keras`` file."""
    return all(entry in names for entry in _ENTRIES)


@functools.lru_cache(maxsize=1)
def _contents(path, mtime_ns, size):
    """``(arrays, vit_config, class_names)`` of a ``.keras`` file, read once per version of the file."""
    try:
        model = load_model(path)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    if not isinstance(model, VisionTransformer):
        raise CheckpointError(f"{path!r} holds model {model.name!r}, which is not a keras_vit ViT (no ViTConfig).")
    state = model_state(model)
    if state.quantized_layers:  # integer kernels and scales: no float weight to read (a saved LoRA model is merged)
        raise CheckpointError(
            f"{path!r} holds a {state.describe()} model; a checkpoint gives float weights to a new model. "
            f"Use it as it is with keras_vit.load_model({path!r}), or load the float model and quantize after."
        )
    targets = targets_of(model)
    targets.update(keras_targets(model, targets))
    arrays = {key: np.reshape(keras.ops.convert_to_numpy(t.variable), t.shape) for key, t in targets.items()}
    return arrays, model.vit_config, read_metadata(path).get("class_names")


def contents(path):
    """``(arrays, vit_config, class_names)`` of the ``.keras`` file at ``path``.

    ``vit_config.grid`` is the ``(rows, cols)`` of its position embeddings (not always a square).
    """
    path = os.path.abspath(os.fspath(path))
    stat = os.stat(path)
    return _contents(path, stat.st_mtime_ns, stat.st_size)


# what a saved model declares about the weights it holds (the resolution, head and regularisation may differ)
DECLARED = ("num_heads", "layer_norm_epsilon", "hidden_size", "num_layers", "mlp_dim", "class_token",
            "mlp_activation", "qkv_bias", "resnet_norms")


def declared(config, path):
    """The declared record (:mod:`keras_vit.weights.declared`) of a saved model's ``ViTConfig``.

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> declared(ViTConfig(num_heads=4, hidden_size=32, mlp_dim=64), "m.keras")["num_heads"]
    Declaration(value=4, said='vit_config.num_heads=4', origin='m.keras')
    """
    record = {}
    for field in DECLARED:
        declare(record, field, getattr(config, field), f"vit_config.{field}={getattr(config, field)!r}", path)
    return record


class KerasFileSource(Source):
    """A keras_vit ``.keras`` model (a zip archive with the entries ``model.save`` writes)."""

    name = FORMAT

    def describe(self, opened, architecture=None):
        arrays, config, class_names = contents(opened.path)
        shapes = {key: tuple(array.shape) for key, array in arrays.items()}
        return CheckpointInfo(path=opened.path, format=self.name, shapes=shapes, declared=declared(config, opened.path),
                              class_names=class_names, grid=config.grid)

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        arrays = dict(contents(opened.path)[0])  # a keras_vit model's inputs are its own: nothing to fold
        _contents.cache_clear()  # read once for the builder's describe and load, not held for the process
        return arrays


SOURCE = KerasFileSource()
