"""The ViT family's switches in :class:`~keras_vit.architecture.config.ViTConfig`: their checks and defaults.

DINOv2, SigLIP, CLIP, DeiT, DeiT-III, MAE and timm's register models are the paper's architecture with
a few switches (tokens, LayerScale, activation, gated MLP, qkv bias, extra norms, attention pooling, a
projection, the input's mean and std). Each switch is a field of the config; this module checks them
together, so an impossible combination is refused by name before anything is built.
"""

import math
import numbers

from keras_vit.architecture import norm_bias
from keras_vit.layers import rope as rope_lib
from keras_vit.layers.kernels import ACTIVATIONS
from keras_vit.layers.resampling import RESAMPLING_METHODS
from keras_vit.layers.transformer import MLP_TYPES

# the fields this module checks, with the paper's values: a config with these is the paper's ViT
PAPER = {
    "distillation_token": False,
    "num_register_tokens": 0,
    "prefix_positions": True,
    "register_positions": False,
    "layer_scale_init": None,
    "mlp_activation": "gelu",
    "mlp_type": "mlp",
    "qkv_bias": True,
    "pre_norm": False,
    "final_norm": True,
    "fc_norm": False,
    "projection_dim": None,
    "map_num_heads": None,
    "map_mlp_dim": None,
    "input_mean": (0.5, 0.5, 0.5),
    "input_std": (0.5, 0.5, 0.5),
    "position_resampling": "linear_aligned",
    "rope": None,
    "position_embedding": True,
    **norm_bias.PAPER,
    "mlp_norm": False,
    "attention_norm": False,
    "res_post_norm": False,
    "parallel_blocks": False,
    "differential_attention": False,
    "pool_include_prefix": False,
}
# the poolings that read the patch tokens only, or every token with pool_include_prefix
PREFIX_POOLINGS = ("gap", "avg", "max", "map")
# the RoPE fields' values without RoPE (each is read only with one)
ROPE_DEFAULTS = {"rope_temperature": None, "rope_grid_indexing": "xy", "rope_grid_offset": 0.0, "rope_reference_grid": None}


# "map" and "token_gap_concat" are the family's; keras.applications' "avg", "max" and "feature_map" read no
# weights of their own: the paper's model (and its checkpoints) with another output
PAPER_POOLING = ("token", "gap", None, "avg", "max", "feature_map")


def is_paper(config):
    """True when every family switch has the paper's value (and the class token follows the pooling).

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> is_paper(ViTConfig()), is_paper(ViTConfig(num_register_tokens=4))
    (True, False)
    """
    same = all(_same(getattr(config, name), value) for name, value in PAPER.items())
    return same and config.class_token == (config.pooling != "gap") and config.pooling in PAPER_POOLING


def validate(config, set_):
    """Check and normalise the family's fields of ``config`` (a ``ViTConfig`` being created); ``set_(name, value)``
    stores a normalised value. Raises a ``ValueError`` naming the fields of an impossible combination."""
    class_token = config.class_token
    if class_token is None:
        class_token = config.pooling != "gap"
    elif not isinstance(class_token, (bool, numbers.Integral)):
        raise ValueError(f"`class_token` must be a bool or None. Received: class_token={class_token!r}")
    set_("class_token", bool(class_token))
    for flag in ("distillation_token", "prefix_positions", "register_positions", "qkv_bias", "pre_norm", "final_norm", "fc_norm", "mlp_norm",
                 "attention_norm", "res_post_norm", "pool_include_prefix", "parallel_blocks",
                 "differential_attention"):
        value = getattr(config, flag)
        if not isinstance(value, (bool, numbers.Integral)):
            raise ValueError(f"`{flag}` must be a bool. Received: {flag}={value!r}")
        set_(flag, bool(value))
    registers = config.num_register_tokens
    if isinstance(registers, bool) or not isinstance(registers, numbers.Integral) or registers < 0:
        raise ValueError(f"`num_register_tokens` must be an int >= 0. Received: num_register_tokens={registers!r}")
    set_("num_register_tokens", int(registers))
    scale = config.layer_scale_init
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"`layer_scale_init` must be a positive number or None. Received: layer_scale_init={scale!r}")
        set_("layer_scale_init", float(scale))
    if config.mlp_activation not in ACTIVATIONS:
        raise ValueError(f"Unknown `mlp_activation`: expected one of {ACTIVATIONS}. Received: mlp_activation={config.mlp_activation!r}")
    if config.mlp_type not in MLP_TYPES:
        raise ValueError(f"Unknown `mlp_type`: expected one of {MLP_TYPES}. Received: mlp_type={config.mlp_type!r}")
    if config.projection_dim is not None:
        if isinstance(config.projection_dim, bool) or not isinstance(config.projection_dim, numbers.Integral) or config.projection_dim < 1:
            raise ValueError(f"`projection_dim` must be a positive int or None. Received: projection_dim={config.projection_dim!r}")
    if config.position_resampling not in RESAMPLING_METHODS:
        raise ValueError(
            f"Unknown `position_resampling`: expected one of {RESAMPLING_METHODS}. "
            f"Received: position_resampling={config.position_resampling!r}"
        )
    for name in ("input_mean", "input_std"):
        set_(name, _channels(getattr(config, name), name, positive=name == "input_std"))
    _check_rope(config, set_)
    norm_bias.validate(config, set_)
    _check_map(config)
    _check_combinations(config)


def _check_rope(config, set_):
    """The RoPE fields checked and normalised (``rope_temperature`` None: RoPE-ViT's for the kind)."""
    if not isinstance(config.position_embedding, (bool, numbers.Integral)):
        raise ValueError(f"`position_embedding` must be a bool. Received: position_embedding={config.position_embedding!r}")
    set_("position_embedding", bool(config.position_embedding))
    if config.rope is None:
        for name, default in ROPE_DEFAULTS.items():
            if getattr(config, name) != default:
                raise ValueError(f"`{name}` is read only with rope in {rope_lib.KINDS}. Received: rope=None, {name}={getattr(config, name)!r}")
        return
    if config.rope not in rope_lib.KINDS:
        raise ValueError(f"Unknown `rope`: expected None or one of {rope_lib.KINDS}. Received: rope={config.rope!r}")
    temperature = config.rope_temperature
    if temperature is None:
        temperature = rope_lib.DEFAULT_TEMPERATURE[config.rope]
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"`rope_temperature` must be a positive number or None. Received: rope_temperature={temperature!r}")
    set_("rope_temperature", float(temperature))
    if config.rope_grid_indexing not in rope_lib.GRID_INDEXINGS:
        raise ValueError(f"Unknown `rope_grid_indexing`: expected one of {rope_lib.GRID_INDEXINGS}. "
                         f"Received: rope_grid_indexing={config.rope_grid_indexing!r}")
    offset = config.rope_grid_offset
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real) or not math.isfinite(offset):
        raise ValueError(f"`rope_grid_offset` must be a finite number. Received: rope_grid_offset={offset!r}")
    set_("rope_grid_offset", float(offset))
    reference = config.rope_reference_grid
    if reference is not None:
        if isinstance(reference, (str, bytes)) or not hasattr(reference, "__len__") or len(reference) != 2 or not all(
                isinstance(n, numbers.Integral) and not isinstance(n, bool) and n > 0 for n in reference):
            raise ValueError(f"`rope_reference_grid` must be None or (rows, cols) of positive ints. "
                             f"Received: rope_reference_grid={reference!r}")
        set_("rope_reference_grid", (int(reference[0]), int(reference[1])))
    refuse = []
    head_dim = config.hidden_size // config.num_heads
    if head_dim % 4:
        refuse.append(f"2-D RoPE rotates pairs of channels on two axes: the head width hidden_size / num_heads = {head_dim} "
                      "must be a multiple of 4")
    if config.image_size is None:
        refuse.append("RoPE's angles are built for the model's patch grid: image_size=None (a grid known only when the "
                      "model runs) is not supported with rope; build a fixed image_size (resize_model changes it)")
    if config.rope == "mixed" and config.rope_grid_offset:
        refuse.append(f"rope='mixed' (timm's RotaryEmbeddingMixed) has no grid offset. Received: rope_grid_offset={offset!r}")
    if config.rope != "axial" and config.rope_reference_grid is not None:
        refuse.append(f"rope_reference_grid scales axial RoPE's coordinates (timm's ref_feat_shape of rope_type='cat'); "
                      f"rope={config.rope!r} has none. Received: rope_reference_grid={config.rope_reference_grid!r}")
    if refuse:
        raise ValueError("Impossible ViTConfig: " + "; ".join(refuse))


def _check_map(config):
    """The attention pooling head's own heads and MLP width (None: the blocks'), read only with ``pooling="map"``."""
    for name in ("map_num_heads", "map_mlp_dim"):
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"`{name}` must be a positive int or None. Received: {name}={value!r}")
        if config.pooling != "map":
            raise ValueError(f"`{name}` sizes the attention pooling head: it is read only with pooling='map'. "
                             f"Received: pooling={config.pooling!r}, {name}={value!r}")
    heads = config.map_num_heads
    if heads is not None and config.hidden_size % heads:
        raise ValueError(f"Impossible ViTConfig: the attention pooling head splits hidden_size={config.hidden_size} "
                         f"into map_num_heads={heads} heads, which do not divide it")


def _check_combinations(config):
    """The combinations no source publishes and the graph cannot give a meaning to."""
    refuse = []
    if config.pooling in ("token", "token_gap_concat") and not config.class_token:
        refuse.append(f"pooling={config.pooling!r} reads the class token: class_token=False leaves none")
    if config.pooling == "token_gap_concat" and config.fc_norm:
        refuse.append("fc_norm normalises a vector of the width: pooling='token_gap_concat' gives 2 x hidden_size")
    if config.pool_include_prefix and config.pooling not in PREFIX_POOLINGS:
        refuse.append(f"pool_include_prefix is read by the {', '.join(PREFIX_POOLINGS)} poolings. Received pooling={config.pooling!r}")
    if config.res_post_norm and config.layer_scale_init is not None:
        refuse.append("residual post-norm blocks have no LayerScale (the norms' scales play its part): layer_scale_init=None")
    if config.parallel_blocks and config.res_post_norm:
        refuse.append("a parallel block normalises its input once, before both branches: res_post_norm=False")
    if config.differential_attention and (config.rope or config.attention_norm):
        refuse.append("differential attention has no rotary position embeddings or inner norm (timm's DiffAttention): "
                      "rope=None, attention_norm=False")
    if config.differential_attention and (config.hidden_size // config.num_heads) % 2:
        refuse.append(f"differential attention cuts each head's query and key in halves: hidden_size / num_heads "
                      f"= {config.hidden_size // config.num_heads} must be even")
    if config.distillation_token and not config.class_token:
        refuse.append("a distillation token follows the class token: class_token=False")
    if config.distillation_token and config.pooling != "token":
        refuse.append(f"a distillation token is read with pooling='token' (DeiT's two heads). Received pooling={config.pooling!r}")
    if config.distillation_token and (config.representation_size or config.projection_dim or config.fc_norm):
        refuse.append("DeiT's two heads read the tokens directly: no representation_size, projection_dim or fc_norm")
    if config.fc_norm and config.final_norm:
        refuse.append("fc_norm replaces the final norm (as in timm): set final_norm=False with fc_norm=True")
    if not config.pooled and (config.fc_norm or config.projection_dim):
        refuse.append(f"fc_norm and projection_dim act on the pooled vector: pooling={config.pooling!r} has none")
    if config.register_positions and not (config.num_register_tokens and config.prefix_positions
                                          and config.position_embedding):
        refuse.append("register_positions adds the register tokens' rows to a position table that has the class "
                      "token's: it needs num_register_tokens > 0, prefix_positions=True and position_embedding=True. "
                      f"Received: num_register_tokens={config.num_register_tokens}, prefix_positions="
                      f"{config.prefix_positions}, position_embedding={config.position_embedding}")
    if config.stem is not None and (config.distillation_token or config.num_register_tokens):
        # a class token with or without its position (MobileCLIP's ConvStem model has timm's no_embed_class)
        refuse.append(f"stem={config.stem!r} models have the paper's tokens only (no registers or distillation token)")
    if refuse:
        raise ValueError("Impossible ViTConfig: " + "; ".join(refuse))


def is_paper_tokens(config):
    return not config.distillation_token and not config.num_register_tokens and config.prefix_positions


def _channels(value, name, positive):
    try:
        values = tuple(float(v) for v in value) if not isinstance(value, (str, bytes)) else ()
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or not all(math.isfinite(v) for v in values) or (positive and min(values) <= 0):
        what = "three positive numbers" if positive else "three finite numbers"
        raise ValueError(f"`{name}` must be {what} (R, G, B in [0, 1] units). Received: {name}={value!r}")
    return values


def _same(a, b):
    if isinstance(b, tuple):
        return tuple(a) == b
    return a == b
