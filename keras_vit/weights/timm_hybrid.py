"""timm's hybrid ViT (``patch_embed.backbone.*``) -> the original hybrid ``.npz`` keys, and what its backbone computes.

timm builds the paper's hybrids (``vision_transformer_hybrid.py``) as a ``VisionTransformer`` whose ``patch_embed``
is a ``HybridEmbed`` over ``_resnetv2(layers)`` (for ``layers=()`` its stem alone, right under ``backbone``); the
hybrid branch of its ``_load_weights`` defines the correspondence inverted here. The graph and the padding are
keras_vit's (``StdConv2dSame`` pads as TensorFlow's ``SAME``); the normalisation constants differ (``eps=1e-8`` on
the variance, ``GroupNormAct`` eps 1e-5), so a timm hybrid declares ``resnet_norms="timm"``
(:data:`keras_vit.layers.resnet.RESNET_NORMS`; ``tools/check_timm_hybrids.py`` checks it against timm).

MobileCLIP's ``ConvStem`` (``vit_base_mci_224``: patchify convolutions ``4 x 4 / 4`` and ``2 x 2 / 2``, each with
BatchNorm and GELU, then a ``2 x 2 / 2`` convolution with a bias, under a ``HybridEmbed`` without projection) is
keras_vit's conv stem of patchify convolutions (``stem_strides``, ``stem_norm_epsilon``) whose patch projection is
the last convolution: ``backbone.{i}.conv`` / ``bn`` are ``stem/conv_{i}`` / ``stem/norm_{i}``, the last
``embedding``. Other backbones (ResNet-D) and ``padding_same=False`` (:data:`keras_vit.weights.timm_models.SWITCHES`)
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
}
_CONV_STEM = re.compile(r"^(\d+)\.(conv\.weight|conv\.bias|bn\.(weight|bias|running_mean|running_var|num_batches_tracked))$")
_BATCH_NORM = {"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"}


def is_conv_stem(embed_layer):
    """Whether timm's ``embed_layer`` argument (as its registration table records it) is a ``ConvStem``."""
    backbone = embed_layer.get("backbone") if isinstance(embed_layer, dict) else None
    return isinstance(backbone, dict) and backbone.get("module") == "ConvStem"


def conv_stem(embed_layer):
    """``(fields, lacking)``: keras_vit's conv stem of timm's ``ConvStem`` (:func:`is_conv_stem`) as a dict of
    ``stem_channels``, ``stem_strides``, ``stem_norm_epsilon`` and the ``patch_size`` and width of its last
    convolution (keras_vit's patch projection); or None and what keras_vit lacks."""
    convs = embed_layer["backbone"].get("convs") or []
    *stem, last = convs if convs else [None]

    def patchify(c):  # a kernel its stride, no padding: keras_vit's patchify convolution
        return c["kernel"][0] == c["kernel"][1] == c["stride"][0] == c["stride"][1] and not any(c["padding"] or [0])

    plain = (last is not None and stem and embed_layer.get("proj") is False and all(map(patchify, convs))
             and last["bias"] and last["norm"] == "Sequential" and last["act"] is None
             and all(not c["bias"] and c["norm"] == "BatchNormAct2d" and c["act"] == "nn.GELU" and c["act_approximate"] == "none"
                     for c in stem) and len({c["norm_eps"] for c in stem}) == 1)
    if not plain:
        return None, ("a ConvStem other than patchify convolutions with BatchNorm and exact GELU and a last convolution "
                      "with a bias under a HybridEmbed without projection (MobileCLIP's)")
    return {"stem_channels": [c["channels"] for c in stem], "stem_strides": [c["stride"][0] for c in stem],
            "stem_norm_epsilon": stem[0]["norm_eps"], "patch_size": last["stride"][0], "width": last["channels"]}, None


def _conv_stem_to_original(backbone, path):
    """``{original key: array}`` of a ``ConvStem``'s ``{i}.conv`` / ``{i}.bn`` keys (after the prefix)."""
    found = {key: _CONV_STEM.match(key) for key in backbone}
    unknown = sorted(PREFIX + key for key, match in found.items() if match is None)
    if unknown:
        raise CheckpointError(f"Checkpoint {path!r}: timm ConvStem key(s) keras_vit's conv stem does not have: "
                              f"{', '.join(unknown[:10])}")
    last = max(int(match[1]) for match in found.values())
    out = {}
    for key, match in found.items():
        i, part = int(match[1]), match[2]
        if part.endswith("num_batches_tracked"):
            continue  # a training counter: no weight
        array = backbone[key]
        if part.startswith("conv."):
            if part == "conv.weight" and np.ndim(array) != 4:
                raise CheckpointError(f"Checkpoint {path!r}: {PREFIX + key!r} has shape {tuple(np.shape(array))}, expected (O, I, kh, kw).")
            if (i == last) != (f"{i}.conv.bias" in backbone):
                raise CheckpointError(f"Checkpoint {path!r}: {PREFIX + key!r}: a ConvStem's last convolution alone has a "
                                      "bias (keras_vit's patch projection); its others have BatchNorm.")
            name = ("embedding" if i == last else f"stem/conv_{i}") + ("/kernel" if part == "conv.weight" else "/bias")
            out[name] = array.transpose(2, 3, 1, 0) if part == "conv.weight" else array
        else:
            out[f"stem/norm_{i}/{_BATCH_NORM[match[3]]}"] = array
    return out


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
    if backbone and all(re.match(r"^\d+\.", key) for key in backbone):  # a Sequential of ConvNormAct: ConvStem
        return _conv_stem_to_original(backbone, path)
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
    stem, stem_said = resolved.get("conv_stem", (None, None))
    if stem is not None:
        return _on_conv_stem(expected, stem, stem_said, tensors, path)
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


def _on_conv_stem(expected, stem, said, tensors, path):
    """``expected`` of a ConvStem model: the image size on the stem's feature map and the patch size its last
    convolution's (timm's ``patch_size=1`` is on the stem's output, after that convolution)."""
    said = said.split(" (timm registers")[0] + " (timm's ConvStem)"  # not the table's dict
    if not any(re.match(rf"^{re.escape(PREFIX)}\d+\.conv\.weight$", key) for key in tensors.shapes):
        raise CheckpointError(f"{path!r}: config.json says {said} but the weights have no ConvStem "
                              f"('{PREFIX}0.conv.weight'...): the config belongs to another model, or the weights do.")
    stride, out = int(np.prod(stem["stem_strides"])), []
    for quantity, field, value in expected:
        if quantity == "patch_size":
            value, field = stem["patch_size"], f"{said} (its last convolution, {stem['patch_size']} x {stem['patch_size']}, as the patches)"
        elif quantity == "image_size":
            value = tuple(-(-int(v) // stride) for v in value)
            field = f"{field} (a {value[0]}x{value[1]} feature map at the stem's stride {stride})"
        out.append((quantity, field, value))
    return out


def declare_backbone(record, tensors, weights, resolved=None):
    """Declare ``resnet_norms="timm"`` in the record of a timm hybrid (its backbone's normalisation constants), or a
    ConvStem's strides and BatchNorm epsilon (which its weights do not show) from its registration."""
    stem, said = (resolved or {}).get("conv_stem", (None, None))
    if stem is not None and tensors is not None:
        for field in ("stem_strides", "stem_norm_epsilon"):
            value = tuple(stem[field]) if field == "stem_strides" else stem[field]
            declare(record, field, value, f"{said} (timm's ConvStem: {field}={value!r})", weights)
        return
    if tensors is not None and is_hybrid(tensors.shapes):
        declare(record, "resnet_norms", NORMS, f"'{PREFIX}*' (timm's hybrid ResNetV2: StdConv2dSame eps=1e-8 on the "
                "variance, GroupNormAct eps=1e-5)", weights)
