"""The NaFlex input path of a keras_vit model (``ViTConfig(input_mode="naflex")``): its fields' checks and its graph.

The same ViT (blocks, norms, pooling, head, weights) takes, instead of images of one size, the dict of
:mod:`keras_vit.layers.naflex_grid`: each image's patches at its own aspect ratio under a budget of ``max_patches``,
their ``(row, col)`` coordinates and a validity mask (timm's ``NaFlexVit`` dict input). What changes:

* the inputs ``{"patches": (B, max_patches, ph * pw * 3), "patch_coord": (B, max_patches, 2) int32,
  "patch_valid": (B, max_patches) bool}`` (``max_patches=None``: any length);
* the patch embedding is a matrix product of the flattened patches (the same ``(ph * pw * 3, D)`` kernel as the image
  model's; ``preprocessing`` scales the pixels of each patch as the image model's does);
* the position table (stored for ``grid``: ``native_image_size // patch_size``) is resampled per image to its grid
  (:class:`keras_vit.layers.naflex.NaFlexPatchEncoder`): in 2-D by ``position_resampling``, optionally
  ``position_aspect_preserving`` (timm's ``pos_embed_ar_preserving``), or as ``factorized_positions`` (a row and a
  column table, timm's ``pos_embed='factorized'``);
* ``grid_rule`` names the rule that gives each image its grid (:data:`keras_vit.layers.naflex_grid.GRID_RULES`):
  the model takes the patches as they come, and whoever cuts them (``naflex_grid.target_size(..., rule=)``) reads it;
* the padding is masked: every block's attention reads the valid keys only, and the pooling (``token``, ``gap``,
  ``avg``, ``max``, ``map``) reads the valid patches only. ``pooling=None`` returns every token, padding included.

``image_size`` of a NaFlex config names the grid of its position table (it becomes ``native_image_size``; the model
takes no image). Not with a stem, RoPE, a distillation token, ``crop_remainder`` or the ``feature_map`` and
``token_gap_concat`` outputs (each refused by name).

Example:
>>> from keras_vit.architecture.config import ViTConfig
>>> config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
...                    input_mode="naflex", max_patches=24, pooling="gap", include_top=False)
>>> config.image_size, config.native_image_size, config.grid
(None, (32, 32), (4, 4))
"""

import numbers

import keras

from keras_vit.architecture import graph
from keras_vit.layers.naflex import GRID_RESAMPLING, MaskedPooling, NaFlexPatchEncoder, TokenMask
from keras_vit.layers.naflex_grid import GRID_RULES, KEYS
from keras_vit.layers.pooling import AttentionPooling
from keras_vit.layers.normalization import make_norm

INPUT_MODES = ("image", "naflex")
# the NaFlex fields with their values in an image model (each read only with input_mode="naflex")
DEFAULTS = {"max_patches": None, "position_aspect_preserving": False, "factorized_positions": False, "grid_rule": "timm"}
POOLINGS = ("token", "gap", "avg", "max", "map", None)


def normalise(config, set_):
    """A NaFlex config's ``image_size`` as its ``native_image_size`` (the grid its table is stored for)."""
    if config.input_mode == "naflex" and config.image_size is not None:
        if config.native_image_size is None:
            set_("native_image_size", config.image_size)
        set_("image_size", None)


def validate(config, set_):
    """The NaFlex fields checked (``set_(name, value)`` stores a normalised value); a ``ValueError`` names the fields
    of an impossible combination."""
    if config.input_mode not in INPUT_MODES:
        raise ValueError(f"Unknown `input_mode`: expected one of {INPUT_MODES}. Received: input_mode={config.input_mode!r}")
    for flag in ("position_aspect_preserving", "factorized_positions"):
        value = getattr(config, flag)
        if not isinstance(value, (bool, numbers.Integral)):
            raise ValueError(f"`{flag}` must be a bool. Received: {flag}={value!r}")
        set_(flag, bool(value))
    if config.input_mode == "image":
        for name, default in DEFAULTS.items():
            if getattr(config, name) != default:
                raise ValueError(f"`{name}` is read only with input_mode='naflex'. Received: input_mode='image', "
                                 f"{name}={getattr(config, name)!r}")
        return
    if config.grid_rule not in GRID_RULES:
        raise ValueError(f"Unknown `grid_rule`: expected one of {tuple(GRID_RULES)}. Received: grid_rule={config.grid_rule!r}")
    budget = config.max_patches
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1):
        raise ValueError(f"`max_patches` must be a positive int, or None for any length. Received: max_patches={budget!r}")
    refuse = []
    if config.stem is not None:
        refuse.append(f"NaFlex cuts the images into patches itself: stem={config.stem!r} has no NaFlex form")
    if config.rope is not None:
        refuse.append(f"RoPE on each image's own grid is not implemented for NaFlex yet. Received: rope={config.rope!r}")
    if config.distillation_token:
        refuse.append("DeiT's distillation token has no NaFlex form (distillation_token=True)")
    if config.register_positions:
        refuse.append("the NaFlex position table has the class token's row at most (register_positions=True)")
    if config.patch_norm:
        refuse.append("the NaFlex patch embedding has no norm of its own yet (patch_norm=True, AIMv2's)")
    if config.pool_include_prefix and config.pooling != "map":
        refuse.append(f"NaFlex averages the valid patch tokens only (pool_include_prefix=True with pooling={config.pooling!r})")
    if config.pooling not in POOLINGS:
        refuse.append(f"NaFlex pools the valid tokens with one of {POOLINGS}: each image has its own grid, so "
                      f"pooling={config.pooling!r} has no single shape")
    if config.position_embedding and not config.factorized_positions and config.position_resampling not in GRID_RESAMPLING:
        refuse.append(f"NaFlex resamples the position table per image with one of {GRID_RESAMPLING}. "
                      f"Received: position_resampling={config.position_resampling!r}")
    if config.factorized_positions and config.prefix_positions and config.class_token:
        refuse.append("factorised positions have no class token position: set prefix_positions=False")
    if refuse:
        raise ValueError("Impossible NaFlex ViTConfig: " + "; ".join(refuse))


def inputs_of(config):
    """The model's input dict: ``patches``, ``patch_coord``, ``patch_valid`` (:data:`keras_vit.layers.naflex_grid.KEYS`)."""
    (ph, pw), n = config.patch_size, config.max_patches
    shapes = {"patches": ((n, ph * pw * 3), "float32"), "patch_coord": ((n, 2), "int32"), "patch_valid": ((n,), "bool")}
    return {key: keras.Input(shape=shapes[key][0], dtype=shapes[key][1], name=key) for key in KEYS}


def preprocessing(patches, config):
    """The image model's ``[0, 255]`` scaling of each pixel of each patch (channels fastest within a patch)."""
    if not config.include_preprocessing:
        return patches
    if tuple(config.input_mean) == (0.5, 0.5, 0.5) and tuple(config.input_std) == (0.5, 0.5, 0.5):
        scale, offset = 1.0 / 127.5, -1.0
    else:
        pixels = config.patch_size[0] * config.patch_size[1]
        scale = [1.0 / (255.0 * std) for std in config.input_std] * pixels
        offset = [-mean / std for mean, std in zip(config.input_mean, config.input_std)] * pixels
    return keras.layers.Rescaling(scale=scale, offset=offset, name="preprocessing")(patches)


def build_graph(config, input_tensor=None):
    """``(inputs, outputs)`` of the NaFlex model ``config`` describes, with fresh layers.

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> inputs, outputs = build_graph(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
    ...                                         num_heads=4, mlp_dim=64, num_classes=3, input_mode="naflex"))
    >>> sorted(inputs), tuple(outputs.shape)
    (['patch_coord', 'patch_valid', 'patches'], (None, 3))
    """
    if input_tensor is not None:
        raise ValueError("A NaFlex model takes the dict of patches, coordinates and mask: input_tensor (an image "
                         "tensor) has no place in it. Received: input_tensor")
    inputs = inputs_of(config)
    valid = inputs["patch_valid"]
    x = NaFlexPatchEncoder(
        config.grid, config.hidden_size, class_token=config.class_token,
        num_register_tokens=config.num_register_tokens, prefix_positions=config.prefix_positions,
        dropout=config.dropout, resampling=config.position_resampling if not config.factorized_positions else "linear_aligned",
        aspect_preserving=config.position_aspect_preserving, factorized=config.factorized_positions,
        position_embedding=config.position_embedding, name="patch_encoder",
    )([preprocessing(inputs["patches"], config), inputs["patch_coord"], valid])
    if config.pre_norm:
        x = make_norm(config.norm_type, config.layer_norm_epsilon, "pre_norm")(x)
    prefix = config.num_prefix_tokens
    x = graph.encoder(x, config, key_mask=TokenMask(prefix, name="token_mask")(valid))
    if config.pooling is None:
        return inputs, x
    if config.pooling == "map":  # the valid patch tokens (timm's NaFlexVit), the prefix too with pool_include_prefix
        x = AttentionPooling(
            config.num_heads, config.mlp_dim, layer_norm_epsilon=config.layer_norm_epsilon,
            activation=config.mlp_activation, qkv_bias=config.qkv_bias, name="map_head",
        )(x, key_mask=TokenMask(prefix, prefix_valid=config.pool_include_prefix, name="pool_mask")(valid))
    else:
        mode = "gap" if config.pooling == "avg" else config.pooling
        x = MaskedPooling(mode, num_prefix_tokens=prefix, name="pool")([x, valid])
    return inputs, graph.top(graph.pooled_tail(x, config), config)
