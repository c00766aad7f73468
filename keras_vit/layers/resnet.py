"""The ResNet-v2 of the paper's hybrid (Sec. 3.1): weight-standardised convolutions, GroupNorm, bottleneck units.

Built as google-research/vision_transformer builds it (``models_resnet.py`` and
the ``resnet`` branch of ``models_vit.VisionTransformer``):

* root: weight-standardised 7x7/2 conv (no bias), GroupNorm, ReLU, 3x3/2 max-pool;
* stages ``block1..blockN`` of bottleneck units ``unit1..unitK``: 1x1 conv ->
  GN -> ReLU -> 3x3 conv (the stage's stride, 2 from the second stage on) ->
  GN -> ReLU -> 1x1 conv (4x the width) -> GN (scale initialised to zero);
  a projection shortcut (1x1 conv + GN) where the shape changes (each
  stage's first unit); ``relu(shortcut + residual)``;
* every conv is a :class:`StdConv2D`: the kernel minus its mean over
  ``(kh, kw, in)``, divided by its (population) standard deviation plus 1e-5;
* GroupNorm: 32 groups, epsilon 1e-6 (the Flax defaults);
* or, with ``norms="timm"`` (:data:`RESNET_NORMS`), the two constants of timm's
  ``_resnetv2`` for its hybrids (``timm/models/vision_transformer_hybrid.py``):
  ``StdConv2dSame(eps=1e-8)`` divides by ``sqrt(variance + 1e-8)`` (``F.batch_norm``
  over the kernel) and ``GroupNormAct`` uses epsilon 1e-5; the rest is the same;
* padding is TF / XLA ``SAME`` everywhere, i.e. for a strided op the extra
  pixel goes at the bottom/right: a 224 input to the 7x7/2 root is padded
  (2, 3), not (3, 3) as PyTorch's symmetric ``padding=3`` would. Keras'
  ``"same"`` is that same rule (``tf.nn.conv2d(padding="SAME")``,
  ``lax.padtype_to_pads``); ``tests/reference_hybrid.py`` pads explicitly.

Layer and weight names are those of the checkpoints (``conv_root``,
``block1_unit1/conv1/kernel`` for ``block1/unit1/conv1/kernel``...): the key
mapping of :mod:`keras_vit.weights.mapping` and ``.keras`` files rely on them.
"""

import keras
from keras import ops

from keras_vit.layers.checks import PACKAGE as _PACKAGE
from keras_vit.layers.trainability import FrozenSublayers

STD_CONV_EPSILON = 1e-5  # models_resnet.weight_standardize(..., eps=1e-5)
GROUP_NORM_EPSILON = 1e-6  # flax.linen.GroupNorm default
GROUP_NORM_GROUPS = 32  # flax.linen.GroupNorm default
ROOT_WIDTH = 64
EPSILON_ON = ("std", "variance")  # StdConv2D: (w - mean) / (std + eps), or / sqrt(variance + eps)
# the normalisation constants of the ResNet-v2: name -> (StdConv2D epsilon_on, its epsilon, GroupNorm epsilon)
RESNET_NORMS = {
    "original": ("std", STD_CONV_EPSILON, GROUP_NORM_EPSILON),  # google-research/vision_transformer (Flax)
    "timm": ("variance", 1e-8, 1e-5),  # timm's _resnetv2: partial(StdConv2dSame, eps=1e-8), GroupNormAct(eps=1e-5)
}


def _pair(value, name):
    pair = (value, value) if isinstance(value, int) else tuple(value) if isinstance(value, (tuple, list)) else ()
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
        raise ValueError(f"`{name}` must be a positive int or a pair of them. Received: {name}={value!r}")
    return pair


def _same_size(size, stride):
    return None if size is None else -(-size // stride)


def _norms(norms):
    if norms not in RESNET_NORMS:
        raise ValueError(f"Unknown `norms`: expected one of {tuple(RESNET_NORMS)}. Received: norms={norms!r}")
    return RESNET_NORMS[norms]


def group_norm(name, dtype=None, zero_scale=False, epsilon=GROUP_NORM_EPSILON):
    """GroupNorm as in Flax: 32 groups, epsilon 1e-6 (timm's hybrids: 1e-5), statistics in float32.

    Example:
    >>> tuple(group_norm("gn")(keras.ops.ones((1, 2, 2, 64))).shape)
    (1, 2, 2, 64)
    """
    return keras.layers.GroupNormalization(
        groups=GROUP_NORM_GROUPS,
        epsilon=epsilon,
        gamma_initializer="zeros" if zero_scale else "ones",
        dtype=dtype,
        name=name,
    )


@keras.saving.register_keras_serializable(package=_PACKAGE)
class StdConv2D(keras.layers.Layer):
    """2-D convolution with weight standardisation, no bias, ``SAME`` padding.

    The kernel is standardised on every call, over all axes but the output
    channels: ``w = (w - mean(w)) / (std(w) + epsilon)`` (population standard
    deviation), exactly as ``models_resnet.StdConv``; with ``epsilon_on="variance"``
    ``w = (w - mean(w)) / sqrt(var(w) + epsilon)``, as timm's ``StdConv2d`` /
    ``StdConv2dSame`` (``F.batch_norm`` over the kernel). The standardisation runs
    in float32 under a mixed precision policy; the convolution in the compute
    dtype.

    Args:
        filters: output channels.
        kernel_size: int or ``(kh, kw)``.
        strides: int or ``(sh, sw)``; padding is always ``SAME`` (TF/XLA rule).
        epsilon: added to the standard deviation (1e-5 in the original).
        epsilon_on: ``"std"`` (the original) or ``"variance"`` (timm: the epsilon is added to the variance).
        kernel_initializer: initializer of the raw kernel ``(kh, kw, in, filters)``.

    Call arguments:
        inputs: ``(batch, H, W, C)``.

    Returns:
        ``(batch, ceil(H / sh), ceil(W / sw), filters)``.

    Example:
    >>> tuple(StdConv2D(64, 7, strides=2)(keras.ops.zeros((1, 32, 30, 3))).shape)
    (1, 16, 15, 64)
    """

    def __init__(
        self, filters, kernel_size, strides=1, epsilon=STD_CONV_EPSILON, kernel_initializer="lecun_normal",
        epsilon_on="std", **kwargs
    ):
        super().__init__(**kwargs)
        if epsilon_on not in EPSILON_ON:
            raise ValueError(f"Unknown `epsilon_on`: expected one of {EPSILON_ON}. Received: epsilon_on={epsilon_on!r}")
        if not isinstance(filters, int) or isinstance(filters, bool) or filters < 1:
            raise ValueError(f"`filters` must be a positive int. Received: filters={filters!r}")
        if float(epsilon) <= 0:
            raise ValueError(f"`epsilon` must be positive. Received: epsilon={epsilon!r}")
        self.filters = filters
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.epsilon = float(epsilon)
        self.epsilon_on = epsilon_on
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
        variance = ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True)
        if self.epsilon_on == "variance":
            return w / ops.sqrt(variance + self.epsilon)
        return w / (ops.sqrt(variance) + self.epsilon)

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
                "epsilon_on": self.epsilon_on,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class ResidualUnit(FrozenSublayers, keras.layers.Layer):
    """Bottleneck ResNet-v2 unit with GroupNorm, as ``models_resnet.ResidualUnit``.

    ``relu(shortcut(x) + GN3(conv3(relu(GN2(conv2(relu(GN1(conv1(x)))))))))``
    with ``conv1`` 1x1 -> ``features``, ``conv2`` 3x3 with the unit's stride,
    ``conv3`` 1x1 -> ``4 * features``, and the last GroupNorm's scale
    initialised to zero. The shortcut is ``gn_proj(conv_proj(x))`` (1x1 conv
    with the stride) when the input width differs from ``4 * features`` or
    the stride is not 1, else the identity. Sub-layers are named as the
    checkpoint keys: ``conv1``, ``gn1``, ..., ``conv_proj``, ``gn_proj``.

    Args:
        features: bottleneck width, a multiple of the 32 GroupNorm groups; the
            unit outputs ``4 * features`` channels.
        strides: int or pair, the stride of the 3x3 conv and the projection.
        norms: a key of :data:`RESNET_NORMS`: the original constants, or timm's.

    Call arguments:
        x: ``(batch, H, W, C)``.

    Returns:
        ``(batch, ceil(H / s), ceil(W / s), 4 * features)``.

    Example:
    >>> unit = ResidualUnit(32, strides=2)
    >>> tuple(unit(keras.ops.ones((1, 8, 8, 64))).shape), unit.conv_proj is not None
    ((1, 4, 4, 128), True)
    """

    def __init__(self, features, strides=1, norms="original", **kwargs):
        super().__init__(**kwargs)
        if not isinstance(features, int) or isinstance(features, bool) or features < 1:
            raise ValueError(f"`features` must be a positive int. Received: features={features!r}")
        if features % GROUP_NORM_GROUPS:
            raise ValueError(
                f"`features` must be a multiple of the {GROUP_NORM_GROUPS} GroupNorm groups. "
                f"Received: features={features!r}"
            )
        self.features = features
        self.strides = _pair(strides, "strides")
        self.norms = norms
        self.conv1 = self._conv(features, 1, name="conv1")
        self.gn1 = self._group_norm("gn1")
        self.conv2 = self._conv(features, 3, strides=self.strides, name="conv2")
        self.gn2 = self._group_norm("gn2")
        self.conv3 = self._conv(4 * features, 1, name="conv3")
        self.gn3 = self._group_norm("gn3", zero_scale=True)
        self.conv_proj = self.gn_proj = None

    def _conv(self, filters, kernel_size, strides=1, name=None):
        epsilon_on, epsilon, _ = _norms(self.norms)
        return StdConv2D(filters, kernel_size, strides=strides, epsilon=epsilon, epsilon_on=epsilon_on,
                         dtype=self.dtype_policy, name=name)

    def _group_norm(self, name, zero_scale=False):
        return group_norm(name, self.dtype_policy, zero_scale=zero_scale, epsilon=_norms(self.norms)[2])

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
            self.conv_proj = self._conv(4 * self.features, 1, strides=self.strides, name="conv_proj")
            self.gn_proj = self._group_norm("gn_proj")
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
        config.update({"features": self.features, "strides": self.strides, "norms": self.norms})
        return config


def resnet_stem(x, block_units=(3, 4, 9), width=1, norms="original"):
    """Root and stages of ``models_vit.VisionTransformer`` (its ``resnet`` branch), on a Keras tensor.

    ``norms``: the normalisation constants (:data:`RESNET_NORMS`), the original's or timm's.

    Layer names: ``conv_root``, ``gn_root``, ``relu_root``, ``pool_root``, then
    ``block{i}_unit{j}`` (1-based, as the checkpoint's ``block{i}/unit{j}``).
    Stage ``i`` (0-based) has width ``64 * width * 2**i`` (output 4x that) and
    stride 1 for the first stage, 2 after.

    Example:
    >>> features = resnet_stem(keras.Input((64, 64, 3)), block_units=(1, 1), width=0.5)
    >>> features.shape
    (None, 8, 8, 256)
    """
    root = int(ROOT_WIDTH * width)
    epsilon_on, epsilon, gn_epsilon = _norms(norms)
    x = StdConv2D(root, 7, strides=2, epsilon=epsilon, epsilon_on=epsilon_on, name="conv_root")(x)
    x = group_norm("gn_root", epsilon=gn_epsilon)(x)
    x = keras.layers.ReLU(name="relu_root")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same", name="pool_root")(x)
    for i, units in enumerate(block_units):
        for j in range(units):
            stride = 2 if (i > 0 and j == 0) else 1
            x = ResidualUnit(root * 2**i, strides=stride, norms=norms, name=f"block{i + 1}_unit{j + 1}")(x)
    return x


def backbone_stride(block_units):
    """Total stride of :func:`resnet_stem`: 4 for the root, x2 per stage after the first.

    Example:
    >>> backbone_stride((3, 4, 9)), backbone_stride((2, 2, 2, 2)), backbone_stride(())
    (16, 32, 4)
    """
    return 4 * 2 ** max(len(block_units) - 1, 0)
