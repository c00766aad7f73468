"""Differential attention (Ye et al. 2024, "Differential Transformer", arXiv:2410.05258), as timm's ``DiffAttention``.

Each head's query and key are cut in two halves of ``key_dim / 2``; the head attends with the difference of the
two softmax maps, ``(softmax(q1 k1^T / s) - lambda softmax(q2 k2^T / s)) v`` with ``s = sqrt(key_dim / 2)``, its
output is RMS-normalised over the head (``sub_norm``, epsilon 1e-5) and scaled by ``1 - lambda_init``. ``lambda =
exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init`` is one learned scalar of the layer, and
``lambda_init = 0.8 - 0.6 exp(-0.3 depth)`` follows the block's index (timm's ``set_lambda_init``). The projections
are :class:`~keras_vit.layers.attention.SelfAttention`'s, of the same names and shapes (query and key
``(D, heads, key_dim)``: a head's two halves side by side, as timm's ``2 * heads`` sub-heads), so quantization,
LoRA and the loaders treat them alike.
"""

import math

import keras
from keras import ops

from keras_vit.layers import formulation, kernels
from keras_vit.layers.attention import SelfAttention, mask_scores
from keras_vit.layers.checks import PACKAGE as _PACKAGE
from keras_vit.layers.normalization import RMSNorm

SUB_NORM_EPSILON = 1e-5  # timm's DiffAttention: RmsNorm(2 * head_dim, eps=1e-5)


def lambda_init(depth):
    """timm's ``DiffAttention.set_lambda_init``: ``0.8 - 0.6 exp(-0.3 depth)`` for the block of index ``depth``.

    Example:
    >>> round(lambda_init(0), 6), round(lambda_init(5), 6)
    (0.2, 0.666122)
    """
    return 0.8 - 0.6 * math.exp(-0.3 * depth)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class DifferentialAttention(SelfAttention):
    """Differential multi-head self-attention (see the module), with :class:`SelfAttention`'s projections.

    Args:
        num_heads, key_dim: as :class:`SelfAttention`'s; ``key_dim`` must be even (each query and key in two halves).
        lambda_init: the block's ``lambda_init`` (:func:`lambda_init` of its index).
        **kwargs: :class:`SelfAttention`'s arguments, but ``rope`` and ``inner_norm_epsilon`` (refused).

    Call arguments and returns: :class:`SelfAttention`'s; the attention weights returned are the differential map
    ``softmax_1 - lambda softmax_2`` of each head (rows sum to ``1 - lambda``, entries may be negative).

    Example:
    >>> layer = DifferentialAttention(num_heads=2, key_dim=8, lambda_init=0.2, name="attention")
    >>> outputs, weights = layer(keras.ops.zeros((1, 5, 16)), return_attention_scores=True)
    >>> tuple(outputs.shape), tuple(weights.shape)
    ((1, 5, 16), (1, 2, 5, 5))
    >>> sorted(w.path for w in layer.weights if "lambda" in w.path or "sub_norm" in w.path)
    ['attention/lambda_k1', 'attention/lambda_k2', 'attention/lambda_q1', 'attention/lambda_q2', 'attention/sub_norm/gamma']
    """

    def __init__(self, num_heads, key_dim, *, lambda_init, **kwargs):
        for name in ("rope", "inner_norm_epsilon"):
            if kwargs.get(name) is not None:
                raise ValueError(f"Differential attention has no `{name}` (timm's DiffAttention has none). "
                                 f"Received: {name}={kwargs[name]!r}")
        super().__init__(num_heads, key_dim, **kwargs)
        if self.key_dim % 2:
            raise ValueError(f"Differential attention cuts each query and key in two halves: key_dim must be even. "
                             f"Received: key_dim={self.key_dim}")
        if isinstance(lambda_init, bool) or not isinstance(lambda_init, (int, float)) or not 0 <= lambda_init < 1:
            raise ValueError(f"`lambda_init` must be a float in [0, 1). Received: lambda_init={lambda_init!r}")
        self.lambda_init = float(lambda_init)
        self.sub_norm = RMSNorm(epsilon=SUB_NORM_EPSILON, dtype=self.dtype_policy, name="sub_norm")

    def build(self, input_shape):
        super().build(input_shape)
        half = self.key_dim // 2
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):  # float32, as timm keeps them
            setattr(self, name, self.add_weight(shape=(half,), initializer=keras.initializers.RandomNormal(stddev=0.1),
                                                name=name, autocast=False))
        self.sub_norm.build(tuple(input_shape[:1]) + (self.num_heads, input_shape[1], self.key_dim))

    def differential_lambda(self):
        """``exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init``, float32."""
        first = ops.exp(ops.sum(ops.cast(self.lambda_q1, "float32") * ops.cast(self.lambda_k1, "float32")))
        second = ops.exp(ops.sum(ops.cast(self.lambda_q2, "float32") * ops.cast(self.lambda_k2, "float32")))
        return first - second + self.lambda_init

    def call(self, x, training=None, return_attention_scores=False, key_mask=None):
        dtype = self.compute_dtype
        heads, half = self.num_heads, self.key_dim // 2
        batch, tokens = ops.shape(x)[0], ops.shape(x)[1]
        plain = all(kernels.plain(d) for d in self._projections() + (self.output_dense,))
        if plain:
            query, key, value = ops.split(self._fused_qkv_matmul(x), 3, axis=-1)  # (B, N, heads * key_dim) each
        else:
            query, key, value = self._separate_projections(x)  # (B, N, heads, key_dim) each (quantized layers)

        def split(t, width, perm):  # (B, N, parts, width) -> perm; rank 4 at most (the TFLite graph's rule)
            return ops.transpose(ops.reshape(t, (batch, tokens, -1, width)), perm)

        # sub-head 2h + s is half s of head h: (B, 2 heads, N, half)
        query = split(query, half, (0, 2, 1, 3)) * ops.cast(1.0 / math.sqrt(half), dtype)
        scores = ops.matmul(query, split(key, half, (0, 2, 3, 1)))  # (B, 2 heads, N, N)
        if key_mask is not None:
            scores = formulation.masked_scores(scores, key_mask) if formulation.active() else mask_scores(scores, key_mask)
        weights = kernels.softmax(scores, dtype)
        if self.dropout > 0.0 and training:
            weights = self.dropout_layer(weights, training=training)
        pairs = ops.reshape(weights, (batch, heads, 2 * tokens, tokens))  # head h: its two maps one above the other
        differential = pairs[:, :, :tokens] - ops.cast(self.differential_lambda(), dtype) * pairs[:, :, tokens:]
        out = ops.matmul(differential, split(value, self.key_dim, (0, 2, 1, 3)))  # (B, heads, N, key_dim)
        out = self.sub_norm(out) * ops.cast(1.0 - self.lambda_init, dtype)
        out = ops.transpose(out, (0, 2, 1, 3))  # (B, N, heads, key_dim)
        if plain:
            out = ops.reshape(out, (batch, tokens, heads * self.key_dim))
        out = self._output_projection(out, plain)
        return (out, differential) if return_attention_scores else out

    def get_config(self):
        config = super().get_config()
        config["lambda_init"] = self.lambda_init
        return config
