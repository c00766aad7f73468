"""The stem of a :class:`~keras_vit.architecture.config.ViTConfig`, what cuts the image before the patches: its
fields' checks and its stride."""

import math

from keras_vit.architecture import arguments
from keras_vit.layers.resnet import GROUP_NORM_GROUPS, RESNET_NORMS, ROOT_WIDTH, backbone_stride

STEMS = (None, "resnet", "conv")  # nothing, a ResNet-v2, small convs
# the fields each stem reads
STEM_FIELDS = {"resnet": ("block_units", "width", "resnet_norms"), "conv": ("stem_channels", "stem_strides", "stem_norm_epsilon")}
STEM_DEFAULTS = {"block_units": (), "width": 1, "resnet_norms": "original", "stem_channels": (), "stem_strides": (),
                 "stem_norm_epsilon": 1e-3}


def validate(config, set_):
    """The stem fields of ``config`` (a ``ViTConfig`` being created) checked; ``set_(name, value)`` stores a
    normalised value. A ``ValueError`` names the field."""
    if config.stem not in STEMS:
        raise ValueError(f"Unknown stem: expected one of {STEMS}. Received: stem={config.stem!r}")
    for name, default in STEM_DEFAULTS.items():
        value = getattr(config, name)
        if name not in STEM_FIELDS.get(config.stem, ()) and (tuple(value) if isinstance(value, list) else value) != default:
            raise ValueError(
                f"`{name}` is read only with stem={'conv' if name.startswith('stem_') else 'resnet'!r}. "
                f"Received: stem={config.stem!r}, {name}={value!r}"
            )
    set_("block_units", arguments.positive_ints(config.block_units, "block_units") if config.stem == "resnet" else ())
    set_("stem_channels", arguments.positive_ints(config.stem_channels, "stem_channels") if config.stem == "conv" else ())
    set_("stem_strides", arguments.positive_ints(config.stem_strides, "stem_strides") if config.stem == "conv" else ())
    if config.stem_strides and len(config.stem_strides) != len(config.stem_channels):
        raise ValueError(f"`stem_strides` gives each of the conv stem's convolutions its stride: one per entry of "
                         f"stem_channels. Received: stem_channels={config.stem_channels}, stem_strides={config.stem_strides}")
    epsilon = config.stem_norm_epsilon
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < 1:
        raise ValueError(f"`stem_norm_epsilon` must be a float in (0, 1). Received: stem_norm_epsilon={epsilon!r}")
    set_("stem_norm_epsilon", float(epsilon))
    if config.stem == "resnet":
        check_resnet_width(config.width)
        if config.resnet_norms not in RESNET_NORMS:
            raise ValueError(f"Unknown `resnet_norms`: expected one of {tuple(RESNET_NORMS)}. "
                             f"Received: resnet_norms={config.resnet_norms!r}")
    else:
        set_("width", 1)


def stem_stride(stem, block_units=(), stem_channels=(), stem_strides=()):
    """Total stride of a stem (:attr:`ViTConfig.stride`).

    Example:
    >>> stem_stride(None), stem_stride("resnet", (3, 4, 9)), stem_stride("conv", stem_channels=(32, 64))
    (1, 16, 2)
    >>> stem_stride("conv", stem_channels=(192, 192), stem_strides=(4, 2))
    8
    """
    if stem == "resnet":
        return backbone_stride(block_units)
    if stem == "conv" and stem_strides:
        return math.prod(stem_strides)
    if stem == "conv":
        return 2 ** max(len(stem_channels) - 1, 0)
    return 1


def check_resnet_width(width):
    root = int(ROOT_WIDTH * width) if isinstance(width, (int, float)) and not isinstance(width, bool) and width > 0 else 0
    if root < GROUP_NORM_GROUPS or root % GROUP_NORM_GROUPS:
        raise ValueError(
            f"`width` must make the root width int({ROOT_WIDTH} * width) a positive multiple of the "
            f"{GROUP_NORM_GROUPS} GroupNorm groups (e.g. 0.5, 1, 2). Received: width={width!r}"
        )
