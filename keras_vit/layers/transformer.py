"""The pre-LayerNorm Transformer encoder block, stochastic depth, and token pooling."""

import keras
from keras import ops

from keras_vit.layers import kernels
from keras_vit.layers.attention import SelfAttention, attention_output_spec
from keras_vit.layers.checks import LAYER_NORM_EPSILON, PACKAGE as _PACKAGE, built_when_created, check_rate, positive_int


@keras.saving.register_keras_serializable(package=_PACKAGE)
class StochasticDepth(keras.layers.Layer):
    """Drop the whole residual branch per sample with probability ``rate``.

    Surviving samples are scaled by ``1 / (1 - rate)``; identity at inference.

    Args:
        rate: probability of dropping a sample's branch, in [0, 1).
        seed: seed of the random draws.

    Call arguments:
        x: ``(batch, ...)``: the residual branch.
        training: Python bool; the branch is dropped only when true.

    Returns:
        ``x``, with whole samples zeroed and the rest scaled, in training.

    Example:
    >>> layer = StochasticDepth(0.5, seed=1)
    >>> x = keras.ops.ones((4, 3, 2))
    >>> bool(keras.ops.all(layer(x) == x))
    True
    >>> y = keras.ops.convert_to_numpy(layer(x, training=True))
    >>> set(y.ravel().tolist()) <= {0.0, 2.0}
    True
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = check_rate(rate, "rate")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate > 0 else None
        built_when_created(self)  # no weights: built when created, so model.quantize() never meets it unbuilt

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype)
        mask = ops.floor(mask + ops.cast(keep, x.dtype))
        return x * mask / ops.cast(keep, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(keras.layers.Layer):
    """One pre-LayerNorm Transformer encoder block (Eqs. 2-3 of the paper).

    ``x = x + DropPath(MSA(LN(x)))``; ``x = x + DropPath(MLP(LN(x)))``, where the
    MLP is Dense(mlp_dim) -> exact (erf) GELU -> Dropout -> Dense(D) -> Dropout.

    Args:
        num_heads: attention heads; must divide the input width.
        mlp_dim: hidden size of the MLP.
        dropout: dropout rate after the attention output and in the MLP.
        attention_dropout: dropout rate on the attention weights.
        drop_path: stochastic-depth rate of both residual branches.
        layer_norm_epsilon: LayerNorm epsilon (1e-6 in the original).

    Call arguments:
        x: ``(batch, tokens, D)``.
        training: Python bool.
        return_attention_scores: also return the attention weights
            ``(batch, heads, tokens, tokens)``.

    Returns:
        ``(batch, tokens, D)``, or ``(outputs, attention_weights)``.

    Example:
    >>> block = TransformerBlock(num_heads=4, mlp_dim=64, name="transformer_block_0")
    >>> outputs, weights = block(keras.ops.zeros((2, 5, 32)), return_attention_scores=True)
    >>> tuple(outputs.shape), tuple(weights.shape)
    ((2, 5, 32), (2, 4, 5, 5))
    >>> [v.path for v in block.attention.query_dense.weights]
    ['transformer_block_0/attention/query/kernel', 'transformer_block_0/attention/query/bias']
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        *,
        dropout=0.0,
        attention_dropout=0.0,
        drop_path=0.0,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.mlp_dim = positive_int(mlp_dim, "mlp_dim")
        self.dropout = check_rate(dropout, "dropout")
        self.attention_dropout = check_rate(attention_dropout, "attention_dropout")
        self.drop_path = check_rate(drop_path, "drop_path")
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        policy = self.dtype_policy
        self.norm1 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="layer_norm_1"
        )
        self.norm2 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="layer_norm_2"
        )
        self.drop_path_layer = StochasticDepth(self.drop_path, dtype=policy, name="drop_path")
        self.mlp_dropout = keras.layers.Dropout(self.dropout, dtype=policy, name="mlp_dropout")
        self.attention = None  # created in build: key_dim depends on the width
        self.mlp_dense_1 = keras.layers.Dense(
            self.mlp_dim,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=policy,
            name="mlp_dense_1",
        )
        self.mlp_dense_2 = None

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                "The width must be divisible by `num_heads`. "
                f"Received: width={width}, num_heads={self.num_heads}"
            )
        policy = self.dtype_policy
        self.attention = SelfAttention(
            num_heads=self.num_heads,
            key_dim=width // self.num_heads,
            dropout=self.attention_dropout,
            kernel_initializer="glorot_uniform",
            dtype=policy,
            name="attention",
        )
        self.attention_dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=policy, name="attention_output_dropout"
        )
        self.mlp_dense_2 = keras.layers.Dense(
            width,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=policy,
            name="mlp_dense_2",
        )
        self.norm1.build(input_shape)
        self.norm2.build(input_shape)
        self.attention.build(input_shape)
        self.mlp_dense_1.build(input_shape)
        self.mlp_dense_2.build(tuple(input_shape[:-1]) + (self.mlp_dim,))

    def call(self, x, training=None, return_attention_scores=False):
        y = kernels.layer_norm(x, self.norm1)
        attention = self.attention(y, training=training, return_attention_scores=return_attention_scores)
        if return_attention_scores:
            y, scores = attention
        else:
            y, scores = attention, None
        y = self.attention_dropout_layer(y, training=training)
        x = x + self.drop_path_layer(y, training=training)

        y = kernels.layer_norm(x, self.norm2)
        y = kernels.dense(y, self.mlp_dense_1, gelu=True, training=training)
        y = self.mlp_dropout(y, training=training)
        y = kernels.dense(y, self.mlp_dense_2)
        y = self.mlp_dropout(y, training=training)
        x = x + self.drop_path_layer(y, training=training)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_scores=False):
        return attention_output_spec(x, self.num_heads, self.compute_dtype, return_attention_scores)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "drop_path": self.drop_path,
                "layer_norm_epsilon": self.layer_norm_epsilon,
            }
        )
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenPooling(keras.layers.Layer):
    """Reduce a token sequence to one vector: the class token or the mean.

    Args:
        mode: ``"token"`` reads token 0 (the ``[class]`` token); ``"gap"``
            averages all tokens (GAP models carry no class token).

    Call arguments:
        x: ``(batch, tokens, D)``.

    Returns:
        ``(batch, D)``.

    Example:
    >>> x = keras.ops.reshape(keras.ops.arange(12, dtype="float32"), (1, 3, 4))
    >>> keras.ops.convert_to_numpy(TokenPooling("gap")(x)).tolist()
    [[4.0, 5.0, 6.0, 7.0]]
    """

    MODES = ("token", "gap")

    def __init__(self, mode="token", **kwargs):
        super().__init__(**kwargs)
        if mode not in self.MODES:
            raise ValueError(f"Unknown pooling mode: expected one of {self.MODES}. Received: mode={mode!r}")
        self.mode = mode
        built_when_created(self)  # no weights: built when created, so model.quantize() never meets it unbuilt

    def call(self, x):
        if self.mode == "token":
            return x[:, 0]
        return ops.mean(x, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode})
        return config
