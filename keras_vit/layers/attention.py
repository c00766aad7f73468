"""Multi-head self-attention with one fused QKV GEMM, built from public Keras layers only."""

import math

import keras
from keras import ops

from keras_vit.layers import formulation, kernels, sequence_padding
from keras_vit.layers import rope as rope_lib
from keras_vit.layers.checks import PACKAGE as _PACKAGE, check_rate, positive_int
from keras_vit.layers.policies import SublayerPolicies

# Arguments of keras.layers.MultiHeadAttention that a SelfAttention config saved by keras_vit 0.1.0 (which
# subclassed it) carries, with the values this layer computes; any other value is refused by from_config.
_LEGACY_DEFAULTS = {"output_shape": None, "sliding_window": None, "use_gate": False}


def mask_scores(scores, key_mask):
    """``scores`` ``(B, heads, N_q, N)`` with the keys ``key_mask`` ``(B, N)`` leaves out at the dtype's lowest value
    (as timm's additive ``finfo.min`` mask): their softmax weight is exactly zero."""
    lowest = _LOWEST.get(keras.backend.standardize_dtype(scores.dtype), _LOWEST["float32"])
    mask = ops.reshape(ops.cast(key_mask, "bool"), (ops.shape(key_mask)[0], 1, 1, ops.shape(key_mask)[1]))
    return ops.where(mask, scores, ops.cast(lowest, scores.dtype))


_LOWEST = {"float16": -65504.0, "bfloat16": -3.38e38, "float32": -3.4028234e38, "float64": -1.7976931348623157e308}


def attention_output_spec(x, num_heads, dtype, return_attention_scores):
    """The symbolic outputs of a self-attention over ``x`` ``(batch, tokens, D)``: one tensor, or two with the weights."""
    out = keras.KerasTensor(x.shape, dtype=dtype)
    if not return_attention_scores:
        return out
    return out, keras.KerasTensor((x.shape[0], num_heads, x.shape[1], x.shape[1]), dtype=dtype)


def _fresh(initializer):
    """A copy of ``initializer``: one unseeded instance called for the query, key and value kernels would give
    them the same values (MultiHeadAttention copies its initializers the same way)."""
    return initializer.__class__.from_config(initializer.get_config())


@keras.saving.register_keras_serializable(package=_PACKAGE)
class SelfAttention(SublayerPolicies, keras.layers.Layer):
    """Multi-head self-attention (Eqs. 5-8 of the paper's appendix) with one fused QKV GEMM.

    The weights are those of ``keras.layers.MultiHeadAttention``, under the same
    names and shapes (four ``EinsumDense`` layers: ``query``, ``key`` and ``value``
    kernels ``(D, heads, head_dim)`` with biases ``(heads, head_dim)``, and
    ``attention_output`` ``(heads, head_dim, D)`` with bias ``(D,)``), so
    checkpoints and ``.keras`` files map one to one. Only the computation
    differs, guided by profiling ViT-B/16 on CPU: the three input projections
    run as one ``(D, 3D)`` matrix product, heads are split with one
    reshape/transpose, scores and outputs are plain batched matmuls (TensorFlow
    has no fused attention kernel on CPU, and oneDNN runs these faster than the
    einsums of the generic layer; XLA is unchanged), and the softmax runs in
    float32 under a 16-bit compute dtype. The JAX and PyTorch backends use the
    fused kernel of ``keras.ops.dot_product_attention`` when no weights are
    asked for and no dropout applies; on a CUDA GPU under JAX with a 16-bit
    policy, that call pads the tokens to what cuDNN's flash attention takes in
    training too (197 to 198), masking the padded keys
    (:mod:`keras_vit.layers.sequence_padding`). After ``model.quantize(...)`` the
    quantized ``EinsumDense`` layers are called as they are.

    Args:
        num_heads: number of attention heads.
        key_dim: size of each head (queries, keys and values alike); the
            output has the width of the input.
        dropout: dropout rate on the attention weights.
        use_bias: whether the four projections have biases.
        qkv_bias: whether the query, key and value projections have biases (default: ``use_bias``;
            False with a biased output projection is timm's ``qkv_bias=False``).
        kernel_initializer: initializer of the projection kernels.
        bias_initializer: initializer of the projection biases.
        kernel_regularizer: regularizer of the projection kernels.
        bias_regularizer: regularizer of the projection biases.
        kernel_constraint: constraint on the projection kernels.
        bias_constraint: constraint on the projection biases.
        seed: seed of the attention dropout.
        attention_padding: ``"auto"`` (pad only where it enables cuDNN's fused
            attention: JAX, CUDA GPU, 16-bit; elsewhere today's computation),
            ``"always"`` (pad and mask on any device: the padded path the tests
            check on CPU) or ``"never"``; ``"auto"`` follows
            ``sequence_padding.attention_padding(...)``. Saved only when not ``"auto"``.
        rope: None, or 2-D rotary position embeddings of the queries and keys (:mod:`keras_vit.layers.rope`):
            ``{"kind": "axial" | "mixed" | "dinov3", "grid": (rows, cols), "temperature", "grid_indexing", "grid_offset",
            "num_prefix_tokens"}`` and, axial only, ``"reference_grid"`` (timm's ``ref_feat_shape``); the tokens must be the prefix and the ``rows * cols`` patches. ``"mixed"``
            adds the weight ``rope_frequencies`` ``(2, heads, key_dim / 2)``. Saved only when set.
        inner_norm_epsilon: None, or the epsilon of a LayerNorm ``inner_norm`` of the heads' joined outputs before the
            output projection (timm's ``scale_norm``: EVA-02 CLIP's ``scale_attn_inner``, BEiT-3's ``scale_attn_norm``).
            Saved only when set.
        **kwargs: base layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        x: ``(batch, tokens, D)``: queries, keys and values alike. The layer
            takes this one input; a second positional argument is a ``TypeError``.
        training: keyword, Python bool (dropout on the attention weights).
        return_attention_scores: keyword; also return the softmax weights
            ``(batch, heads, tokens, tokens)`` (before dropout).
        key_mask: keyword; None, or ``(batch, tokens)`` bool: the keys each query may attend to (NaFlex's padding
            masked out: a masked key gets a weight of exactly zero). Such a call takes the explicit (unfused) path.

    Returns:
        ``(batch, tokens, D)``, or ``(outputs, attention_weights)``.

    Example:
    >>> layer = SelfAttention(num_heads=4, key_dim=8)
    >>> outputs, weights = layer(keras.ops.zeros((2, 5, 32)), return_attention_scores=True)
    >>> tuple(outputs.shape), tuple(weights.shape)
    ((2, 5, 32), (2, 4, 5, 5))
    >>> tuple(layer.query_dense.kernel.shape)
    (32, 4, 8)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        *,
        dropout=0.0,
        use_bias=True,
        qkv_bias=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        attention_padding="auto",
        rope=None,
        inner_norm_epsilon=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if inner_norm_epsilon is not None and (isinstance(inner_norm_epsilon, bool) or not isinstance(inner_norm_epsilon, (int, float))
                                               or not 0 < inner_norm_epsilon < 1):
            raise ValueError(f"`inner_norm_epsilon` must be None or a float in (0, 1). Received: inner_norm_epsilon={inner_norm_epsilon!r}")
        self.inner_norm_epsilon = None if inner_norm_epsilon is None else float(inner_norm_epsilon)
        self.attention_padding = sequence_padding.check_mode(attention_padding)
        self.rope = rope_lib.check_spec(rope)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.key_dim = positive_int(key_dim, "key_dim")
        self.dropout = check_rate(dropout, "dropout")
        self.use_bias = bool(use_bias)
        self.qkv_bias = self.use_bias if qkv_bias is None else bool(qkv_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self.dropout_layer = keras.layers.Dropout(self.dropout, seed=seed, dtype=self.dtype_policy, name="dropout")
        self.query_dense = self.key_dense = self.value_dense = self.output_dense = None  # in build: D is the input's
        self.inner_norm = None
        if self.inner_norm_epsilon is not None:
            self.inner_norm = keras.layers.LayerNormalization(epsilon=self.inner_norm_epsilon, dtype=self.dtype_policy, name="inner_norm")

    def __call__(self, x, *args, **kwargs):
        # keras.layers.MultiHeadAttention is called (query, value); here a second tensor would land in `training`
        if args:
            raise TypeError(
                "SelfAttention takes one input: `x` gives the queries, keys and values alike, and `training` and "
                f"`return_attention_scores` are keyword arguments. Received {1 + len(args)} positional arguments"
            )
        return super().__call__(x, **kwargs)

    def _projection(self, equation, output_shape, bias_axes, name, use_bias):
        return keras.layers.EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes if use_bias else None,
            kernel_initializer=_fresh(self.kernel_initializer),
            bias_initializer=_fresh(self.bias_initializer),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "SelfAttention expects inputs (batch, tokens, width) with a known width. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        width, heads = input_shape[-1], (self.num_heads, self.key_dim)
        self.query_dense = self._projection("abc,cde->abde", (None,) + heads, "de", "query", self.qkv_bias)
        self.key_dense = self._projection("abc,cde->abde", (None,) + heads, "de", "key", self.qkv_bias)
        self.value_dense = self._projection("abc,cde->abde", (None,) + heads, "de", "value", self.qkv_bias)
        self.output_dense = self._projection("abcd,cde->abe", (None, width), "e", "attention_output", self.use_bias)
        for projection in (self.query_dense, self.key_dense, self.value_dense):
            projection.build(input_shape)
        self.output_dense.build(tuple(input_shape[:2]) + heads)
        if self.inner_norm is not None:
            self.inner_norm.build(tuple(input_shape[:2]) + (self.num_heads * self.key_dim,))
        if self.rope is not None:
            self._build_rope(input_shape)

    def _build_rope(self, input_shape):
        spec = self.rope
        tokens = spec["num_prefix_tokens"] + spec["grid"][0] * spec["grid"][1]
        if self.key_dim % 4:
            raise ValueError(f"2-D RoPE rotates each head in two halves of pairs: key_dim must be a multiple of 4. Received: key_dim={self.key_dim}")
        if input_shape[1] is not None and input_shape[1] != tokens:
            raise ValueError(
                f"RoPE on a {spec['grid'][0]} x {spec['grid'][1]} grid with {spec['num_prefix_tokens']} prefix tokens "
                f"needs {tokens} tokens. Received: input_shape={tuple(input_shape)}"
            )
        if spec["kind"] == "mixed":
            self.rope_frequencies = self.add_weight(
                shape=(2, self.num_heads, self.key_dim // 2), initializer=rope_lib.mixed_initializer(spec["temperature"]),
                name="rope_frequencies", autocast=False,
            )
        else:
            self._axial_tables = rope_lib.axial_tables(spec, self.key_dim)

    def _rope_tables(self, heads_first):
        """``(cos, sin)`` in the compute dtype, broadcasting against ``(B, heads, N, hd / 2)`` (``heads_first``) or
        ``(B, N, heads, hd / 2)``."""
        if self.rope["kind"] != "mixed":  # axial or DINOv3's: fixed tables
            cos, sin = (ops.convert_to_tensor(t) for t in self._axial_tables)  # (N, hd / 2)
            if not heads_first:
                cos, sin = ops.expand_dims(cos, 1), ops.expand_dims(sin, 1)
        else:
            cos, sin = rope_lib.mixed_tables(self.rope, self.rope_frequencies)  # (heads, N, hd / 2)
            if not heads_first:
                cos, sin = ops.transpose(cos, (1, 0, 2)), ops.transpose(sin, (1, 0, 2))
        return ops.cast(cos, self.compute_dtype), ops.cast(sin, self.compute_dtype)

    def _rotate(self, query, key, heads_first):
        """The de-interleaved ``query`` and ``key`` rotated (unchanged without RoPE)."""
        if self.rope is None:
            return query, key
        cos, sin = self._rope_tables(heads_first)
        return rope_lib.rotate(query, cos, sin), rope_lib.rotate(key, cos, sin)

    def _separate_projections(self, x):
        """The query, key and value ``(B, N, heads, head_dim)`` each from its own layer (quantized), the query and
        key de-interleaved for RoPE."""
        query, key, value = (d(x) for d in self._projections())
        if self.rope is not None and rope_lib.interleaved(self.rope):
            query, key = rope_lib.deinterleave(query), rope_lib.deinterleave(key)
        return query, key, value

    def _projections(self):
        return self.query_dense, self.key_dense, self.value_dense

    def _fused_qkv_matmul(self, x):
        """``(B, N, 3 * heads * head_dim)``: the queries, keys and values from one ``(D, 3 * heads * head_dim)`` GEMM."""
        dtype = self.compute_dtype
        width = self.num_heads * self.key_dim
        order = [None, None, None]  # with RoPE, the query and key heads' channels de-interleaved in the kernel itself
        if self.rope is not None and rope_lib.interleaved(self.rope):
            order[0] = order[1] = ops.convert_to_tensor(rope_lib.deinterleave_permutation(self.key_dim).astype("int32"))

        def part(weight, i):
            weight = ops.cast(weight, dtype)
            return weight if order[i] is None else ops.take(weight, order[i], axis=len(weight.shape) - 1)

        kernel = ops.concatenate([ops.reshape(part(d.kernel, i), (-1, width)) for i, d in enumerate(self._projections())], axis=1)
        bias = None
        if self.qkv_bias:
            bias = ops.concatenate([ops.reshape(part(d.bias, i), (width,)) for i, d in enumerate(self._projections())], axis=0)
        return kernels.matmul_bias(x, kernel, bias)

    def _fused_qkv(self, x):
        """``(B, N, 3, heads, head_dim)`` from one ``(D, 3 * heads * head_dim)`` GEMM."""
        shape = ops.shape(x)
        return ops.reshape(self._fused_qkv_matmul(x), (shape[0], shape[1], 3, self.num_heads, self.key_dim))

    def _output_projection(self, out, plain):
        """``(B, N, heads, head_dim)`` or ``(B, N, heads * head_dim)`` (plain) through ``inner_norm`` (where there is
        one: over the joined heads) and ``attention_output``."""
        if self.inner_norm is not None:
            if plain:
                out = kernels.layer_norm(out, self.inner_norm)
            else:  # the heads joined for the norm and split again for the (quantized) EinsumDense; rank 4 at most
                shape = ops.shape(out)
                joined = kernels.layer_norm(ops.reshape(out, (shape[0], shape[1], self.num_heads * self.key_dim)), self.inner_norm)
                out = ops.reshape(joined, (shape[0], shape[1], self.num_heads, self.key_dim))
        if not plain:
            return self.output_dense(out)
        dtype = self.compute_dtype
        kernel = ops.reshape(ops.cast(self.output_dense.kernel, dtype), (self.num_heads * self.key_dim, -1))
        bias = ops.cast(self.output_dense.bias, dtype) if self.use_bias else None
        return kernels.matmul_bias(out, kernel, bias)

    def _rank4_call(self, x, return_attention_scores, key_mask=None):
        """The same attention with tensors of rank 4 at most and no ``adj_y`` (inference: no dropout).

        The TFLite export's graph (:mod:`keras_vit.layers.formulation`): the fused QKV split on its last
        axis, each of q, k, v split into heads by a 4-D reshape and transpose (k straight to
        ``(B, heads, head_dim, N)``), two plain batched matmuls.
        """
        dtype = self.compute_dtype
        heads, head_dim = self.num_heads, self.key_dim
        batch, tokens = ops.shape(x)[0], ops.shape(x)[1]
        plain = all(kernels.plain(d) for d in self._projections() + (self.output_dense,))
        if plain:
            query, key, value = ops.split(self._fused_qkv_matmul(x), 3, axis=-1)  # (B, N, heads * head_dim) each
        else:
            query, key, value = self._separate_projections(x)  # (B, N, heads, head_dim) each

        def heads_first(t, perm):
            return ops.transpose(ops.reshape(t, (batch, tokens, heads, head_dim)), perm)

        if self.rope is not None:  # rotated as (B, N, heads, hd): k goes straight to (B, heads, hd, N) after
            query, key = self._rotate(ops.reshape(query, (batch, tokens, heads, head_dim)),
                                      ops.reshape(key, (batch, tokens, heads, head_dim)), heads_first=False)
        query = heads_first(query, (0, 2, 1, 3)) * ops.cast(1.0 / math.sqrt(head_dim), dtype)  # (B, heads, N, hd)
        scores = ops.matmul(query, heads_first(key, (0, 2, 3, 1)))  # (B, heads, N, N)
        if key_mask is not None:  # float ops only: the GPU delegate takes no bool tensor there
            scores = formulation.masked_scores(scores, key_mask)
        weights = kernels.softmax(scores, dtype)
        out = ops.transpose(ops.matmul(weights, heads_first(value, (0, 2, 1, 3))), (0, 2, 1, 3))  # (B, N, heads, hd)
        if plain:
            out = ops.reshape(out, (batch, tokens, heads * head_dim))
        out = self._output_projection(out, plain)
        return (out, weights) if return_attention_scores else out

    def call(self, x, training=None, return_attention_scores=False, key_mask=None):
        if formulation.active():
            return self._rank4_call(x, return_attention_scores, key_mask)
        dtype = self.compute_dtype
        heads, head_dim = self.num_heads, self.key_dim
        shape = ops.shape(x)
        plain = all(kernels.plain(d) for d in self._projections() + (self.output_dense,))
        if plain:
            qkv = self._fused_qkv(x)  # (B, N, 3, heads, head_dim)
        else:
            # after model.quantize(): the quantized EinsumDense layers compute the projections themselves
            qkv = ops.stack(list(self._separate_projections(x)), axis=2)
        use_dropout = self.dropout > 0.0 and training
        # unstack, not qkv[0]/qkv[1]/qkv[2]: the gradient of each index (StridedSliceGrad) writes a
        # zero tensor of qkv's full size, a large share of a training step (docs/performance.md)
        scale = 1.0 / math.sqrt(head_dim)
        fused = not return_attention_scores and not use_dropout and key_mask is None
        padding = sequence_padding.plan(self.attention_padding, x.shape[1], head_dim, dtype, fused)
        if padding is not None:
            # cuDNN's fused attention at any token count (training included); "always" on any device
            query, key, value = ops.unstack(qkv, num=3, axis=2)
            out = sequence_padding.attend(*self._rotate(query, key, heads_first=False), value, scale, padding)
            weights = None
        elif keras.backend.backend() in ("jax", "torch") and fused:
            query, key, value = ops.unstack(qkv, num=3, axis=2)
            query, key = self._rotate(query, key, heads_first=False)
            out = ops.dot_product_attention(query, key, value, scale=scale)
            weights = None
        else:
            query, key, value = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), num=3, axis=0)  # (B, heads, N, hd)
            query, key = self._rotate(query, key, heads_first=True)
            query = query * ops.cast(scale, dtype)
            scores = kernels.matmul_transposed(query, key)  # (B, heads, N, N)
            if key_mask is not None:
                scores = mask_scores(scores, key_mask)
            weights = kernels.softmax(scores, dtype)
            dropped = self.dropout_layer(weights, training=training) if use_dropout else weights
            out = ops.swapaxes(ops.matmul(dropped, value), 1, 2)  # (B, N, heads, head_dim)
        if plain:
            out = ops.reshape(out, (shape[0], shape[1], heads * head_dim))
        out = self._output_projection(out, plain)
        return (out, weights) if return_attention_scores else out

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_scores=False, key_mask=None):
        return attention_output_spec(x, self.num_heads, self.compute_dtype, return_attention_scores)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "qkv_bias": self.qkv_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
                "seed": self.seed,
            }
        )
        if self.attention_padding != "auto":  # configs (and .keras files) of the default stay as they were
            config["attention_padding"] = self.attention_padding
        if self.rope is not None:
            config["rope"] = {k: list(v) if k in ("grid", "reference_grid") else v for k, v in self.rope.items()}
        if self.inner_norm_epsilon is not None:
            config["inner_norm_epsilon"] = self.inner_norm_epsilon
        return config

    @classmethod
    def from_config(cls, config):
        """Also reads the configs of keras_vit 0.1.0, whose SelfAttention subclassed ``MultiHeadAttention``."""
        config = dict(config)
        key_dim = config.get("key_dim")
        value_dim = config.pop("value_dim", None)
        attention_axes = config.pop("attention_axes", None)
        config.pop("flash_attention", None)  # a choice of kernel, not of numerics: this layer picks its own
        legacy = {name: config.pop(name, default) for name, default in _LEGACY_DEFAULTS.items()}
        if isinstance(attention_axes, int):
            attention_axes = (attention_axes,)
        unsupported = (
            value_dim not in (None, key_dim)
            or (attention_axes is not None and tuple(attention_axes) not in ((1,), (-2,)))
            or any(legacy[name] != default for name, default in _LEGACY_DEFAULTS.items())
        )
        if unsupported:
            received = ", ".join(f"{name}={value!r}" for name, value in legacy.items())
            raise ValueError(
                "SelfAttention supports value_dim == key_dim, attention over the tokens, no output_shape, "
                f"sliding_window or gate. Received: key_dim={key_dim!r}, value_dim={value_dim!r}, "
                f"attention_axes={attention_axes!r}, {received}"
            )
        return cls(**config)
