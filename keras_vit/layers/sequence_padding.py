"""Attention over a sequence padded to a length cuDNN's fused (flash) attention takes, the padding masked out.

Why: JAX's cuDNN attention (``jax._src.cudnn.fused_attention_stablehlo.check_is_flash_attention``, jax 0.10
and 0.11) takes bfloat16 or float16 queries, keys and values with a head dim that is a multiple of 8 and at most
256 (Hopper and later; 128 before), and, when differentiated, sequence lengths that are even: its forward rule
for training reports a bias whenever one was not given (the placeholder ``jnp.zeros(0)`` is not None), and with a
bias it refuses odd lengths. At ViT's 197 tokens (196 patches and the class token) the training step therefore
falls back, with a logged exception, to XLA's attention, which keeps the ``(batch, heads, N, N)`` score matrices
of every layer for the backward pass (``docs/performance.md``, GPU).

What: the queries, keys and values are padded with zeros to the next multiple of :data:`SEQUENCE_MULTIPLE`
tokens (and the head dim to the next multiple of :data:`HEAD_DIM_MULTIPLE`), the padded keys are masked out by
length (``key_value_seq_lengths`` of ``jax.nn.dot_product_attention``: cuDNN's padding mask, no bias tensor; a
boolean key mask through ``keras.ops.dot_product_attention`` on the other backends), and the output is sliced
back. Masked keys get a weight of exactly zero, zero head dims add nothing to ``q . k`` and the scale is that of
the true head dim, so the result is the unpadded attention's to float32 rounding; the padded queries' rows are
computed and dropped.

When (:func:`plan`, decided while the layer is traced, so it costs nothing per step):

* ``"auto"`` (the default): only on the JAX backend with a CUDA GPU of compute capability 8.0 or more, a
  16-bit compute dtype and a head dim cuDNN can take, when the fused path runs (no attention weights returned, no
  attention dropout) and the shape needs it. Everywhere else, the CPU included, the layer computes exactly what
  it computed before.
* ``"always"``: the padded, masked path on any backend and device (cuDNN where it can run, else XLA's or Keras'
  attention): what the tests compare with the unpadded path on CPU.
* ``"never"``: never padded.

A layer's own ``attention_padding`` wins over the process default, which :func:`attention_padding` sets for a
block and :func:`set_default_mode` for the rest of the process.

Example:
>>> default_mode()
'auto'
>>> with attention_padding("always"):
...     default_mode()
'always'
>>> padded_length(197), padded_length(196), padded_head_dim(60)
(198, 196, 64)
"""

import contextlib
import dataclasses
import functools
import warnings

import keras
from keras import ops

MODES = ("auto", "always", "never")
# cuDNN's training check wants even lengths (see above); a larger multiple only adds padded work
SEQUENCE_MULTIPLE = 2
HEAD_DIM_MULTIPLE = 8
_DEFAULT = ["auto"]


def check_mode(mode, name="attention_padding"):
    """``mode`` if it is one of :data:`MODES`, else a ``ValueError`` that names it."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"`{name}` must be one of {MODES}. Received: {name}={mode!r}")
    return mode


def default_mode():
    """The mode of layers left on ``"auto"``: ``"auto"`` unless :func:`attention_padding` says otherwise."""
    return _DEFAULT[0]


def set_default_mode(mode):
    """Set the mode of layers left on ``"auto"`` for the rest of the process; returns the previous one."""
    previous = _DEFAULT[0]
    _DEFAULT[0] = check_mode(mode)
    return previous


@contextlib.contextmanager
def attention_padding(mode):
    """Trace the ``SelfAttention`` layers left on ``"auto"`` with ``mode`` (one of :data:`MODES`).

    The choice is made when a layer is traced: wrap the first call of a jitted function, ``model.fit`` or
    ``model.predict`` (which trace on their first step), not a later one.
    """
    previous = set_default_mode(mode)
    try:
        yield
    finally:
        _DEFAULT[0] = previous


def padded_length(tokens, multiple=None):
    """``tokens`` rounded up to a multiple of ``multiple`` (default :data:`SEQUENCE_MULTIPLE`)."""
    multiple = SEQUENCE_MULTIPLE if multiple is None else multiple
    return -(-tokens // multiple) * multiple


def padded_head_dim(head_dim):
    """``head_dim`` rounded up to a multiple of :data:`HEAD_DIM_MULTIPLE`."""
    return -(-head_dim // HEAD_DIM_MULTIPLE) * HEAD_DIM_MULTIPLE


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one attention call is padded: true and padded token counts and head dims, the implementations to try."""

    tokens: int
    padded_tokens: int
    head_dim: int
    padded_head_dim: int
    implementations: tuple


@functools.lru_cache(maxsize=None)
def _cuda_capability():
    """The default JAX device's CUDA compute capability as ``(major, minor)`` with cuDNN present, else None."""
    if keras.backend.backend() != "jax":
        return None
    try:
        import jax  # deferred: the JAX backend only
        from jax._src.lib import cuda_versions  # deferred: the JAX backend only

        device = jax.devices()[0]
        if device.platform != "gpu" or cuda_versions is None or not cuda_versions.cudnn_get_version():
            return None
        return tuple(int(part) for part in str(device.compute_capability).split(".")[:2])
    except Exception:  # noqa: BLE001 - no CUDA device, no cuDNN, a ROCm device: no fused kernel to enable
        return None


def cudnn_takes(dtype, head_dim):
    """True when JAX's cuDNN attention can run here on ``dtype`` with ``head_dim`` padded to a multiple of 8."""
    capability = _cuda_capability()
    if capability is None or capability < (8, 0) or str(dtype) not in ("bfloat16", "float16"):
        return False
    return padded_head_dim(head_dim) <= (256 if capability >= (9, 0) else 128)


def plan(mode, tokens, head_dim, dtype, fused):
    """The :class:`Plan` of one attention call, or None for the unpadded path.

    Args:
        mode: the layer's ``attention_padding`` (``"auto"`` defers to :func:`default_mode`).
        tokens: the static token count (None when unknown at trace time: not padded).
        head_dim: the size of each head.
        dtype: the compute dtype.
        fused: whether the call takes the fused path (no weights returned, no attention dropout).
    """
    mode = check_mode(mode)
    mode = default_mode() if mode == "auto" else mode
    if mode == "never" or not fused or tokens is None:
        return None
    backend = keras.backend.backend()
    cudnn = backend == "jax" and cudnn_takes(dtype, head_dim)
    if mode == "auto":
        if not cudnn or (tokens % SEQUENCE_MULTIPLE == 0 and head_dim % HEAD_DIM_MULTIPLE == 0):
            return None
    implementations = ("cudnn", "xla") if cudnn else ("xla",) if backend == "jax" else ("keras",)
    return Plan(tokens, padded_length(tokens), head_dim, padded_head_dim(head_dim), implementations)


def attend(query, key, value, scale, padding):
    """``softmax(q k^T * scale) v`` for ``(B, N, heads, head_dim)`` inputs, through the padded ``padding`` plan."""
    extra_tokens = padding.padded_tokens - padding.tokens
    extra_dims = padding.padded_head_dim - padding.head_dim
    widths = ((0, 0), (0, extra_tokens), (0, 0), (0, extra_dims))
    if extra_tokens or extra_dims:
        query, key, value = (ops.pad(t, widths) for t in (query, key, value))
    batch = ops.shape(query)[0]
    out = None
    for implementation in padding.implementations:
        try:
            out = _attend(query, key, value, scale, padding, batch, implementation)
            break
        except Exception as error:  # noqa: BLE001 - cuDNN refused a case plan() let through: say so, use XLA
            if implementation == padding.implementations[-1]:
                raise
            warnings.warn(
                f"keras_vit: cuDNN attention refused {padding.padded_tokens} tokens (padded from {padding.tokens}), "
                f"head dim {padding.padded_head_dim}, dtype {query.dtype}; using XLA's attention. Reason: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
    if extra_tokens or extra_dims:
        out = out[:, : padding.tokens, :, : padding.head_dim]
    return out


def _attend(query, key, value, scale, padding, batch, implementation):
    if implementation == "keras":
        mask = ops.reshape(ops.arange(padding.padded_tokens) < padding.tokens, (1, 1, 1, padding.padded_tokens))
        return ops.dot_product_attention(query, key, value, mask=mask, scale=scale)
    import jax  # deferred: the JAX backend only
    import jax.numpy as jnp  # deferred: the JAX backend only

    lengths = jnp.full((batch,), padding.tokens, dtype="int32")
    return jax.nn.dot_product_attention(
        query, key, value, scale=scale, key_value_seq_lengths=lengths, implementation=implementation
    )

