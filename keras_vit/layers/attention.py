"""Multi-head self-attention with one fused QKV GEMM."""

import keras
from keras import ops

from keras_vit.layers import kernels
from keras_vit.layers.checks import PACKAGE as _PACKAGE


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
