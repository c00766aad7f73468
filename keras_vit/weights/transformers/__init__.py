"""Hugging Face transformers ``save_pretrained`` folders -> the original checkpoint layout.

The ``model_type`` of ``config.json`` picks the reader (:mod:`~keras_vit.weights.transformers.vit`, or a row of
:mod:`~keras_vit.weights.transformers.family`) and the key table
(:data:`~keras_vit.weights.transformers.layouts.LAYOUTS`); the family's ``model_type``\ s whose blocks need a
switch keras_vit lacks (:data:`~keras_vit.weights.transformers.family.REFUSED`) are refused by name with it.
"""

import os

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights.state_dict import StateDictSource
from keras_vit.weights.transformers import family, layouts, vit

FORMAT = "transformers"
MODEL_TYPES = ("vit",) + family.MODEL_TYPES


def matches(keys):
    """Whether a state dict with these keys is a transformers ViT or one of the family's vision models.

    Example:
    >>> matches(["vit.embeddings.patch_embeddings.projection.weight"]), matches(["patch_embed.proj.weight"])
    (True, False)
    """
    return layouts.matches(keys)


def settings(config, path="<config>"):
    """The :class:`~keras_vit.weights.source.Reading` of a transformers ``config.json`` (see :func:`vit.settings`
    and :func:`family.settings`).

    Raises:
        CheckpointError: a ``model_type`` keras_vit does not read (the message lists those it reads), or a
            field of the wrong type (named with its value).
    """
    config = config_lib.json_object(config, path)
    model_type = config.get("model_type")
    if model_type == "vit":
        return vit.settings(config, path)
    if model_type in family.REFUSED:
        raise CheckpointError(
            f"{path!r} describes a transformers {model_type!r} model, whose blocks have {family.REFUSED[model_type]}: "
            "a switch keras_vit's ViT does not have, so it is not built (its weights would compute something else)."
        )
    if model_type not in family.MODEL_TYPES:
        raise CheckpointError(
            f"{path!r} describes a transformers model of type {model_type!r}; keras_vit reads model_type "
            f"{', '.join(map(repr, MODEL_TYPES))}."
        )
    found = family.settings(config, path, model_type)
    return family.normalization(found, os.path.dirname(os.path.abspath(os.fspath(path))), model_type)


def to_original(tensors, path="<arrays>", reading=None):
    """A transformers state dict in the original ``.npz`` layout; ``reading`` (from :func:`settings`) picks the layout.

    The keys skipped on purpose (a text tower, a decoder) go to ``reading.skipped`` for the load report, and
    which prefix the vision keys have (transformers 4.x's ``vision_model.`` or 5's none) to ``reading.notes``.

    Example:
    >>> import numpy as np
    >>> out = to_original({"vit.embeddings.patch_embeddings.projection.weight": np.zeros((8, 3, 4, 4))})
    >>> out["embedding/kernel"].shape
    (4, 4, 3, 8)
    """
    out, skipped = layouts.to_original(tensors, path, reading.layout if reading else "vit", reading and reading.notes)
    if reading is not None:
        reading.skipped = skipped
    return out


class TransformersSource(StateDictSource):
    """A folder written by transformers' ``save_pretrained`` (or its ``.safetensors`` with the ``config.json``
    beside it) of one of :data:`MODEL_TYPES`, recognised by its keys."""

    name = FORMAT
    label = "transformers ViT"

    def matches(self, keys):
        return matches(keys)

    def claims(self, opened):
        """Its keys (:func:`matches`), or a ``config.json`` naming a ``model_type`` of the family: one keras_vit
        reads under keys another layout shares (TIPSv2's original names), or one it refuses by name."""
        if self.matches(opened.keys()):
            return True
        config = opened.state_dict()[1] if opened.keys() else None
        return isinstance(config, dict) and config.get("model_type") in MODEL_TYPES + tuple(family.REFUSED)

    def reading(self, opened, architecture=None):
        _, config, config_path = opened.state_dict()
        if config is None:
            raise CheckpointError(
                f"Checkpoint {opened.path!r} is a transformers ViT but has no config.json beside it: keras_vit needs its "
                "num_attention_heads and layer_norm_eps. Load the folder written by save_pretrained."
            )
        return settings(config, config_path)

    def convert(self, tensors, reading, path):
        return to_original(tensors, path, reading)


SOURCE = TransformersSource()
