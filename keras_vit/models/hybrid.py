"""The hybrid ViT of the paper (Sec. 3.1): a ResNet-v2 feature map cut into patches.

Built as google-research/vision_transformer builds it (``models_resnet.py`` and
the ``resnet`` branch of ``models_vit.VisionTransformer``):

* root: weight-standardised 7x7/2 conv (no bias), GroupNorm, ReLU, 3x3/2 max-pool;
* stages ``block1..blockN`` of bottleneck units ``unit1..unitK``: 1x1 conv ->
  GN -> ReLU -> 3x3 conv (the stage's stride, 2 from the second stage on) ->
  GN -> ReLU -> 1x1 conv (4x the width) -> GN (scale initialised to zero);
  a projection shortcut (1x1 conv + GN) where the shape changes (each
  stage's first unit); ``relu(shortcut + residual)``;
* every conv is a ``StdConv2D``: the kernel minus its mean over
  ``(kh, kw, in)``, divided by its (population) standard deviation plus 1e-5;
* GroupNorm: 32 groups, epsilon 1e-6 (the Flax defaults);
* padding is TF / XLA ``SAME`` everywhere, i.e. for a strided op the extra
  pixel goes at the bottom/right: a 224 input to the 7x7/2 root is padded
  (2, 3), not (3, 3) as PyTorch's symmetric ``padding=3`` would. Keras'
  ``"same"`` is that same rule (``tf.nn.conv2d(padding="SAME")``,
  ``lax.padtype_to_pads``); ``tests/reference_hybrid.py`` pads explicitly.

The feature map then goes through ``Patches(patch_size)`` (1x1 for the
paper's hybrids) and the very same :func:`keras_vit.models.vit.assemble`
as the plain ViT. Checkpoint keys are mapped by :func:`hybrid_targets`, which is
registered with the common loader.
"""

import re

import keras
from keras import ops

from keras_vit.weights import checkpoints
from keras_vit.models import variants as configs
from keras_vit.models.vit import assemble, image_size_pair, validate_top, validate_weights, variant_builder

_PACKAGE = "keras_vit"
STD_CONV_EPSILON = 1e-5  # models_resnet.weight_standardize(..., eps=1e-5)
GROUP_NORM_EPSILON = 1e-6  # flax.linen.GroupNorm default
GROUP_NORM_GROUPS = 32  # flax.linen.GroupNorm default
ROOT_WIDTH = 64


def _pair(value, name):
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    value = tuple(value)
    if len(value) != 2 or not all(isinstance(v, int) and v >= 1 for v in value):
        raise ValueError(f"`{name}` must be a positive int or a pair of them. Received: {name}={value!r}")
    return value


def _same_size(size, stride):
    return None if size is None else -(-size // stride)


def group_norm(name, dtype=None, zero_scale=False):
    """GroupNorm as in Flax: 32 groups, epsilon 1e-6, statistics in float32."""
    return keras.layers.GroupNormalization(
        groups=GROUP_NORM_GROUPS,
        epsilon=GROUP_NORM_EPSILON,
        gamma_initializer="zeros" if zero_scale else "ones",
        dtype=dtype,
        name=name,
    )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class StdConv2D(keras.layers.Layer):
    """2-D convolution with weight standardisation, no bias, ``SAME`` padding.

    The kernel is standardised on every call, over all axes but the output
    channels: ``w = (w - mean(w)) / (std(w) + epsilon)`` (population standard
    deviation), exactly as ``models_resnet.StdConv``. The standardisation runs
    in float32 under a mixed precision policy; the convolution in the compute
    dtype.

    Args:
        filters: output channels.
        kernel_size: int or ``(kh, kw)``.
        strides: int or ``(sh, sw)``; padding is always ``SAME`` (TF/XLA rule).
        epsilon: added to the standard deviation (1e-5 in the original).
        kernel_initializer: initializer of the raw kernel ``(kh, kw, in, filters)``.

    Example:
    >>> tuple(StdConv2D(64, 7, strides=2)(keras.ops.zeros((1, 224, 224, 3))).shape)
    (1, 112, 112, 64)
    """

    def __init__(
        self, filters, kernel_size, strides=1, epsilon=STD_CONV_EPSILON, kernel_initializer="lecun_normal", **kwargs
    ):
        super().__init__(**kwargs)
        if not isinstance(filters, int) or filters < 1:
            raise ValueError(f"`filters` must be a positive int. Received: filters={filters!r}")
        if float(epsilon) <= 0:
            raise ValueError(f"`epsilon` must be positive. Received: epsilon={epsilon!r}")
        self.filters = filters
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.kernel = self.add_weight(
            shape=self.kernel_size + (input_shape[-1], self.filters),
            initializer=self.kernel_initializer,
            name="kernel",
            autocast=False,  # standardised in float32, then cast
        )

    def standardized_kernel(self):
        """The kernel actually convolved with, in the variable's dtype."""
        w = ops.convert_to_tensor(self.kernel)
        w = w - ops.mean(w, axis=(0, 1, 2), keepdims=True)
        std = ops.sqrt(ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True))
        return w / (std + self.epsilon)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), inputs.dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding="same")

    def compute_output_shape(self, input_shape):
        b, h, w, _ = input_shape
        return (b, _same_size(h, self.strides[0]), _same_size(w, self.strides[1]), self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "epsilon": self.epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ResidualUnit(keras.layers.Layer):
    """Bottleneck ResNet-v2 unit with GroupNorm, as ``models_resnet.ResidualUnit``.

    ``relu(shortcut(x) + GN3(conv3(relu(GN2(conv2(relu(GN1(conv1(x)))))))))``
    with ``conv1`` 1x1 -> ``features``, ``conv2`` 3x3 with the unit's stride,
    ``conv3`` 1x1 -> ``4 * features``, and the last GroupNorm's scale
    initialised to zero. The shortcut is ``gn_proj(conv_proj(x))`` (1x1 conv
    with the stride) when the input width differs from ``4 * features`` or
    the stride is not 1, else the identity. Sub-layers are named as the
    checkpoint keys: ``conv1``, ``gn1``, ..., ``conv_proj``, ``gn_proj``.

    Args:
        features: bottleneck width; the unit outputs ``4 * features`` channels.
        strides: int or pair, the stride of the 3x3 conv and the projection.

    Call arguments:
        x: ``(batch, H, W, C)``.

    Returns:
        ``(batch, ceil(H / s), ceil(W / s), 4 * features)``.
    """

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(features, int) or features < 1:
            raise ValueError(f"`features` must be a positive int. Received: features={features!r}")
        self.features = features
        self.strides = _pair(strides, "strides")
        policy = self.dtype_policy
        self.conv1 = StdConv2D(features, 1, dtype=policy, name="conv1")
        self.gn1 = group_norm("gn1", policy)
        self.conv2 = StdConv2D(features, 3, strides=self.strides, dtype=policy, name="conv2")
        self.gn2 = group_norm("gn2", policy)
        self.conv3 = StdConv2D(4 * features, 1, dtype=policy, name="conv3")
        self.gn3 = group_norm("gn3", policy, zero_scale=True)
        self.conv_proj = self.gn_proj = None

    def needs_projection(self, input_shape):
        return input_shape[-1] != 4 * self.features or self.strides != (1, 1)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        mid = self.conv1.compute_output_shape(input_shape)
        self.conv1.build(input_shape)
        self.gn1.build(mid)
        self.conv2.build(mid)
        mid = self.conv2.compute_output_shape(mid)
        self.gn2.build(mid)
        self.conv3.build(mid)
        out = self.conv3.compute_output_shape(mid)
        self.gn3.build(out)
        if self.needs_projection(input_shape):
            policy = self.dtype_policy
            self.conv_proj = StdConv2D(4 * self.features, 1, strides=self.strides, dtype=policy, name="conv_proj")
            self.gn_proj = group_norm("gn_proj", policy)
            self.conv_proj.build(input_shape)
            self.gn_proj.build(out)

    def call(self, x):
        shortcut = x
        if self.conv_proj is not None:
            shortcut = self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(shortcut + y)

    def compute_output_shape(self, input_shape):
        b, h, w, _ = input_shape
        return (b, _same_size(h, self.strides[0]), _same_size(w, self.strides[1]), 4 * self.features)

    def get_config(self):
        config = super().get_config()
        config.update({"features": self.features, "strides": self.strides})
        return config


def resnet_stem(x, block_units=(3, 4, 9), width=1):
    """Root and stages of ``models_vit.VisionTransformer`` (its ``resnet`` branch).

    Layer names: ``conv_root``, ``gn_root``, ``relu_root``, ``pool_root``, then
    ``block{i}_unit{j}`` (1-based, as the checkpoint's ``block{i}/unit{j}``).
    Stage ``i`` (0-based) has width ``64 * width * 2**i`` (output 4x that) and
    stride 1 for the first stage, 2 after.
    """
    root = int(ROOT_WIDTH * width)
    x = StdConv2D(root, 7, strides=2, name="conv_root")(x)
    x = group_norm("gn_root")(x)
    x = keras.layers.ReLU(name="relu_root")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="pool_root")(x)
    for i, units in enumerate(block_units):
        for j in range(units):
            stride = 2 if (i > 0 and j == 0) else 1
            x = ResidualUnit(root * 2**i, strides=stride, name=f"block{i + 1}_unit{j + 1}")(x)
    return x


def backbone_stride(block_units):
    """Total stride of the ResNet part: 4 for the root, x2 per stage after the first."""
    return 4 * 2 ** max(len(block_units) - 1, 0)


def block_units_of(checkpoint):
    """ResNet stage sizes ``(units of block1, block2, ...)`` stored in a checkpoint, () if none."""
    units = {}
    for key in checkpoint:
        match = re.match(r"^block(\d+)/unit(\d+)/", key)
        if match:
            stage, unit = int(match[1]), int(match[2])
            units[stage] = max(units.get(stage, 0), unit)
    return tuple(units.get(i, 0) for i in range(1, max(units, default=0) + 1))


def _check_checkpoint_stages(checkpoint, block_units, path):
    found = block_units_of(checkpoint)
    if "conv_root/kernel" not in checkpoint:
        raise checkpoints.CheckpointError(
            f"Checkpoint {path!r} has no ResNet root (key 'conv_root/kernel' is missing): "
            "is it a plain ViT checkpoint? Use keras_vit.ViT for it."
        )
    if found != tuple(block_units):
        wanted = tuple(block_units)
        stage = next(i for i in range(max(len(found), len(wanted))) if found[i:i + 1] != wanted[i:i + 1])
        want = wanted[stage] if stage < len(wanted) else 0
        have = found[stage] if stage < len(found) else 0
        key = f"block{stage + 1}/unit{min(have, want) + 1}/conv1/kernel"
        what = "missing" if want > have else "unexpected"
        raise checkpoints.CheckpointError(
            f"Checkpoint {path!r} has ResNet stages of {found} units, the model {tuple(block_units)}: "
            f"key {key!r} is {what}. Pass block_units={found} (or the builder of that checkpoint)."
        )


def _validate(block_units, width, image_size, patch_size, hidden_size, num_heads):
    try:
        units = tuple(int(u) for u in block_units)
    except TypeError:
        units = None
    if units is None or any(u < 1 for u in units) or units != tuple(block_units):
        raise ValueError(f"`block_units` must be a tuple of positive ints. Received: block_units={block_units!r}")
    root = int(ROOT_WIDTH * width) if isinstance(width, (int, float)) and width > 0 else 0
    if root < GROUP_NORM_GROUPS or root % GROUP_NORM_GROUPS:
        raise ValueError(
            f"`width` must make the root width int({ROOT_WIDTH} * width) a positive multiple of the "
            f"{GROUP_NORM_GROUPS} GroupNorm groups (e.g. 0.5, 1, 2). Received: width={width!r}"
        )
    h, w = image_size_pair(image_size)
    ph, pw = _pair(patch_size, "patch_size")
    stride = backbone_stride(units)
    if h % (stride * ph) or w % (stride * pw):
        raise ValueError(
            f"The image size must be divisible by the backbone stride times the patch size "
            f"({stride} x {(ph, pw)} for block_units={units}). "
            f"Received: image_size={image_size}, patch_size={patch_size}"
        )
    if hidden_size % num_heads:
        raise ValueError(
            "`hidden_size` must be divisible by `num_heads`. "
            f"Received: hidden_size={hidden_size}, num_heads={num_heads}"
        )
    return units, (h, w)


def count_hybrid_params(block_units=(3, 4, 9), width=1, image_size=224, **vit):
    """Count a hybrid's parameters from its shape alone, without building it.

    Args:
        block_units, width, image_size: as in :func:`HybridViT`.
        **vit: ``patch_size``, ``hidden_size``, ``num_layers``, ``mlp_dim``,
            ``num_heads`` and the head arguments of :func:`keras_vit.count_params`.

    Example:
    >>> count_hybrid_params(hidden_size=768, num_layers=12, mlp_dim=3072, num_heads=12, patch_size=1)
    98659112
    """
    root = int(ROOT_WIDTH * width)
    total = 7 * 7 * 3 * root + 2 * root  # conv_root (no bias) + gn_root
    channels = root
    for i, units in enumerate(block_units):
        features = root * 2**i
        for j in range(units):
            stride = 2 if (i > 0 and j == 0) else 1
            total += channels * features + 2 * features  # conv1 + gn1
            total += 9 * features * features + 2 * features  # conv2 + gn2
            total += features * 4 * features + 2 * 4 * features  # conv3 + gn3
            if channels != 4 * features or stride != 1:
                total += channels * 4 * features + 2 * 4 * features  # conv_proj + gn_proj
            channels = 4 * features
    h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
    stride = backbone_stride(block_units)
    grid = (-(-h // stride), -(-w // stride))
    return total + configs.count_params(image_size=grid, channels=channels, **vit)


def HybridViT(
    block_units=(3, 4, 9),
    width=1,
    patch_size=1,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    mlp_dim=3072,
    image_size=224,
    num_classes=1000,
    include_top=True,
    weights=None,
    pooling="token",
    representation_size=None,
    dropout=0.0,
    attention_dropout=0.0,
    drop_path_rate=0.0,
    classifier_activation="softmax",
    include_preprocessing=True,
    input_tensor=None,
    name="hybrid_vit",
):
    """Build a hybrid ViT: ResNet-v2 (GroupNorm, weight standardisation) + Transformer.

    Args:
        block_units: units per ResNet stage; ``(3, 4, 9)`` for R50+ViT-B/16 (stride
            16), ``(2, 2, 2, 2)`` for R26 and ``(3, 4, 6, 3)`` for R50 with four
            stages (stride 32), ``()`` for the root alone (stride 4).
        width: width multiplier of the ResNet (root width ``64 * width``).
        patch_size: patch size on the feature map (1 for the paper's hybrids).
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's shape.
        image_size: int or ``(h, w)``, divisible by the stride times the patch size.
        num_classes, include_top, weights, pooling, representation_size, dropout,
            attention_dropout, drop_path_rate, classifier_activation,
            include_preprocessing, input_tensor, name: as in :func:`keras_vit.ViT`.
            ``weights`` is an original hybrid ``.npz`` (e.g. ``R50+ViT-B_16.npz``);
            its stage sizes must match ``block_units``.

    Returns:
        A functional ``keras.Model`` (``model.load_report`` after a load).

    Example:
    >>> model = HybridViT(block_units=(1, 1), width=0.5, image_size=32, hidden_size=32,
    ...                   num_layers=1, num_heads=2, mlp_dim=64, num_classes=3)
    >>> model.get_layer("patch_encoder").num_patches
    16
    """
    units, (h, w) = _validate(block_units, width, image_size, patch_size, hidden_size, num_heads)
    validate_top(num_classes, include_top, pooling, classifier_activation)
    validate_weights(weights)
    return assemble(
        (h, w), patch_size, hidden_size, num_layers, num_heads, mlp_dim, num_classes, include_top, weights,
        pooling, representation_size, dropout, attention_dropout, drop_path_rate, classifier_activation,
        include_preprocessing, input_tensor, name,
        stem=lambda x: resnet_stem(x, units, width),
        check_checkpoint=lambda arrays: _check_checkpoint_stages(arrays, units, str(weights)),
    )


# name -> (ResNet stage sizes, ViT variant whose Transformer is used); patch 1 on the feature map
HYBRID_VARIANTS = {
    "R50+B/16": ((3, 4, 9), "B"),
    "R26+S/32": ((2, 2, 2, 2), "S"),
    "R50+L/32": ((3, 4, 6, 3), "L"),
}


def _hybrid_builder(variant, doc_name):
    units, size = HYBRID_VARIANTS[variant]
    vit = {k: v for k, v in configs.VARIANTS[size].items()}

    compact = doc_name.replace("_", "")
    doc = _HYBRID_DOC.format(
        variant=variant,
        units=units,
        stride=backbone_stride(units),
        file=variant.replace("/", "_").replace("+", "+ViT-"),
        compact=compact,
        **vit,
    )
    fixed = dict(vit, block_units=units, width=1, patch_size=1)
    return variant_builder(HybridViT, fixed, compact, doc_name.lower(), doc)


_HYBRID_DOC = """Build the hybrid {variant}: ResNet stages {units} (stride {stride}), 1x1 patches, \
Transformer of width {hidden_size}, depth {num_layers}, MLP {mlp_dim}, {num_heads} heads.

    Args:
        num_classes: classes of the head (default 1000).
        image_size: int or (height, width), divisible by {stride} (default 224).
        include_top, weights, pooling, representation_size, dropout,
        attention_dropout, drop_path_rate, classifier_activation,
        include_preprocessing, input_tensor, name: as in :func:`keras_vit.ViT`.

    Returns:
        A functional ``keras.Model``; inputs are RGB images in [0, 255].

    Example:
    >>> model = keras_vit.{compact}(num_classes=10)  # doctest: +SKIP
    >>> model = keras_vit.{compact}(weights="{file}.npz", image_size=384)  # doctest: +SKIP
"""

R50ViTB16 = _hybrid_builder("R50+B/16", "R50_ViT_B16")
R26ViTS32 = _hybrid_builder("R26+S/32", "R26_ViT_S32")
R50ViTL32 = _hybrid_builder("R50+L/32", "R50_ViT_L32")

HYBRID_BUILDERS = {"R50+B/16": R50ViTB16, "R26+S/32": R26ViTS32, "R50+L/32": R50ViTL32}


class GroupNormTarget(checkpoints.Target):
    """A GroupNorm scale/bias: ``(C,)``, or ``(1, 1, 1, C)`` as older Flax saved it."""

    def accepts(self, shape):
        return tuple(shape) in (tuple(self.shape), (1, 1, 1) + tuple(self.shape))


def _norm_targets(prefix, norm, targets):
    targets[f"{prefix}/scale"] = GroupNormTarget(norm.gamma, tuple(norm.gamma.shape))
    targets[f"{prefix}/bias"] = GroupNormTarget(norm.beta, tuple(norm.beta.shape))


_UNIT_NAME = re.compile(r"^block(\d+)_unit(\d+)$")


@checkpoints.register_targets
def hybrid_targets(model):
    """Checkpoint keys of the ResNet part: ``conv_root``, ``gn_root``, ``block{i}/unit{j}/...``.

    Returns nothing for a model without a ``StdConv2D`` named ``conv_root``
    (a plain ViT); the embedding, Transformer and head are mapped by
    :func:`keras_vit.weights.checkpoints.vit_targets` as for the plain ViT.
    """
    layers = {layer.name: layer for layer in model.layers}
    root = layers.get("conv_root")
    if not isinstance(root, StdConv2D):
        return {}
    targets = {"conv_root/kernel": checkpoints.Target(root.kernel, tuple(root.kernel.shape))}
    _norm_targets("gn_root", layers["gn_root"], targets)
    for name, layer in layers.items():
        match = _UNIT_NAME.match(name)
        if not (match and isinstance(layer, ResidualUnit)):
            continue
        prefix = f"block{match[1]}/unit{match[2]}"
        parts = [("conv1", "gn1"), ("conv2", "gn2"), ("conv3", "gn3")]
        if layer.conv_proj is not None:
            parts.append(("conv_proj", "gn_proj"))
        for conv, norm in parts:
            kernel = getattr(layer, conv).kernel
            targets[f"{prefix}/{conv}/kernel"] = checkpoints.Target(kernel, tuple(kernel.shape))
            _norm_targets(f"{prefix}/{norm}", getattr(layer, norm), targets)
    return targets

