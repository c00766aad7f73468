"""The graph the layers trace: the CPU-tuned one (Keras, SavedModel, ONNX) or one of rank 4 at most (TFLite).

LiteRT's GPU delegate takes only tensors of rank 4 or less and transposes of at most 4 axes (see
:mod:`keras_vit.export.gpu_delegate` for its rules); the attention's fused QKV of shape
``(B, N, 3, heads, head_dim)``, its 5-D transpose and Keras' ``GroupNormalization`` (``(B, H, W, groups,
C / groups)``) break them, and ``x[:, 0]`` (a strided slice that drops an axis) and ``unstack`` are ops it
refuses. Inside :func:`rank4`, the layers trace the same computation with tensors of rank 4 at most: QKV
split on its last axis, each head split by a 4-D reshape and transpose, ``k`` transposed explicitly
(no ``adj_y`` on the batched matmul), one token taken by a slice that keeps its axis and a reshape, and
GroupNorm over ``(B, H * W, groups, C / groups)``. Outside it (every Keras call, SavedModel, ONNX) the
layers run their CPU-tuned graphs unchanged.

Only the TFLite export enters it, while it traces the model (``keras_vit.export.tflite``).

Example:
>>> active()
False
>>> with rank4():
...     active()
True
"""

import contextlib
import contextvars

import keras
from keras import ops

_RANK4 = contextvars.ContextVar("keras_vit_rank4_graph", default=False)


def active():
    """True while a graph of rank 4 at most is traced (inside :func:`rank4`)."""
    return _RANK4.get()


@contextlib.contextmanager
def rank4(model=None):
    """Trace the layers (and, in ``model``, Keras' GroupNorm and LayerNorm layers) in the TFLite export's form.

    Args:
        model: optional ``keras.Model`` whose ``keras.layers.GroupNormalization`` (the hybrids' ResNet) and
            ``keras.layers.LayerNormalization`` layers compute their delegate-friendly form (:func:`group_norm`,
            :func:`layer_norm`) for the duration: set on those instances only, restored on exit.
    """
    token = _RANK4.set(True)
    patched = []
    try:
        for layer in _norms(model):
            layer.call = _rank4_norm(layer)
            patched.append(layer)
        yield
    finally:
        for layer in patched:
            del layer.call  # the instance attribute: the class's call again
        _RANK4.reset(token)


def _norms(model):
    if model is None:
        return []
    kinds = (keras.layers.GroupNormalization, keras.layers.LayerNormalization)
    return [layer for layer in model._flatten_layers(include_self=False) if type(layer) in kinds]


def _rank4_norm(layer):
    norm = group_norm if type(layer) is keras.layers.GroupNormalization else layer_norm

    def call(inputs):
        return norm(inputs, layer)

    return call


def layer_norm(x, layer):
    """``layer(x)`` for a ``keras.layers.LayerNormalization`` over the last axis, as ``((x - mean) * rsqrt(var +
    eps)) * gamma + beta`` in float32: no ``(B, N, 1) x (D,)`` product (Keras scales ``rsqrt`` by ``gamma``
    first), which the GPU delegate refuses.

    Example:
    >>> layer = keras.layers.LayerNormalization(epsilon=1e-6)
    >>> x = keras.random.normal((1, 3, 8), seed=0)
    >>> expected = layer(x)
    >>> bool(ops.max(ops.abs(layer_norm(x, layer) - expected)) < 1e-5)
    True
    """
    axis = layer.axis if isinstance(layer.axis, int) else tuple(layer.axis)
    last = axis in (-1, len(x.shape) - 1, (-1,), (len(x.shape) - 1,))
    if not last or layer.rms_scaling:
        return type(layer).call(layer, x)
    y = ops.cast(x, "float32")
    mean = ops.mean(y, axis=-1, keepdims=True)
    centred = y - mean
    y = centred * ops.rsqrt(ops.mean(ops.square(centred), axis=-1, keepdims=True) + layer.epsilon)
    return _affine(y, layer)


def group_norm(x, layer):
    """``layer(x)`` for a ``keras.layers.GroupNormalization`` on ``(B, H, W, C)`` (channels last), with tensors of rank 4.

    The statistics are taken over ``(B, H * W, groups, C / groups)`` in float32, as Keras' layer takes them
    over ``(B, H, W, groups, C / groups)``.

    Example:
    >>> layer = keras.layers.GroupNormalization(groups=2, epsilon=1e-6)
    >>> x = keras.random.normal((1, 3, 3, 4), seed=0)
    >>> expected = layer(x)
    >>> bool(ops.max(ops.abs(group_norm(x, layer) - expected)) < 1e-5)
    True
    """
    axis = layer.axis if layer.axis >= 0 else len(x.shape) + layer.axis
    if len(x.shape) != 4 or axis != 3 or any(d is None for d in x.shape[1:]):
        return type(layer).call(layer, x)
    _, h, w, c = x.shape
    groups = layer.groups
    y = ops.reshape(ops.cast(x, "float32"), (-1, h * w, groups, c // groups))
    mean = ops.mean(y, axis=(1, 3), keepdims=True)
    centred = y - mean
    variance = ops.mean(ops.square(centred), axis=(1, 3), keepdims=True)
    y = ops.reshape(centred * ops.rsqrt(variance + layer.epsilon), (-1, h, w, c))
    return _affine(y, layer)


def _affine(y, layer):
    """A normalised float32 ``y`` through the norm ``layer``'s gamma and beta, in its compute dtype."""
    if layer.scale:
        y = y * ops.cast(layer.gamma, "float32")
    if layer.center:
        y = y + ops.cast(layer.beta, "float32")
    return ops.cast(y, layer.compute_dtype)


def take_token(x, index):
    """``x[:, index]`` of ``(B, N, D)`` as a slice that keeps its axis and a reshape (no strided slice dropping an axis).

    Example:
    >>> x = ops.reshape(ops.arange(12, dtype="float32"), (1, 3, 4))
    >>> ops.convert_to_numpy(take_token(x, 1)).tolist()
    [[4.0, 5.0, 6.0, 7.0]]
    """
    return ops.reshape(x[:, index : index + 1], (-1, x.shape[-1]))


MASK_BIAS = -30000.0  # added to a left-out key's score: exp() of it is 0 in float32, and it is finite in float16


def masked_scores(scores, key_mask):
    """``scores`` ``(B, heads, N_q, N)`` with the keys ``key_mask`` ``(B, N)`` (bool or 0/1 floats) leaves out pushed
    down by :data:`MASK_BIAS`: float ops only (no bool tensor reshaped or selected, which the GPU delegate refuses),
    the same softmax as :func:`keras_vit.layers.attention.mask_scores` wherever a key is kept.

    Example:
    >>> scores = ops.zeros((1, 1, 1, 3))
    >>> ops.convert_to_numpy(ops.softmax(masked_scores(scores, ops.convert_to_tensor([[1.0, 0.0, 1.0]])))).tolist()
    [[[[0.5, 0.0, 0.5]]]]
    """
    bias = (1.0 - ops.cast(key_mask, "float32")) * MASK_BIAS
    bias = ops.reshape(bias, (ops.shape(key_mask)[0], 1, 1, ops.shape(key_mask)[1]))
    return scores + ops.cast(bias, scores.dtype)

