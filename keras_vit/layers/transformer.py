"""The pre-LayerNorm Transformer encoder block, LayerScale, stochastic depth, and token pooling."""

import keras
from keras import ops

from keras_vit.layers import formulation, kernels
from keras_vit.layers import rope as rope_lib
from keras_vit.layers.attention import SelfAttention, attention_output_spec
from keras_vit.layers.checks import LAYER_NORM_EPSILON, PACKAGE as _PACKAGE, built_when_created, check_rate, positive_int
from keras_vit.layers.diff_attention import DifferentialAttention
from keras_vit.layers.normalization import NORM_TYPES, make_norm, normalize
from keras_vit.layers.policies import SublayerPolicies


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
class LayerScale(keras.layers.Layer):
    """Per-channel scaling of a residual branch (CaiT's LayerScale; DINOv2, DeiT-III): ``x * gamma``.

    Args:
        init_value: the initial value of every ``gamma`` (timm's ``init_values``, 1e-5 in DINOv2).

    Example:
    >>> layer = LayerScale(0.1)
    >>> keras.ops.convert_to_numpy(layer(keras.ops.ones((1, 2, 3)))).ravel().round(3).tolist()
    [0.1, 0.1, 0.1, 0.1, 0.1, 0.1]
    """

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        if isinstance(init_value, bool) or not isinstance(init_value, (int, float)) or not init_value > 0:
            raise ValueError(f"`init_value` must be a positive number. Received: init_value={init_value!r}")
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.gamma = self.add_weight(
            shape=(input_shape[-1],), initializer=keras.initializers.Constant(self.init_value), name="gamma"
        )

    def call(self, x):
        return x * ops.cast(self.gamma, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"init_value": self.init_value})
        return config


MLP_TYPES = ("mlp", "glu")  # Dense -> act -> Dense; or GLU: act(x W_a) * (x W_b) -> Dense (SwiGLU with act=silu)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerBlock(SublayerPolicies, keras.layers.Layer):
    """One pre-LayerNorm Transformer encoder block (Eqs. 2-3 of the paper).

    ``x = x + DropPath(MSA(LN(x)))``; ``x = x + DropPath(MLP(LN(x)))``, where the
    MLP is Dense(mlp_dim) -> exact (erf) GELU -> Dropout -> Dense(D) -> Dropout.
    The ViT family's switches: LayerScale on both branches (``x + DropPath(gamma * MSA(LN(x)))``),
    another activation, a gated MLP (``mlp_type="glu"``: ``Dense(2 * mlp_dim)`` split in two halves
    ``a, b`` and ``act(a) * b``; SwiGLU with ``activation="silu"``, as in DINOv2 giant), and no
    bias on the query, key and value projections. AIMv2's: RMSNorm for both norms, and the attention output and
    MLP projections without biases.

    Args:
        num_heads: attention heads; must divide the input width.
        mlp_dim: hidden size of the MLP.
        dropout: dropout rate after the attention output and in the MLP.
        attention_dropout: dropout rate on the attention weights.
        drop_path: stochastic-depth rate of both residual branches.
        layer_norm_epsilon: LayerNorm epsilon (1e-6 in the original).
        layer_scale_init: initial value of the LayerScale gammas, or None for no LayerScale.
        activation: the MLP's activation, one of ``kernels.ACTIVATIONS`` (exact ``"gelu"`` in the paper).
        mlp_type: ``"mlp"`` or ``"glu"``.
        qkv_bias: biases on the query, key and value projections.
        rope: None, or the attention's rotary position embeddings (``SelfAttention``'s ``rope``: RoPE-ViT's
            axial or mixed 2-D RoPE, :mod:`keras_vit.layers.rope`).
        norm_type: ``"layernorm"`` or ``"rmsnorm"`` (:mod:`keras_vit.layers.normalization`), both norms.
        proj_bias: a bias on the attention's output projection.
        mlp_bias: biases on the MLP's two layers.
        mlp_norm: a LayerNorm ``mlp_norm`` of the MLP's hidden activations before its second Dense (NormFormer's;
            timm's ``scale_mlp``: EVA-02 B / L).
        attention_norm: a LayerNorm of the attention's joined heads before its output projection (``SelfAttention``'s
            ``inner_norm``; timm's ``scale_attn_inner``: EVA-02's CLIP towers).
        res_post_norm: residual post-norm blocks, ``x = x + DropPath(LN(MSA(x)))`` and ``x = x + DropPath(LN(MLP(x)))``
            (Swin-v2's; timm's ``ResPostBlock`` and EVA's ``use_post_norm``), instead of the paper's pre-norm; no
            LayerScale with them (the norms' scales play its part).
        parallel: the attention and the MLP read the same ``LN(x)`` and their sum is added once,
            ``x = x + DropPath(gamma * (MSA(LN(x)) + MLP(LN(x))))`` (ViT-22B's; timm's ``ParallelScalingBlock``): one norm
            and one LayerScale; ``dropout`` only after the MLP's activation there (timm's ``mlp_drop``).
        differential_lambda_init: None, or differential attention (timm's ``attn_layer='diff'``,
            :class:`~keras_vit.layers.diff_attention.DifferentialAttention`) with this ``lambda_init``.

    Call arguments:
        x: ``(batch, tokens, D)``.
        training: Python bool.
        return_attention_scores: also return the attention weights
            ``(batch, heads, tokens, tokens)``.
        key_mask: None, or ``(batch, tokens)`` bool: the keys attention may read (``SelfAttention``'s; NaFlex).

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
        layer_scale_init=None,
        activation="gelu",
        mlp_type="mlp",
        qkv_bias=True,
        rope=None,
        norm_type="layernorm",
        proj_bias=True,
        mlp_bias=True,
        mlp_norm=False,
        attention_norm=False,
        res_post_norm=False,
        parallel=False,
        differential_lambda_init=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.rope = rope_lib.check_spec(rope)
        if norm_type not in NORM_TYPES:
            raise ValueError(f"Unknown norm type: expected one of {NORM_TYPES}. Received: norm_type={norm_type!r}")
        self.norm_type = norm_type
        self.proj_bias = bool(proj_bias)
        self.mlp_bias = bool(mlp_bias)
        self.mlp_norm, self.attention_norm = bool(mlp_norm), bool(attention_norm)
        if activation not in kernels.ACTIVATIONS:
            raise ValueError(f"Unknown MLP activation: expected one of {kernels.ACTIVATIONS}. Received: activation={activation!r}")
        if mlp_type not in MLP_TYPES:
            raise ValueError(f"Unknown MLP type: expected one of {MLP_TYPES}. Received: mlp_type={mlp_type!r}")
        self.activation = activation
        self.mlp_type = mlp_type
        self.qkv_bias = bool(qkv_bias)
        self.layer_scale_init = None if layer_scale_init is None else float(layer_scale_init)
        self.res_post_norm = bool(res_post_norm)
        self.parallel = bool(parallel)
        self.differential_lambda_init = None if differential_lambda_init is None else float(differential_lambda_init)
        if self.parallel and self.res_post_norm:
            raise ValueError("A parallel block normalises its input once, before both branches: no residual post-norm. "
                             "Received: parallel=True, res_post_norm=True")
        if self.res_post_norm and self.layer_scale_init is not None:
            raise ValueError("Residual post-norm blocks have no LayerScale (the norms' scales play its part: timm's "
                             "ResPostBlock initialises them with init_values). "
                             f"Received: res_post_norm=True, layer_scale_init={self.layer_scale_init!r}")
        self.num_heads = positive_int(num_heads, "num_heads")
        self.mlp_dim = positive_int(mlp_dim, "mlp_dim")
        self.dropout = check_rate(dropout, "dropout")
        self.attention_dropout = check_rate(attention_dropout, "attention_dropout")
        self.drop_path = check_rate(drop_path, "drop_path")
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        policy = self.dtype_policy
        self.norm1 = make_norm(self.norm_type, self.layer_norm_epsilon, "layer_norm_1", dtype=policy)
        self.norm2 = None if self.parallel else make_norm(self.norm_type, self.layer_norm_epsilon, "layer_norm_2", dtype=policy)
        self.drop_path_layer = StochasticDepth(self.drop_path, dtype=policy, name="drop_path")
        self.mlp_dropout = keras.layers.Dropout(self.dropout, dtype=policy, name="mlp_dropout")
        self.attention = None  # created in build: key_dim depends on the width
        self.layer_scale_1 = self.layer_scale_2 = None
        if self.layer_scale_init is not None:
            self.layer_scale_1 = LayerScale(self.layer_scale_init, dtype=policy, name="layer_scale_1")
            if not self.parallel:  # a parallel block scales the branches' sum once
                self.layer_scale_2 = LayerScale(self.layer_scale_init, dtype=policy, name="layer_scale_2")
        self.mlp_dense_1 = keras.layers.Dense(
            self.mlp_dim * (2 if self.mlp_type == "glu" else 1),
            use_bias=self.mlp_bias,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=policy,
            name="mlp_dense_1",
        )
        self.mlp_dense_2 = None
        self.mlp_norm_layer = None
        if self.mlp_norm:
            self.mlp_norm_layer = keras.layers.LayerNormalization(epsilon=self.layer_norm_epsilon, dtype=policy, name="mlp_norm")

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                "The width must be divisible by `num_heads`. "
                f"Received: width={width}, num_heads={self.num_heads}"
            )
        policy = self.dtype_policy
        differential = {} if self.differential_lambda_init is None else {"lambda_init": self.differential_lambda_init}
        self.attention = (DifferentialAttention if differential else SelfAttention)(
            **differential,
            num_heads=self.num_heads,
            key_dim=width // self.num_heads,
            dropout=self.attention_dropout,
            use_bias=self.proj_bias,
            qkv_bias=self.qkv_bias,
            kernel_initializer="glorot_uniform",
            rope=self.rope,
            inner_norm_epsilon=self.layer_norm_epsilon if self.attention_norm else None,
            dtype=policy,
            name="attention",
        )
        self.attention_dropout_layer = keras.layers.Dropout(
            self.dropout, dtype=policy, name="attention_output_dropout"
        )
        self.mlp_dense_2 = keras.layers.Dense(
            width,
            use_bias=self.mlp_bias,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            dtype=policy,
            name="mlp_dense_2",
        )
        self.norm1.build(input_shape)
        if self.norm2 is not None:
            self.norm2.build(input_shape)
        self.attention.build(input_shape)
        self.mlp_dense_1.build(input_shape)
        self.mlp_dense_2.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        if self.mlp_norm_layer is not None:
            self.mlp_norm_layer.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        for scale in (self.layer_scale_1, self.layer_scale_2):
            if scale is not None:
                scale.build(input_shape)

    def call(self, x, training=None, return_attention_scores=False, key_mask=None):
        y = normalized = x if self.res_post_norm else normalize(x, self.norm1)
        masked = {} if key_mask is None else {"key_mask": key_mask}  # the unmasked call exactly as before
        attention = self.attention(y, training=training, return_attention_scores=return_attention_scores, **masked)
        if return_attention_scores:
            y, scores = attention
        else:
            y, scores = attention, None
        if self.parallel:  # both branches read LN(x); their sum is scaled and added once. timm's ParallelScalingBlock
            # drops out the MLP's hidden activations only: no dropout after either output projection
            y = y + self._mlp(normalized, training, output_dropout=False)
        else:
            y = self.attention_dropout_layer(y, training=training)
        if self.res_post_norm:
            y = normalize(y, self.norm1)
        if self.layer_scale_1 is not None:
            y = self.layer_scale_1(y)
        x = x + self.drop_path_layer(y, training=training)
        if self.parallel:
            return (x, scores) if return_attention_scores else x

        y = self._mlp(x if self.res_post_norm else normalize(x, self.norm2), training)
        if self.res_post_norm:
            y = normalize(y, self.norm2)
        if self.layer_scale_2 is not None:
            y = self.layer_scale_2(y)
        x = x + self.drop_path_layer(y, training=training)
        return (x, scores) if return_attention_scores else x

    def _mlp(self, y, training, output_dropout=True):
        if self.mlp_type == "glu":
            gate, y = ops.split(kernels.dense(y, self.mlp_dense_1), 2, axis=-1)
            y = kernels.activate(gate, self.activation, training=training) * y
        else:
            y = kernels.dense(y, self.mlp_dense_1, activation=self.activation, training=training)
        y = self.mlp_dropout(y, training=training)
        if self.mlp_norm_layer is not None:
            y = kernels.layer_norm(y, self.mlp_norm_layer)
        y = kernels.dense(y, self.mlp_dense_2)
        return self.mlp_dropout(y, training=training) if output_dropout else y

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_scores=False, key_mask=None):
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
                "layer_scale_init": self.layer_scale_init,
                "activation": self.activation,
                "mlp_type": self.mlp_type,
                "qkv_bias": self.qkv_bias,
            }
        )
        if self.rope is not None:  # configs (and .keras files) without RoPE stay as they were
            config["rope"] = dict(self.rope, grid=list(self.rope["grid"]))
        for name, default in (("norm_type", "layernorm"), ("proj_bias", True), ("mlp_bias", True)):
            if getattr(self, name) != default:  # saved only when set: the paper's blocks' configs stay as they were
                config[name] = getattr(self, name)
        for flag in ("mlp_norm", "attention_norm", "res_post_norm", "parallel"):  # saved only when set, as rope
            if getattr(self, flag):
                config[flag] = True
        if self.differential_lambda_init is not None:
            config["differential_lambda_init"] = self.differential_lambda_init
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenPooling(keras.layers.Layer):
    """Reduce a token sequence to one vector: the class token, the distillation token, the mean or the maximum.

    Args:
        mode: ``"token"`` reads token 0 (the ``[class]`` token); ``"distillation"``
            token 1 (DeiT's distillation token); ``"gap"`` averages the tokens after
            the first ``num_prefix_tokens`` (the paper's GAP models carry no class
            token; timm's average pooling leaves out the class and register tokens).
            ``"token_gap_concat"`` concatenates token 0 and that mean (``2 * D`` wide,
            DINOv2's classifier input). ``"max"`` takes the maximum of each channel over the
            same tokens (``keras.layers.GlobalMaxPooling2D`` on the patch grid).
        num_prefix_tokens: tokens before the patches, left out of ``"gap"`` and ``"max"``.

    Call arguments:
        x: ``(batch, tokens, D)``.

    Returns:
        ``(batch, D)`` (``(batch, 2 * D)`` for ``"token_gap_concat"``).

    Example:
    >>> x = keras.ops.reshape(keras.ops.arange(12, dtype="float32"), (1, 3, 4))
    >>> keras.ops.convert_to_numpy(TokenPooling("gap")(x)).tolist()
    [[4.0, 5.0, 6.0, 7.0]]
    >>> keras.ops.convert_to_numpy(TokenPooling("token_gap_concat", num_prefix_tokens=1)(x)).tolist()
    [[0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0]]
    >>> keras.ops.convert_to_numpy(TokenPooling("max", num_prefix_tokens=1)(x)).tolist()
    [[8.0, 9.0, 10.0, 11.0]]
    """

    MODES = ("token", "distillation", "gap", "token_gap_concat", "max")

    def __init__(self, mode="token", num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        if mode not in self.MODES:
            raise ValueError(f"Unknown pooling mode: expected one of {self.MODES}. Received: mode={mode!r}")
        self.mode = mode
        if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"`num_prefix_tokens` must be an int >= 0. Received: num_prefix_tokens={num_prefix_tokens!r}")
        self.num_prefix_tokens = num_prefix_tokens
        built_when_created(self)  # no weights: built when created, so model.quantize() never meets it unbuilt

    def call(self, x):
        # the TFLite export's graph (layers.formulation) takes a token without a strided slice dropping an axis
        token = formulation.take_token if formulation.active() else (lambda t, i: t[:, i])
        if self.mode == "token":
            return token(x, 0)
        if self.mode == "distillation":
            return token(x, 1)
        patches = x[:, self.num_prefix_tokens :] if self.num_prefix_tokens else x
        if self.mode == "max":
            return ops.max(patches, axis=1)
        mean = ops.mean(patches, axis=1)
        if self.mode == "token_gap_concat":
            return ops.concatenate([token(x, 0), mean], axis=-1)
        return mean

    def compute_output_shape(self, input_shape):
        width = input_shape[-1]
        if self.mode == "token_gap_concat":
            width = None if width is None else 2 * width
        return (input_shape[0], width)

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens})
        return config
