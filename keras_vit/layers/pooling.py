"""Attention pooling: SigLIP's multi-head attention pooling ("MAP") head."""

import math

import keras
from keras import ops

from keras_vit.layers import formulation, kernels
from keras_vit.layers.attention import mask_scores
from keras_vit.layers.checks import LAYER_NORM_EPSILON, PACKAGE as _PACKAGE, positive_int
from keras_vit.layers.policies import SublayerPolicies


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AttentionPooling(SublayerPolicies, keras.layers.Layer):
    """Pool a token sequence with a learned probe: multi-head attention, then a residual MLP.

    big_vision's ``MAPHead`` (SigLIP), timm's ``AttentionPoolLatent`` and transformers'
    ``SiglipMultiheadAttentionPoolingHead`` compute::

        y = proj(MHA(query=probe W_q, keys/values=x W_kv));  y = y + MLP(LN(y));  return y[:, 0]

    with one probe token, query, key, value and output projections ``(D, D)`` (big_vision's
    ``MultiHeadDotProductAttention`` with the head axes merged; timm's fused ``kv`` is split in two by
    the loader), and the MLP ``Dense(mlp_dim) -> act -> Dense(D)``.

    Args:
        num_heads: attention heads; must divide the input width.
        mlp_dim: hidden size of the MLP.
        layer_norm_epsilon: of the LayerNorm before the MLP.
        activation: the MLP's activation (one of ``kernels.ACTIVATIONS``).
        qkv_bias: biases on the query, key and value projections.

    Call arguments:
        x: ``(batch, tokens, D)``.
        key_mask: None, or ``(batch, tokens)`` bool: the tokens the probe may attend to (NaFlex's padding left out).

    Returns:
        ``(batch, D)``.

    Example:
    >>> layer = AttentionPooling(num_heads=4, mlp_dim=64)
    >>> tuple(layer(keras.ops.zeros((2, 5, 32))).shape)
    (2, 32)
    >>> sorted(w.path.split("/", 1)[1] for w in layer.weights)[:4]
    ['attention_output/bias', 'attention_output/kernel', 'key/bias', 'key/kernel']
    """

    def __init__(self, num_heads, mlp_dim, *, layer_norm_epsilon=LAYER_NORM_EPSILON, activation="gelu", qkv_bias=True, **kwargs):
        super().__init__(**kwargs)
        if activation not in kernels.ACTIVATIONS:
            raise ValueError(f"Unknown MLP activation: expected one of {kernels.ACTIVATIONS}. Received: activation={activation!r}")
        self.num_heads = positive_int(num_heads, "num_heads")
        self.mlp_dim = positive_int(mlp_dim, "mlp_dim")
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.activation = activation
        self.qkv_bias = bool(qkv_bias)
        policy = self.dtype_policy
        self.norm = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=policy, name="layer_norm")
        self.mlp_dense_1 = keras.layers.Dense(self.mlp_dim, dtype=policy, name="mlp_dense_1")
        self.query = self.key = self.value = self.output_dense = self.mlp_dense_2 = None  # in build: D is the input's

    def build(self, input_shape):
        width = input_shape[-1]
        if width is None or width % self.num_heads:
            raise ValueError(
                "The width must be known and divisible by `num_heads`. "
                f"Received: input_shape={tuple(input_shape)}, num_heads={self.num_heads}"
            )
        policy = self.dtype_policy
        self.probe = self.add_weight(
            shape=(1, 1, width), initializer=keras.initializers.TruncatedNormal(stddev=0.02), name="probe"
        )
        self.query = keras.layers.Dense(width, use_bias=self.qkv_bias, dtype=policy, name="query")
        self.key = keras.layers.Dense(width, use_bias=self.qkv_bias, dtype=policy, name="key")
        self.value = keras.layers.Dense(width, use_bias=self.qkv_bias, dtype=policy, name="value")
        self.output_dense = keras.layers.Dense(width, dtype=policy, name="attention_output")
        self.mlp_dense_2 = keras.layers.Dense(width, dtype=policy, name="mlp_dense_2")
        self.query.build((1, 1, width))
        self.key.build(input_shape)
        self.value.build(input_shape)
        self.output_dense.build((None, 1, width))
        self.norm.build((None, 1, width))
        self.mlp_dense_1.build((None, 1, width))
        self.mlp_dense_2.build((None, 1, self.mlp_dim))

    def call(self, x, key_mask=None):
        dtype = self.compute_dtype
        width = x.shape[-1]
        heads, head_dim = self.num_heads, width // self.num_heads
        batch, tokens = ops.shape(x)[0], ops.shape(x)[1]
        query = kernels.dense(ops.cast(self.probe, dtype), self.query)  # (1, 1, D)
        query = ops.transpose(ops.reshape(query, (1, 1, heads, head_dim)), (0, 2, 1, 3))  # (1, heads, 1, hd)
        key, value = kernels.dense(x, self.key), kernels.dense(x, self.value)
        key = ops.transpose(ops.reshape(key, (batch, tokens, heads, head_dim)), (0, 2, 1, 3))
        value = ops.transpose(ops.reshape(value, (batch, tokens, heads, head_dim)), (0, 2, 1, 3))
        query = ops.broadcast_to(query * ops.cast(1.0 / math.sqrt(head_dim), dtype), (batch, heads, 1, head_dim))
        rank4 = formulation.active()
        if rank4:
            # the TFLite export's graph: the query is a constant there, and LiteRT's GPU delegate takes a batched
            # matmul of a constant only as a 2-D second operand; q . k as a product and a sum over head_dim
            scores = ops.reshape(ops.sum(key * query, axis=-1, keepdims=True), (batch, heads, 1, tokens))
        else:
            scores = kernels.matmul_transposed(query, key)  # (B, heads, 1, N)
        if key_mask is not None:
            scores = formulation.masked_scores(scores, key_mask) if rank4 else mask_scores(scores, key_mask)
        weights = kernels.softmax(scores, dtype)
        y = ops.reshape(ops.transpose(ops.matmul(weights, value), (0, 2, 1, 3)), (batch, 1, width))
        y = kernels.dense(y, self.output_dense)
        z = kernels.dense(kernels.layer_norm(y, self.norm), self.mlp_dense_1, activation=self.activation)
        y = y + kernels.dense(z, self.mlp_dense_2)
        return formulation.take_token(y, 0) if rank4 else y[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "activation": self.activation,
                "qkv_bias": self.qkv_bias,
            }
        )
        return config
