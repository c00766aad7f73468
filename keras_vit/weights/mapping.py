"""Where each checkpoint key goes in a keras_vit model (:func:`targets_of`): the variables found by their paths
(``transformer_block_0/attention/query/kernel``, the names ``.keras`` files store), never through private
attributes of the layers.
"""

import dataclasses
import re

import numpy as np

from keras_vit.architecture.model import config_of
from keras_vit.errors import CheckpointError
from keras_vit.layers.resnet import ResidualUnit

POSEMB_KEY = "Transformer/posembed_input/pos_embedding"
FACTORIZED_KEYS = (POSEMB_KEY + "_rows", POSEMB_KEY + "_cols")  # NaFlex's factorised tables (1, rows, D), (1, cols, D)
PATCH_KERNEL_KEY = "embedding/kernel"
KERAS_PREFIX = "keras/"  # keys of weights that only .keras sources carry (none the original layout lacks today)
HEAD_KEYS = ("head/kernel", "head/bias")
CLASSIFIER_KEYS = (*HEAD_KEYS, "head_dist/kernel", "head_dist/bias")  # a new head is new in both (distilled DeiT)
ATT = "MultiHeadDotProductAttention_1"  # a block's attention
MAP_ATT = "MAPHead_0/MultiHeadDotProductAttention_0"  # the attention-pooling head's

# Flax parameter names -> Keras weight names
_NORM_WEIGHTS = {"scale": "gamma", "bias": "beta"}
_KEYS_OF_NORM_WEIGHTS = {name: key for key, name in _NORM_WEIGHTS.items()}
_ATTENTION = (("query", "query"), ("key", "key"), ("value", "value"), ("out", "attention_output"))
# inside encoder block i: checkpoint key under Transformer/encoderblock_{i}/ -> weight path under the block
BLOCK_KEYS = {
    **{f"LayerNorm_0/{key}": f"layer_norm_1/{name}" for key, name in _NORM_WEIGHTS.items()},
    **{f"{ATT}/{part}/{kind}": f"attention/{layer}/{kind}"
       for part, layer in _ATTENTION for kind in ("kernel", "bias")},
    **{f"LayerNorm_2/{key}": f"layer_norm_2/{name}" for key, name in _NORM_WEIGHTS.items()},
    **{f"MlpBlock_3/Dense_{i}/{kind}": f"mlp_dense_{i + 1}/{kind}" for i in (0, 1) for kind in ("kernel", "bias")},
}
# the ViT family's parts (keras_vit's canonical keys; big_vision's names where big_vision has the part):
# inside encoder block i, LayerScale of the attention and MLP branches
LAYER_SCALE_KEYS = {"LayerScale_1/gamma": "layer_scale_1/gamma", "LayerScale_3/gamma": "layer_scale_2/gamma"}
# inside encoder block i, RoPE-Mixed's learnable frequencies (2, heads, head_dim / 2) (keras_vit's canonical key)
ROPE_KEYS = {f"{ATT}/rope_frequencies": "attention/rope_frequencies"}
# inside encoder block i, differential attention's lambda vectors (key_dim / 2) and head norm (keras_vit's canonical keys)
DIFFERENTIAL_KEYS = {**{f"{ATT}/{name}": f"attention/{name}" for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")},
                     f"{ATT}/sub_norm/scale": "attention/sub_norm/gamma"}
# inside encoder block i, NormFormer's sub-LayerNorms (keras_vit's canonical keys): the MLP's and the attention's
MLP_NORM_KEYS = {f"MlpBlock_3/LayerNorm_0/{key}": f"mlp_norm/{name}" for key, name in _NORM_WEIGHTS.items()}
ATTENTION_NORM_KEYS = {f"{ATT}/LayerNorm_0/{key}": f"attention/inner_norm/{name}"
                       for key, name in _NORM_WEIGHTS.items()}
# top level: checkpoint key -> weight path (each present only where the model's config has the part)
FAMILY_KEYS = {
    "dist": "patch_encoder/distillation_token",
    "reg": "patch_encoder/register_tokens",
    **{f"{key}/{weight}": f"{path}/{name}" for key, path in (
        ("Transformer/pre_norm", "pre_norm"), ("embedding_norm", "patch_encoder/patch_norm"),  # AIMv2's patch norm
        ("fc_norm", "fc_norm")) for weight, name in _NORM_WEIGHTS.items()},
    "projection/kernel": "projection/kernel",
    "head_dist/kernel": "head_distillation/kernel",
    "head_dist/bias": "head_distillation/bias",
    "MAPHead_0/probe": "map_head/probe",
    FACTORIZED_KEYS[0]: "patch_encoder/position_embedding_rows",
    FACTORIZED_KEYS[1]: "patch_encoder/position_embedding_cols",
    **{f"MAPHead_0/LayerNorm_0/{key}": f"map_head/layer_norm/{name}" for key, name in _NORM_WEIGHTS.items()},
    **{f"MAPHead_0/MlpBlock_0/Dense_{i}/{kind}": f"map_head/mlp_dense_{i + 1}/{kind}"
       for i in (0, 1) for kind in ("kernel", "bias")},
}
# a conv stem's convolution i and its BatchNorm (keras_vit's canonical keys) -> weight paths
CONV_STEM_KEYS = {"stem/conv_{}/kernel": "stem_conv_{}/kernel", "stem/norm_{}/scale": "stem_norm_{}/gamma",
                  "stem/norm_{}/bias": "stem_norm_{}/beta", "stem/norm_{}/mean": "stem_norm_{}/moving_mean",
                  "stem/norm_{}/var": "stem_norm_{}/moving_variance"}
# the MAP head's attention: big_vision's (D, heads, head_dim) kernels, or merged (D, D) as timm and transformers
# store them -> keras_vit's (D, D) Dense kernels
MAP_ATTENTION_KEYS = {f"{MAP_ATT}/{name}/{kind}": f"map_head/{layer}/{kind}"
                      for name, layer in _ATTENTION for kind in ("kernel", "bias")}


@dataclasses.dataclass
class Target:
    """Where a checkpoint tensor goes: a variable and the expected file shape; ``merged``: an attention tensor, which
    timm and transformers store with two head axes merged, e.g. ``(D, D)`` for ``(D, heads, head_dim)``."""

    variable: object
    shape: tuple  # shape expected in the checkpoint
    merged: bool = False

    def accepts(self, shape):
        """Whether a checkpoint tensor of this shape fits (subclasses accept other layouts)."""
        own = tuple(self.shape)
        merged = {own[:-2] + (int(np.prod(own[-2:])),), (int(np.prod(own[:2])),) + own[2:]} if self.merged else ()
        return tuple(shape) == own or tuple(shape) in merged

    def convert(self, array):
        return np.reshape(array, tuple(self.variable.shape))


class MergedHeadsTarget(Target):
    """A Dense kernel or bias stored by big_vision with its head axes apart: ``(D, heads, hd)``, ``(heads, hd, D)``
    or ``(heads, hd)``; the merged shape (timm, transformers) is accepted too."""

    def accepts(self, shape):
        return super().accepts(shape) or (int(np.prod(shape)) == int(np.prod(self.shape)) and len(shape) == len(self.shape) + 1)


class GroupNormTarget(Target):
    """A GroupNorm scale/bias: ``(C,)``, or ``(1, 1, 1, C)`` as older Flax saved it."""

    def accepts(self, shape):
        return tuple(shape) in (tuple(self.shape), (1, 1, 1) + tuple(self.shape))


def layer_weights(layer):
    """``{"<layer name>/<path inside the layer>": variable}`` for one layer of a model: a variable's path from the
    layer's own name on (past the name scopes it was built under)."""
    found = {}
    marker = f"/{layer.name}/"
    for variable in layer.weights:
        path = "/" + variable.path
        start = path.find(marker)
        if start < 0:
            raise CheckpointError(f"Weight {variable.path!r} is not under layer {layer.name!r}.")
        found[path[start + 1:]] = variable
    return found


def _target(weights, path, model, cls=Target, key=""):
    variable = weights.get(path)
    if variable is None:
        raise CheckpointError(f"Model {model.name!r} has no weight {path!r}: not a keras_vit ViT?")
    return cls(variable, tuple(variable.shape), "MultiHeadDotProductAttention" in key)


def targets_of(model):
    """``{checkpoint key: Target}`` for every weight of a keras_vit model: the embedding, encoder and head of its ViT
    (plain or hybrid), and the ResNet's of a hybrid (:func:`hybrid_targets`).

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
    ...                       num_heads=4, mlp_dim=64, num_classes=5)
    >>> targets = targets_of(model)
    >>> targets["embedding/kernel"].shape, targets["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/out/kernel"].shape
    ((8, 8, 3, 32), (4, 8, 32))
    >>> model = keras_vit.HybridViT(block_units=(1,), width=0.5, image_size=32, hidden_size=32,
    ...                             num_layers=1, num_heads=2, mlp_dim=64, num_classes=3)
    >>> targets = targets_of(model)
    >>> targets["block1/unit1/conv_proj/kernel"].shape, len(targets) == len(model.weights)
    ((1, 1, 32, 128), True)
    """
    config = config_of(model)
    weights = {path: variable for layer in model.layers for path, variable in layer_weights(layer).items()}
    (ph, pw), width = config.patch_size, config.hidden_size
    kernel = _target(weights, "patch_encoder/projection/kernel", model)
    channels = kernel.shape[0] // (ph * pw)  # of the image, or of a stem's feature map
    targets = {
        PATCH_KERNEL_KEY: Target(kernel.variable, (ph, pw, channels, width)),
        "embedding/bias": _target(weights, "patch_encoder/projection/bias", model),
    }
    if config.class_token:
        targets["cls"] = _target(weights, "patch_encoder/class_token", model)
    if config.position_embedding and not config.factorized_positions:  # NaFlex's factorised tables: FAMILY_KEYS
        targets[POSEMB_KEY] = _target(weights, "patch_encoder/position_embedding", model)
    block_keys = {key: path for key, path in BLOCK_KEYS.items() if _has_block_key(config, key)}
    if config.layer_scale_init is not None:
        block_keys.update(LAYER_SCALE_KEYS)
    if config.parallel_blocks:  # one norm before both branches, one LayerScale of their sum
        block_keys = {key: path for key, path in block_keys.items() if not key.startswith(("LayerNorm_2/", "LayerScale_3/"))}
    if config.rope == "mixed":
        block_keys.update(ROPE_KEYS)
    if config.differential_attention:
        block_keys.update(DIFFERENTIAL_KEYS)
    block_keys.update(MLP_NORM_KEYS if config.mlp_norm else {}, **(ATTENTION_NORM_KEYS if config.attention_norm else {}))
    for i in range(config.num_layers):
        for key, path in block_keys.items():
            targets[f"Transformer/encoderblock_{i}/{key}"] = _target(weights, f"transformer_block_{i}/{path}", model, key=key)
    if config.final_norm:
        for key, name in _NORM_WEIGHTS.items() if config.norm_type == "layernorm" else [("scale", "gamma")]:
            targets[f"Transformer/encoder_norm/{key}"] = _target(weights, f"encoder_norm/{name}", model)
    # the parts a model has or not (a head: not with include_top=False)
    heads = {key: key for key in ("pre_logits/kernel", "pre_logits/bias", *HEAD_KEYS)}
    for key, path in {**FAMILY_KEYS, **MAP_ATTENTION_KEYS, **heads}.items():
        if path in weights:
            targets[key] = _target(weights, path, model, MergedHeadsTarget if key in MAP_ATTENTION_KEYS else Target, key)
    if config.stem == "resnet":  # a hybrid
        targets.update(hybrid_targets(model))
    for i in range(len(config.stem_channels)):  # a conv stem: each convolution and its BatchNorm
        for key, path in CONV_STEM_KEYS.items():
            targets[key.format(i)] = _target(weights, path.format(i), model)
    return targets


def _has_block_key(config, key):
    """Whether a block of ``config`` has the weight of ``key`` (of :data:`BLOCK_KEYS`): the biases of the switches."""
    if not key.endswith("/bias"):
        return True
    if key.startswith("LayerNorm_"):
        return config.norm_type == "layernorm"  # RMSNorm has no bias
    if key.startswith("MlpBlock_3/"):
        return config.mlp_bias
    if "/out/" in key:
        return config.proj_bias
    return config.qkv_bias or not any(f"/{name}/" in key for name in ("query", "key", "value"))


_UNIT_NAME = re.compile(r"^block(\d+)_unit(\d+)$")


def _resnet_layer_targets(checkpoint_prefix, layer):
    """``{conv}/kernel`` and ``{gn}/scale|bias`` keys of the root or of one unit, from the layer's weight paths."""
    targets = {}
    for path, variable in layer_weights(layer).items():
        *_, sublayer, name = path.split("/")
        head = f"{checkpoint_prefix}/{sublayer}" if sublayer != layer.name else checkpoint_prefix
        if name == "kernel":
            targets[f"{head}/kernel"] = Target(variable, tuple(variable.shape))
        elif name in _KEYS_OF_NORM_WEIGHTS:
            targets[f"{head}/{_KEYS_OF_NORM_WEIGHTS[name]}"] = GroupNormTarget(variable, tuple(variable.shape))
        else:
            raise CheckpointError(f"Weight {variable.path!r} has no place in a ResNet checkpoint.")
    return targets


def hybrid_targets(model):
    """Checkpoint keys of a hybrid's ResNet part: ``conv_root``, ``gn_root``, ``block{i}/unit{j}/...``."""
    layers = {layer.name: layer for layer in model.layers}
    targets = {**_resnet_layer_targets("conv_root", layers["conv_root"]),
               **_resnet_layer_targets("gn_root", layers["gn_root"])}
    for name, layer in layers.items():
        match = _UNIT_NAME.match(name)
        if match and isinstance(layer, ResidualUnit):
            targets.update(_resnet_layer_targets(f"block{match[1]}/unit{match[2]}", layer))
    return targets


def keras_targets(model, targets):
    """``{"keras/<layer>/<weight>": Target}`` for the weights of ``model`` that ``targets`` leaves out, which only a
    ``.keras`` source carries (none today: a conv stem's have the canonical ``stem/conv_{i}`` / ``stem/norm_{i}`` keys
    since timm's ConvStem is read).

    Example:
    >>> from keras_vit.models.small import conv_stem_vit
    >>> model = conv_stem_vit(stem_channels=(8,), hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    >>> keras_targets(model, targets_of(model)), "stem/norm_0/var" in targets_of(model)
    ({}, True)
    """
    mapped = {id(target.variable) for target in targets.values()}
    extra = {}
    for layer in model.layers:
        for path, variable in layer_weights(layer).items():
            if id(variable) not in mapped:
                extra[KERAS_PREFIX + path] = Target(variable, tuple(variable.shape))
    return extra


def block_units_of(checkpoint):
    """ResNet stage sizes ``(units of block1, block2, ...)`` stored in a checkpoint, () if none.

    Example:
    >>> block_units_of({"block1/unit1/conv1/kernel": 0, "block1/unit2/conv1/kernel": 0, "block2/unit1/gn1/scale": 0})
    (2, 1)
    """
    units = {}
    for key in checkpoint:
        match = re.match(r"^block(\d+)/unit(\d+)/", key)
        if match:
            stage, unit = int(match[1]), int(match[2])
            units[stage] = max(units.get(stage, 0), unit)
    return tuple(units.get(i, 0) for i in range(1, max(units, default=0) + 1))


def check_hybrid_stages(checkpoint, block_units, path):
    """Refuse a checkpoint (arrays or shapes) whose ResNet stages are not ``block_units``, naming the first key that differs."""
    found = block_units_of(checkpoint)
    if "conv_root/kernel" not in checkpoint:
        raise CheckpointError(
            f"Checkpoint {path!r} has no ResNet root (key 'conv_root/kernel' is missing): "
            "is it a plain ViT checkpoint? Use keras_vit.ViT for it."
        )
    wanted = tuple(block_units)
    if found != wanted:
        stage = next(i for i in range(max(len(found), len(wanted))) if found[i:i + 1] != wanted[i:i + 1])
        want = wanted[stage] if stage < len(wanted) else 0
        have = found[stage] if stage < len(found) else 0
        key = f"block{stage + 1}/unit{min(have, want) + 1}/conv1/kernel"
        what = "missing" if want > have else "unexpected"
        raise CheckpointError(
            f"Checkpoint {path!r} has ResNet stages of {found} units, the model {wanted}: "
            f"key {key!r} is {what}. Pass block_units={found} (or the builder of that checkpoint)."
        )
