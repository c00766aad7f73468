"""Hugging Face transformers ``save_pretrained`` folders -> the original checkpoint layout: ``config.json``'s
``model_type`` picks the reader (:mod:`~keras_vit.weights.transformers.vit`, or a row of
:mod:`~keras_vit.weights.transformers.family`) and the key table (:mod:`~keras_vit.weights.transformers.layouts`).
"""

import os

from keras_vit.errors import CheckpointError
from keras_vit.weights.state_dict import StateDictSource
from keras_vit.weights.transformers import family, layouts, vit

MODEL_TYPES = ("vit",) + family.MODEL_TYPES


class TransformersSource(StateDictSource):
    """A folder written by transformers' ``save_pretrained`` (or its ``.safetensors`` with the ``config.json``
    beside it) of one of :data:`MODEL_TYPES`, recognised by its keys."""

    name = "transformers"
    label = "transformers ViT"
    matches = staticmethod(layouts.matches)

    def claims(self, opened):
        """Its keys (:func:`~keras_vit.weights.transformers.layouts.matches`), or a ``config.json`` naming a
        ``model_type`` of the family: one keras_vit reads under keys another layout shares (TIPSv2's original
        names), or one it refuses by name."""
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
        model_type = config.get("model_type")
        if model_type == "vit":
            return vit.settings(config, config_path, keys=opened.keys())
        if model_type in family.REFUSED:
            raise CheckpointError(
                f"{config_path!r} describes a transformers {model_type!r} model, whose blocks have "
                f"{family.REFUSED[model_type]}: a switch keras_vit's ViT does not have, so it is not built (its weights "
                "would compute something else)."
            )
        if model_type not in family.MODEL_TYPES:
            raise CheckpointError(
                f"{config_path!r} describes a transformers model of type {model_type!r}; keras_vit reads model_type "
                f"{', '.join(map(repr, MODEL_TYPES))}."
            )
        found = family.settings(config, config_path, model_type)
        return family.normalization(found, os.path.dirname(os.path.abspath(config_path)), model_type)

    def convert(self, tensors, reading, path):
        out, reading.skipped = layouts.to_original(tensors, path, reading.layout, reading.notes)
        return out


SOURCE = TransformersSource()
