"""The ViT building blocks: ``Patches``, ``PatchEncoder``, ``TransformerBlock``.

Every layer is registered for safe ``.keras`` (de)serialisation, stores each
constructor argument under its own name, returns exactly those arguments from
``get_config``, creates its sub-layers in ``__init__``/weights in ``build``,
and computes with ``keras.ops``, so it is backend-neutral; the dense layers,
LayerNorms and attention products go through :mod:`keras_vit.kernels`, which
on TensorFlow emits the subgraphs oneDNN fuses (same weights, same numerics).
"""

import keras
from keras import ops

from keras_vit import kernels

_PACKAGE = "keras_vit"
LAYER_NORM_EPSILON = 1e-6  # Flax default, used by every original checkpoint


def _pair(value, name):
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) != 2 or not all(isinstance(v, int) for v in value):
        raise ValueError(f"`{name}` must be an int or a pair of ints. Received: {name}={value!r}")
    return value


def _check_rate(value, name):
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")
    return float(value)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Patches(keras.layers.Layer):
    """Cut images into non-overlapping patches and flatten each one.

    ``(batch, H, W, C) -> (batch, (H / P) * (W / P), P * P * C)``, patches in
    row-major order and each patch flattened as ``(row, col, channel)``: the
    order of a ``(P, P, C, D)`` convolution kernel reshaped to ``(P*P*C, D)``.
    Implemented with reshape and a 4-D transpose (no ``extract_patches``,
    which is a Flex op in TFLite).

    Args:
        patch_size: int or ``(ph, pw)``.

    Example:
    >>> Patches(16)(keras.ops.zeros((2, 224, 224, 3))).shape
    (2, 196, 768)
    """

    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self._ph, self._pw = _pair(patch_size, "patch_size")
        if self._ph < 1 or self._pw < 1:
            raise ValueError(f"`patch_size` must be positive. Received: patch_size={patch_size!r}")

    def grid_size(self, input_shape):
        """``(rows, cols)`` of patches for an input shape ``(batch, H, W, C)``."""
        _, h, w, _ = input_shape
        if h is None or w is None:
            raise ValueError(f"Patches needs a static image size. Received: input_shape={tuple(input_shape)}")
        if h % self._ph or w % self._pw:
            raise ValueError(
                "The image size must be divisible by the patch size. "
                f"Received: image_size=({h}, {w}), patch_size=({self._ph}, {self._pw})"
            )
        return h // self._ph, w // self._pw

    def build(self, input_shape):
        self.grid_size(input_shape)

    def call(self, images):
        _, h, w, c = images.shape
        gh, gw = self.grid_size(images.shape)
        ph, pw = self._ph, self._pw
        # (B, H, W, C) -> (B*gh, ph, gw, pw*C) -> (B*gh, gw, ph, pw*C) -> (B, N, ph*pw*C)
        x = ops.reshape(images, (-1, ph, gw, pw * c))
        x = ops.transpose(x, (0, 2, 1, 3))
        return ops.reshape(x, (-1, gh * gw, ph * pw * c))

    def compute_output_shape(self, input_shape):
        gh, gw = self.grid_size(input_shape)
        return (input_shape[0], gh * gw, self._ph * self._pw * input_shape[3])

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size})
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class PatchEncoder(keras.layers.Layer):
    """Eq. 1 of the paper: ``z0 = [x_class; x_p E] + E_pos``.

    A linear projection ``E`` of each flattened patch, a learnable class token
    prepended to the sequence, and learned 1-D position embeddings added to
    every token (class token included), then optional dropout.

    Args:
        num_patches: number of patches N in the input sequence.
        hidden_size: the model width D.
        class_token: prepend the learnable ``[class]`` token (False for GAP
            models, as in the original code).
        dropout: dropout rate after adding position embeddings.

    Call arguments:
        patches: ``(batch, N, P*P*C)``.

    Returns:
        ``(batch, N + 1, D)`` (``N`` without a class token).
    """

    def __init__(self, num_patches, hidden_size, class_token=True, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        if int(num_patches) < 1 or int(hidden_size) < 1:
            raise ValueError(
                "`num_patches` and `hidden_size` must be positive. "
                f"Received: num_patches={num_patches}, hidden_size={hidden_size}"
            )
        self.num_patches = int(num_patches)
        self.hidden_size = int(hidden_size)
        self.class_token = bool(class_token)
        self.dropout = _check_rate(dropout, "dropout")
        self.projection = keras.layers.Dense(
            self.hidden_size,
            kernel_initializer="lecun_normal",
            dtype=self.dtype_policy,
            name="projection",
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")

    @property
    def num_tokens(self):
        return self.num_patches + (1 if self.class_token else 0)

    def build(self, input_shape):
        if input_shape[1] is not None and input_shape[1] != self.num_patches:
            raise ValueError(
                f"PatchEncoder expects {self.num_patches} patches. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self.projection.build(input_shape)
        if self.class_token:
            self.cls = self.add_weight(
                shape=(1, 1, self.hidden_size), initializer="zeros", name="class_token"
            )
        self.position_embedding = self.add_weight(
            shape=(1, self.num_tokens, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="position_embedding",
        )

    def call(self, patches, training=None):
        x = kernels.dense(patches, self.projection)
        if self.class_token:
            cls = ops.cast(self.cls, x.dtype)
            cls = ops.broadcast_to(cls, (ops.shape(x)[0], 1, self.hidden_size))
            x = ops.concatenate([cls, x], axis=1)
        x = x + ops.cast(self.position_embedding, x.dtype)
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_tokens, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_patches": self.num_patches,
                "hidden_size": self.hidden_size,
                "class_token": self.class_token,
                "dropout": self.dropout,
            }
        )
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class StochasticDepth(keras.layers.Layer):
    """Drop the whole residual branch per sample with probability ``rate``.

    Surviving samples are scaled by ``1 / (1 - rate)``; identity at inference.
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.rate = _check_rate(rate, "rate")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if self.rate > 0 else None

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
class SelfAttention(keras.layers.MultiHeadAttention):
    """Multi-head self-attention (Eq. 5-8 of the paper's appendix) with one fused QKV GEMM.

    The weights are exactly ``keras.layers.MultiHeadAttention``'s, under the
    same names (``query``/``key``/``value`` kernels ``(D, heads, head_dim)``,
    ``attention_output`` ``(heads, head_dim, D)``), so checkpoints and saved
    models map one to one; only the computation differs, guided by profiling
    ViT-B/16 on CPU: the three input projections run as one ``(D, 3D)`` matrix
    product, heads are split with one reshape/transpose, scores and outputs
    are plain batched matmuls (TensorFlow has no fused attention kernel on
    CPU, and oneDNN runs these faster than the einsums of the generic layer;
    XLA is unchanged), and the softmax runs in float32 under a 16-bit compute
    dtype. The JAX and PyTorch backends use the fused kernel of
    ``keras.ops.dot_product_attention`` when no weights are asked for.

    Args: those of ``keras.layers.MultiHeadAttention`` (``value_dim``,
        ``output_shape`` and ``attention_axes`` must stay at their defaults).

    Call arguments:
        x: ``(batch, tokens, D)``: queries, keys and values.
        training: Python bool (dropout on the attention weights).
        return_attention_scores: also return the softmax weights
            ``(batch, heads, tokens, tokens)`` (before dropout).

    Returns:
        ``(batch, tokens, D)``, or ``(outputs, attention_weights)``.
    """

    def build(self, input_shape):
        if self._value_dim != self._key_dim or self._output_shape is not None or self._attention_axes not in (None, (1,)):
            raise ValueError(
                "SelfAttention supports value_dim == key_dim, no output_shape and attention over the tokens only. "
                f"Received: key_dim={self._key_dim}, value_dim={self._value_dim}, "
                f"output_shape={self._output_shape}, attention_axes={self._attention_axes}"
            )
        super().build(input_shape, input_shape)

    def _qkv(self, x):
        dtype = self.compute_dtype
        width = self._num_heads * self._key_dim
        denses = (self._query_dense, self._key_dense, self._value_dense)
        kernel = ops.concatenate([ops.reshape(ops.cast(d.kernel, dtype), (-1, width)) for d in denses], axis=1)
        bias = None
        if self._use_bias:
            bias = ops.concatenate([ops.reshape(ops.cast(d.bias, dtype), (width,)) for d in denses], axis=0)
        qkv = kernels.matmul_bias(x, kernel, bias)
        shape = ops.shape(x)
        return ops.reshape(qkv, (shape[0], shape[1], 3, self._num_heads, self._key_dim))

    def call(self, x, training=None, return_attention_scores=False):
        denses = (self._query_dense, self._key_dense, self._value_dense, self._output_dense)
        if not all(kernels.plain(d) for d in denses):
            # after model.quantize(): the kernels are int8 with scales; Keras' own layer dequantizes them
            return super().call(x, x, x, return_attention_scores=return_attention_scores, training=training)
        dtype = self.compute_dtype
        heads, head_dim = self._num_heads, self._key_dim
        shape = ops.shape(x)
        qkv = self._qkv(x)  # (B, N, 3, heads, head_dim)
        use_dropout = self._dropout > 0.0 and training
        # unstack, not qkv[0]/qkv[1]/qkv[2]: the gradient of each index (StridedSliceGrad) writes a
        # zero tensor of qkv's full size; that took 12-18 % of a ViT-S/16 training step
        if keras.backend.backend() in ("jax", "torch") and not return_attention_scores and not use_dropout:
            query, key, value = ops.unstack(qkv, num=3, axis=2)
            out = ops.dot_product_attention(query, key, value, scale=self._inverse_sqrt_key_dim)
            weights = None
        else:
            query, key, value = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), num=3, axis=0)  # (B, heads, N, hd)
            query = query * ops.cast(self._inverse_sqrt_key_dim, dtype)
            scores = kernels.matmul_transposed(query, key)  # (B, heads, N, N)
            if dtype in ("bfloat16", "float16"):
                weights = ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), dtype)
            else:
                weights = ops.softmax(scores, axis=-1)
            dropped = self._dropout_layer(weights, training=training) if use_dropout else weights
            out = ops.swapaxes(ops.matmul(dropped, value), 1, 2)  # (B, N, heads, head_dim)
        out = ops.reshape(out, (shape[0], shape[1], heads * head_dim))
        kernel = ops.reshape(ops.cast(self._output_dense.kernel, dtype), (heads * head_dim, -1))
        bias = ops.cast(self._output_dense.bias, dtype) if self._use_bias else None
        out = kernels.matmul_bias(out, kernel, bias)
        return (out, weights) if return_attention_scores else out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_scores=False):
        out = keras.KerasTensor(x.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return out
        weights = keras.KerasTensor((x.shape[0], self._num_heads, x.shape[1], x.shape[1]), dtype=self.compute_dtype)
        return out, weights


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
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout=0.0,
        attention_dropout=0.0,
        drop_path=0.0,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_heads) < 1 or int(mlp_dim) < 1:
            raise ValueError(
                "`num_heads` and `mlp_dim` must be positive. "
                f"Received: num_heads={num_heads}, mlp_dim={mlp_dim}"
            )
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout = _check_rate(dropout, "dropout")
        self.attention_dropout = _check_rate(attention_dropout, "attention_dropout")
        self.drop_path = _check_rate(drop_path, "drop_path")
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
        return input_shape

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
    """

    MODES = ("token", "gap")

    def __init__(self, mode="token", **kwargs):
        super().__init__(**kwargs)
        if mode not in self.MODES:
            raise ValueError(f"Unknown pooling mode: expected one of {self.MODES}. Received: mode={mode!r}")
        self.mode = mode

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
