"""The encoder's hot paths, written so TensorFlow's oneDNN CPU kernels fuse them.

Keras' ``Dense`` on a ``(batch, tokens, D)`` input lowers to
``tensordot`` (reshape, ``MatMul``, reshape) plus a broadcast ``AddV2``,
and ``LayerNormalization`` to nine elementwise ops; TensorFlow's graph
optimiser (grappler's remapper) then has nothing it can fuse, so every
bias, every exact GELU (``Neg``, ``Erfc``, three ``Mul``) and every
LayerNorm is a separate pass over memory. In a profile of ViT-B/16 on CPU
(``python -m benchmarks.profile``; the figures are in ``docs/performance.md``)
those passes are a large share of the time, larger in bfloat16, where Eigen's
bfloat16 ``Erfc`` is slow.

On the TensorFlow backend the functions here emit what fuses:

* ``dense``/``matmul_bias``: a rank-2 ``MatMul`` followed by ``BiasAdd`` (and
  ``tf.nn.gelu``), which the remapper turns into one
  ``_MklNativeFusedMatMul[BiasAdd, GeluExact]``: bias and exact (erf) GELU
  run in the GEMM's epilogue;
* ``matmul_transposed``: ``q k^T`` as one batched matmul with ``adj_y``
  instead of a transpose and a matmul;
* ``layer_norm``: ``beta + (x - mean) * (rsqrt(var + eps) * gamma)`` in
  float32 (as ``keras.layers.LayerNormalization`` computes under a 16-bit
  policy): four full-size passes where Keras' formula makes six. oneDNN's
  ``_MklLayerNorm`` is not matched by TensorFlow 2.21's remapper for either
  form when gamma and beta are variables.

The results equal the Keras layers' to float32 rounding (the parity tests
run through these paths). Where nothing fuses (XLA, GPUs, TFLite, ONNX) the
same graphs are plain TensorFlow ops. On the JAX and PyTorch backends, and
for quantized layers, the Keras layers are called as usual.
"""

import keras
from keras import ops

from keras_vit.layers import formulation


def _tensorflow():
    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf  # deferred: the TensorFlow backend only

    return tf


def plain(layer):
    """True when ``layer``'s weights can be used directly (not quantized by ``model.quantize``)."""
    return getattr(layer, "quantization_mode", None) is None


# the MLP activations of the ViT family: exact (erf) GELU (the paper, DINOv2, DeiT), its tanh approximation
# (SigLIP: big_vision's flax default), OpenAI CLIP's x * sigmoid(1.702 x), SiLU (the gate of SwiGLU)
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "silu")


def dense(x, layer, gelu=False, training=None, activation=None):
    """``layer(x)`` for a ``keras.layers.Dense`` without activation, then ``activation`` (one of
    :data:`ACTIVATIONS`; ``gelu=True`` is ``activation="gelu"``)."""
    activation = "gelu" if gelu and activation is None else activation
    if _tensorflow() is None or not plain(layer):
        return activate(layer(x), activation)
    dtype = layer.compute_dtype
    bias = ops.cast(layer.bias, dtype) if layer.use_bias else None
    return matmul_bias(x, ops.cast(layer.kernel, dtype), bias, training=training, activation=activation)


def activate(y, activation, training=None):
    """``y`` through one of :data:`ACTIVATIONS` (None: unchanged), in ``keras.ops`` or, on TensorFlow, the ops
    oneDNN fuses into the GEMM before it.

    Example:
    >>> [round(float(activate(keras.ops.convert_to_tensor(1.0), name)), 4) for name in ACTIVATIONS]
    [0.8413, 0.8412, 0.8458, 0.7311]
    """
    if activation is None:
        return y
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unknown MLP activation: expected one of {ACTIVATIONS}. Received: activation={activation!r}")
    tf = _tensorflow()
    if activation == "gelu":
        if tf is None:
            return keras.activations.gelu(y, approximate=False)
        return gelu_with_gradient(y) if training else tf.nn.gelu(y, approximate=False)
    if activation == "gelu_tanh":
        return keras.activations.gelu(y, approximate=True) if tf is None else tf.nn.gelu(y, approximate=True)
    if activation == "quick_gelu":
        return y * ops.sigmoid(ops.cast(1.702, y.dtype) * y)
    return ops.silu(y)


def matmul_bias(x, kernel, bias=None, gelu=False, training=None, activation=None):
    """``x @ kernel + bias`` over the last axis of ``x``, then ``activation`` (``gelu=True``: exact GELU).

    Args:
        x: ``(..., in)``.
        kernel: ``(in, out)``, in ``x``'s dtype.
        bias: ``(out,)`` or None.
        gelu: apply exact (erf) GELU (``activation="gelu"``).
        training: when true on TensorFlow, the exact GELU is :func:`gelu_with_gradient`
            (a cheaper backward pass; the inference graph keeps ``tf.nn.gelu``,
            which oneDNN fuses into the GEMM).
        activation: one of :data:`ACTIVATIONS`, or None.
    """
    activation = "gelu" if gelu and activation is None else activation
    tf = _tensorflow()
    if tf is None:
        y = ops.matmul(x, kernel)
        y = y if bias is None else y + bias
        return activate(y, activation)
    y = tf.matmul(tf.reshape(x, (-1, kernel.shape[0])), kernel)
    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    y = activate(y, activation, training=training)
    inner = tuple(x.shape[1:-1])
    if all(d is not None for d in inner):
        shape = (-1,) + inner + (kernel.shape[-1],)
    else:
        shape = tf.concat([tf.shape(x)[:-1], [kernel.shape[-1]]], axis=0)
    return tf.reshape(y, shape)


_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


def gelu_with_gradient(x):
    """Exact GELU, ``x * Phi(x)``, with a hand-written gradient ``Phi(x) + x * phi(x)``; TensorFlow only.

    Computed in float32 whatever ``x``'s dtype (Eigen's bfloat16 ``Erfc`` is slow), and
    the backward pass recomputes ``Phi`` and ``phi`` from ``x`` instead of storing
    them, so training keeps the memory of ``tf.nn.gelu`` (only ``x`` is kept).
    With ``tf.nn.gelu``'s automatic gradient, GELU's ops stood out in the profile
    of a bfloat16 training step (``python -m benchmarks.profile --train --match
    gelu``; the figures are in ``docs/performance.md``).
    """
    tf = _tensorflow()

    @tf.autograph.experimental.do_not_convert
    @tf.custom_gradient
    def gelu(x):
        x32 = tf.cast(x, "float32")
        y = tf.cast(x32 * (0.5 * tf.math.erfc(x32 * -_SQRT_HALF)), x.dtype)

        def grad(dy):
            x32 = tf.cast(x, "float32")
            cdf = 0.5 * tf.math.erfc(x32 * -_SQRT_HALF)
            pdf = tf.exp(tf.square(x32) * -0.5) * _INV_SQRT_2PI
            return tf.cast(tf.cast(dy, "float32") * (cdf + x32 * pdf), x.dtype)

        return y, grad

    return gelu(x)


def matmul_transposed(a, b):
    """``a @ swapaxes(b, -1, -2)`` (attention scores ``q k^T``) without materialising the transpose."""
    tf = _tensorflow()
    if tf is None:
        return ops.matmul(a, ops.swapaxes(b, -1, -2))
    return tf.matmul(a, b, transpose_b=True)


def softmax(scores, dtype):
    """Attention weights ``softmax(scores)`` over the last axis, computed in float32 under a 16-bit ``dtype``."""
    if dtype in ("bfloat16", "float16"):
        return ops.cast(ops.softmax(ops.cast(scores, "float32"), axis=-1), dtype)
    return ops.softmax(scores, axis=-1)


def layer_norm(x, layer):
    """``layer(x)`` for a ``keras.layers.LayerNormalization`` over the last axis."""
    tf = _tensorflow()
    axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
    last = axis in (-1, len(x.shape) - 1, (-1,), (len(x.shape) - 1,))
    if tf is None or not last or not (layer.center and layer.scale) or layer.rms_scaling or len(x.shape) not in (2, 3):
        return layer(x)
    x32 = tf.cast(x, "float32")
    mean = tf.reduce_mean(x32, axis=-1, keepdims=True)
    centred = x32 - mean
    variance = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
    if formulation.active():
        # the TFLite export's graph: no (B, N, 1) x (D,) product, which LiteRT's GPU delegate refuses
        y = tf.cast(layer.beta, "float32") + (centred * tf.math.rsqrt(variance + layer.epsilon)) * tf.cast(layer.gamma, "float32")
        return tf.cast(y, layer.compute_dtype)
    scale = tf.math.rsqrt(variance + layer.epsilon) * tf.cast(layer.gamma, "float32")
    y = tf.cast(layer.beta, "float32") + centred * scale
    return tf.cast(y, layer.compute_dtype)
