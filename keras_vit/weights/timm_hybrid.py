"""timm's hybrid ViT (``patch_embed.backbone.*``) -> the original hybrid ``.npz`` keys, and what its backbone computes.

timm builds the paper's hybrids (``vision_transformer_hybrid.py``) as a ``VisionTransformer`` whose ``patch_embed``
is a ``HybridEmbed`` over ``_resnetv2(layers)`` (for ``layers=()`` its stem alone, right under ``backbone``); the
hybrid branch of its ``_load_weights`` defines the correspondence inverted here. The graph and the padding are
keras_vit's (``StdConv2dSame`` pads as TensorFlow's ``SAME``); the normalisation constants differ (``eps=1e-8`` on
the variance, ``GroupNormAct`` eps 1e-5), so a timm hybrid declares ``resnet_norms="timm"``
(:data:`keras_vit.layers.resnet.RESNET_NORMS`; ``tools/check_timm_hybrids.py`` checks it against timm). Other
backbones (ResNet-D, MobileCLIP's ``ConvStem``) and ``padding_same=False`` (:data:`keras_vit.weights.timm_models.SWITCHES`)
are refused by name.
"""

import re

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.layers.resnet import backbone_stride
from keras_vit.weights.declared import declare
from keras_vit.weights.mapping import block_units_of

PREFIX = "patch_embed.backbone."
NORMS = "timm"  # keras_vit.layers.resnet.RESNET_NORMS key of timm's StdConv2dSame(eps=1e-8) and GroupNormAct(eps=1e-5)
# timm key under the root (``backbone.stem.`` with stages, ``backbone.`` for a stem-only backbone) -> original key
ROOT_KEYS = {"conv.weight": "conv_root/kernel", "norm.weight": "gn_root/scale", "norm.bias": "gn_root/bias"}
# timm key under ``backbone.stages.{i}.blocks.{j}.`` -> original key under ``block{i+1}/unit{j+1}/``
UNIT_KEYS = {
    **{f"conv{r}.weight": f"conv{r}/kernel" for r in (1, 2, 3)},
    **{f"norm{r}.{timm}": f"gn{r}/{flax}" for r in (1, 2, 3) for timm, flax in (("weight", "scale"), ("bias", "bias"))},
    "downsample.conv.weight": "conv_proj/kernel",
    "downsample.norm.weight": "gn_proj/scale",
    "downsample.norm.bias": "gn_proj/bias",
}
_UNIT = re.compile(r"^stages\.(\d+)\.blocks\.(\d+)\.(.+)$")
# other timm backbones under patch_embed.backbone: key pattern (after the prefix) -> what it is
_OTHER_BACKBONES = {
    r"^(conv1\.|layer\d\.|bn1\.)": "a timm ResNet-D backbone (vit_small_resnet26d_224, vit_base_resnet50d_224...)",
    r"^\d+\.": "a convolutional stem of Conv2d + BatchNorm blocks (MobileCLIP's vit_base_mci_224)",
}


def is_hybrid(keys):
    """Whether a timm state dict has a CNN backbone in its patch embedding.

    Example:
    >>> is_hybrid(["patch_embed.backbone.stem.conv.weight"]), is_hybrid(["patch_embed.proj.weight"])
    (True, False)
    """
    return any(key.startswith(PREFIX) for key in keys)


def to_original(tensors, path="<arrays>"):
    """``{original key: array}`` of the ResNet-v2 in a timm hybrid's state dict (its other keys are ignored).

    Raises:
        CheckpointError: a backbone that is not the paper's ResNet-v2, named; a key of it with no original.

    Example:
    >>> arrays = {"patch_embed.backbone.stem.conv.weight": np.zeros((32, 3, 7, 7)),
    ...           "patch_embed.backbone.stages.0.blocks.1.norm3.bias": np.zeros(128), "cls_token": np.zeros((1, 1, 8))}
    >>> {k: v.shape for k, v in to_original(arrays).items()}
    {'conv_root/kernel': (7, 7, 3, 32), 'block1/unit2/gn3/bias': (128,)}
    """
    backbone = {key[len(PREFIX):]: array for key, array in tensors.items() if key.startswith(PREFIX)}
    for pattern, what in _OTHER_BACKBONES.items():
        found = sorted(PREFIX + key for key in backbone if re.search(pattern, key))
        if found:
            raise CheckpointError(
                f"Checkpoint {path!r} is a timm hybrid with {what} (keys {', '.join(map(repr, found[:3]))}, ...): "
                "keras_vit's hybrid is the paper's ResNet-v2 (timm's vit_*_r*_s* models), so these weights cannot be loaded."
            )
    stem = "stem." if any(key.startswith(("stem.", "stages.")) for key in backbone) else ""  # layers=(): the stem alone
    out, unknown = {}, []
    for key, array in backbone.items():
        unit = _UNIT.match(key)
        if key.startswith(stem) and key[len(stem):] in ROOT_KEYS:
            name = ROOT_KEYS[key[len(stem):]]
        elif unit and unit[3] in UNIT_KEYS:
            name = f"block{int(unit[1]) + 1}/unit{int(unit[2]) + 1}/{UNIT_KEYS[unit[3]]}"
        else:
            unknown.append(PREFIX + key)
            continue
        if name.endswith("/kernel") and array.ndim != 4:
            raise CheckpointError(f"Checkpoint {path!r}: {PREFIX + key!r} has shape {tuple(array.shape)}, "
                                  "expected (O, I, kh, kw).")
        out[name] = array.transpose(2, 3, 1, 0) if name.endswith("/kernel") else array
    if unknown:
        raise CheckpointError(
            f"Checkpoint {path!r} is a timm hybrid whose backbone has {len(unknown)} key(s) that keras_vit's ResNet-v2 "
            f"(timm's _resnetv2 of vision_transformer_hybrid.py) does not have: {', '.join(sorted(unknown)[:10])}"
        )
    return out


def on_feature_map(expected, resolved, tensors, path):
    """``expected`` (what a timm config states) with its image size read on the backbone's feature map, where the
    hybrid's patches are cut (``ceil(size / stride)``, the ``SAME`` rule); unchanged for a plain ViT. The stages in
    the state dict are checked against the registration's (``backbone_layers``)."""
    if tensors is None:
        return expected
    layers, said = resolved.get("backbone_layers", (None, None))
    if not is_hybrid(tensors.shapes):
        if said is not None:
            raise CheckpointError(
                f"{path!r}: config.json says {said} but the weights have no backbone ('{PREFIX}*'): "
                "the config belongs to another model, or the weights do."
            )
        return expected
    units = block_units_of(to_original(tensors.stand_ins(), path))  # from the shapes, no data
    if said is not None and tuple(layers) != units:
        raise CheckpointError(
            f"{path!r}: config.json says {said} but the weights' backbone has stages of {units} units "
            f"('{PREFIX}stages.*'): the config belongs to another model, or the weights do."
        )
    stride = backbone_stride(units)
    out = []
    for quantity, field, value in expected:
        if quantity == "image_size":
            value = tuple(-(-int(v) // stride) for v in value)
            field = f"{field} (a {value[0]}x{value[1]} feature map at the backbone's stride {stride})"
        out.append((quantity, field, value))
    return out


def declare_backbone(record, tensors, weights):
    """Declare ``resnet_norms="timm"`` in the record of a timm hybrid (its backbone's normalisation constants)."""
    if tensors is not None and is_hybrid(tensors.shapes):
        declare(record, "resnet_norms", NORMS, f"'{PREFIX}*' (timm's hybrid ResNetV2: StdConv2dSame eps=1e-8 on the "
                "variance, GroupNormAct eps=1e-5)", weights)
