"""The norms of the ViT family: the paper's LayerNorm or RMSNorm (AIMv2), chosen by name (:data:`NORM_TYPES`).

RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467) is timm's ``RmsNorm`` and transformers' ``Aimv2RMSNorm``:
``x * rsqrt(mean(x ** 2) + eps) * gamma`` over the last axis, with no centring and no bias. Its scale is called
``gamma``, as LayerNorm's is, so checkpoints map both by the same key and training leaves both out of weight decay.
"""

import keras
from keras import ops

from keras_vit.layers import kernels
from keras_vit.layers.checks import LAYER_NORM_EPSILON, PACKAGE as _PACKAGE

NORM_TYPES = ("layernorm", "rmsnorm")  # ViTConfig.norm_type: every norm of a model is one of these


def check_epsilon(epsilon):
    """``epsilon`` as a float in (0, 1)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < 1:
        raise ValueError(f"`epsilon` must be a float in (0, 1). Received: epsilon={epsilon!r}")
    return float(epsilon)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class RMSNorm(keras.layers.Layer):
    """Root-mean-square normalisation over the last axis: ``x * rsqrt(mean(x ** 2) + epsilon) * gamma``.

    Computed in float32 under a 16-bit policy (as Keras' LayerNormalization is), then cast to the compute dtype.
    The input is scaled by its inverse RMS before ``gamma`` (no ``(B, N, 1) x (D,)`` product, which LiteRT's GPU
    delegate refuses), with tensors of the input's rank only.

    Args:
        epsilon: added to the mean square (timm's ``RmsNorm`` default 1e-6; AIMv2's 1e-5).

    Call arguments:
        x: ``(..., D)``.

    Returns:
        ``x``'s shape, normalised.

    Example:
    >>> layer = RMSNorm(epsilon=1e-6, name="norm")  # named: Keras numbers unnamed layers per process (rms_norm_1)
    >>> y = layer(keras.ops.convert_to_tensor([[3.0, -4.0]]))
    >>> [round(v, 4) for v in keras.ops.convert_to_numpy(y)[0].tolist()]  # rms = sqrt((9 + 16) / 2)
    [0.8485, -1.1314]
    >>> [w.path for w in layer.weights]
    ['norm/gamma']
    """

    def __init__(self, epsilon=LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = check_epsilon(epsilon)

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(f"RMSNorm needs a known last axis. Received: input_shape={tuple(input_shape)}")
        self.gamma = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="gamma")

    def call(self, x):
        y = ops.cast(x, "float32")
        y = y * ops.rsqrt(ops.mean(ops.square(y), axis=-1, keepdims=True) + self.epsilon)
        return ops.cast(y * ops.cast(self.gamma, "float32"), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon})
        return config


def make_norm(norm_type, epsilon, name, dtype=None):
    """A fresh norm of ``norm_type`` (one of :data:`NORM_TYPES`) named ``name``.

    Example:
    >>> type(make_norm("rmsnorm", 1e-5, "encoder_norm")).__name__, make_norm("layernorm", 1e-6, "n").epsilon
    ('RMSNorm', 1e-06)
    """
    if norm_type == "layernorm":
        return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)
    if norm_type == "rmsnorm":
        return RMSNorm(epsilon=epsilon, dtype=dtype, name=name)
    raise ValueError(f"Unknown norm type: expected one of {NORM_TYPES}. Received: norm_type={norm_type!r}")


def normalize(x, layer):
    """``layer(x)``; a LayerNorm through :func:`keras_vit.layers.kernels.layer_norm` (the fused CPU graph)."""
    if isinstance(layer, keras.layers.LayerNormalization):
        return kernels.layer_norm(x, layer)
    return layer(x)
