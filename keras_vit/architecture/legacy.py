"""Models saved before the configuration existed: plain functional models, given their ``ViTConfig`` on load.

keras_vit 0.1 and the releases up to the configuration wrote ``.keras`` files of plain functional
models. Their architecture is read once, here, from the layers' own configurations and names (the
only place in the package that reads it from layers), checked by building the same architecture
and comparing every weight's name and shape, and the loaded graph is wrapped, weights and all, in a
:class:`~keras_vit.architecture.model.VisionTransformer`.
"""

import re

import keras

from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.stems import stem_stride
from keras_vit.architecture.model import VisionTransformer
from keras_vit.layers import PatchEncoder, Patches, TokenPooling, TransformerBlock
from keras_vit.layers.resnet import ROOT_WIDTH, ResidualUnit

_UNIT = re.compile(r"^block(\d+)_unit(\d+)$")
_CONV = re.compile(r"^stem_conv_(\d+)$")


def upgrade(model):
    """``model`` as a :class:`VisionTransformer`: itself if it is one, its graph wrapped if it is a keras_vit ViT.

    Any other model (no ``Patches`` and ``PatchEncoder`` layer) is returned as it is.

    Raises:
        ValueError: the model looks like a keras_vit ViT but its layers describe no architecture that
            the builders make (the message names the model and the first difference).
    """
    if isinstance(model, VisionTransformer) or not _has(model, PatchEncoder) or not _has(model, Patches):
        return model
    config = config_from_layers(model)
    expected = _weight_shapes(VisionTransformer.from_vit_config(config))
    found = _weight_shapes(model)
    if expected != found:
        first = next((a, b) for a, b in zip(expected + [None], found + [None]) if a != b)
        raise ValueError(
            f"Model {model.name!r} has keras_vit layers but no architecture keras_vit builds: read as {config}, "
            f"it should have weight {first[0]} where it has {first[1]}."
        )
    upgraded = VisionTransformer(model.inputs, model.outputs, name=model.name, vit_config=config)
    for name in ("class_names", "load_report"):
        if hasattr(model, name):
            setattr(upgraded, name, getattr(model, name))
    return upgraded


def config_from_layers(model):
    """The :class:`ViTConfig` a plain functional keras_vit model was built with, read from its layers."""
    layers = {layer.name: layer for layer in model.layers}
    blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
    if not blocks:
        raise ValueError(f"Model {model.name!r} has no TransformerBlock: not a keras_vit ViT.")
    patches, encoder, first = _single(model, Patches), _single(model, PatchEncoder), blocks[0]
    fields = dict(
        patch_size=patches.patch_size_pair,
        hidden_size=encoder.hidden_size,
        num_layers=len(blocks),
        num_heads=first.num_heads,
        mlp_dim=first.mlp_dim,
        layer_norm_epsilon=first.layer_norm_epsilon,
        dropout=first.dropout,
        attention_dropout=first.attention_dropout,
        drop_path_rate=blocks[-1].drop_path if len(blocks) > 1 else 0.0,
        include_preprocessing="preprocessing" in layers,
    )
    fields.update(_stem(model, layers))
    pool = [layer for layer in model.layers if isinstance(layer, TokenPooling)]
    fields["pooling"] = pool[0].mode if pool else None
    fields["include_top"] = "head" in layers
    if fields["include_top"]:
        fields["num_classes"] = layers["head"].units
    if "pre_logits" in layers:
        fields["representation_size"] = layers["pre_logits"].units
    predictions = layers.get("predictions")
    fields["classifier_activation"] = keras.activations.serialize(predictions.activation) if predictions else None
    if isinstance(fields["classifier_activation"], dict):  # a registered or custom activation
        fields["classifier_activation"] = fields["classifier_activation"].get("config", fields["classifier_activation"])
    _, h, w, _ = model.input_shape
    if h is None or w is None:
        stride = stem_stride(fields.get("stem"), fields.get("block_units", ()), fields.get("stem_channels", ()))
        (gh, gw), (ph, pw) = encoder.grid_size, fields["patch_size"]
        fields.update(image_size=None, native_image_size=(gh * ph * stride, gw * pw * stride))
    else:
        fields["image_size"] = (int(h), int(w))
    return ViTConfig(**fields)


def _stem(model, layers):
    if "conv_root" in layers:
        units = {}
        for layer in model.layers:
            match = _UNIT.match(layer.name) if isinstance(layer, ResidualUnit) else None
            if match:
                units[int(match[1])] = max(units.get(int(match[1]), 0), int(match[2]))
        width = layers["conv_root"].filters / ROOT_WIDTH
        return dict(stem="resnet", block_units=tuple(units[i] for i in sorted(units)), width=int(width) if width == int(width) else width)
    convs = sorted((int(m[1]), layer.filters) for layer in model.layers if (m := _CONV.match(layer.name)))
    if convs:
        return dict(stem="conv", stem_channels=tuple(filters for _, filters in convs))
    return {}


def _single(model, cls):
    layers = [layer for layer in model.layers if isinstance(layer, cls)]
    if len(layers) != 1:
        raise ValueError(f"Expected one {cls.__name__} in model {model.name!r}, found {len(layers)}.")
    return layers[0]


def _has(model, cls):
    return any(isinstance(layer, cls) for layer in getattr(model, "layers", ()))


def _weight_shapes(model):
    return [(layer.name, tuple(tuple(w.shape) for w in layer.weights)) for layer in model.layers if layer.weights]
