"""The one image decoder and the one resize rule, in TensorFlow ops.

``keras-vit predict`` (:func:`keras_vit.inference.images.read_image`), the SavedModel's
``serving_bytes`` signature (inside the served graph, where Pillow cannot run), the export's
verification and the training image folders all decode and resize image files here, so that a
file gets the same pixels, and the same probabilities, on every path:

* :func:`decode`: the encoded bytes of a JPEG, PNG, GIF, BMP or WebP file (what
  ``tf.io.decode_image`` reads; :func:`tf_decodable` tells them by their signature) to
  ``uint8 (H, W, 3)``: turned upright by its EXIF orientation (JPEG and PNG,
  :mod:`keras_vit.inference.exif`); gray to RGB; transparent pixels composited onto white
  (``round((rgb * a + 255 * (255 - a)) / 255)``; a 32-bit BMP's fourth byte is alpha only where its
  header has an alpha mask, and not when it is 0 in every pixel: Pillow's and browsers' reading of
  Windows' "unused" byte); 16-bit PNGs scaled to 8 bits as
  ``round(v / 257)``; the first frame of an animation. An image with no pixels (a zero height or
  width) fails with ``InvalidArgumentError`` naming its size;
* :func:`resize`: bilinear with antialiasing (``tf.image.resize(..., "bilinear", antialias=True)``:
  half-pixel centres, edges clamped, a wider triangle filter when shrinking), to float32 in
  [0, 255], not rounded;
* :func:`decode_and_resize`: both, what a model of input size ``(h, w)`` is given.

What GIF keeps of transparency is lost in ``tf.io.decode_gif`` (transparent pixels come out
black, not white), and WebP files' EXIF orientation is not read. ``tf.io.decode_bmp`` reads a BMP's
bytes as blue, green, red (and alpha) whatever its header says, so only the BMPs whose pixels are
stored that way are TensorFlow's (:data:`BMP_MASKS`): 24 or 32 bits per pixel, uncompressed or with
those bit fields. Another BMP (a palette of 1, 4 or 8 bits, 16 bits, RLE, other masks) would decode
wrong, its palette indices shown as gray: :func:`tf_decodable` leaves it to Pillow, and :func:`decode`
(the served graph) refuses it.

Example:
>>> import tensorflow as tf
>>> png = tf.io.encode_png(tf.constant([[[0, 0, 255, 255], [255, 0, 0, 0]]], tf.uint8))  # blue, transparent red
>>> decode(png).numpy().tolist()
[[[0, 0, 255], [255, 255, 255]]]
>>> decode_and_resize(png, (2, 4)).shape
TensorShape([2, 4, 3])
"""

from keras_vit.hardware.terminal import native_stderr_filtered
from keras_vit.inference import exif

METHOD = "bilinear"  # with antialias=True: the one resize rule
SIGNATURES = (  # the files tf.io.decode_image reads, told by their first bytes as it tells them
    (0, b"\xff\xd8\xff"),  # JPEG
    (0, b"\x89PNG\r\n\x1a\n"),  # PNG
    (0, b"GIF87a"),
    (0, b"GIF89a"),
    (0, b"BM"),  # BMP
    (8, b"WEBP"),  # RIFF....WEBP
)
_PNG = b"\x89PNG\r\n\x1a\n"
BMP_MASKS = (0xFF0000, 0xFF00, 0xFF)  # BI_BITFIELDS' red, green, blue masks of the byte order tf.io.decode_bmp reads
_BMP_HEADER = 70  # header size at 14, bits per pixel at 28, compression at 30, bit fields' masks at 54, 58, 62, 66 (alpha)
_BMP_ALPHA = (0xFF000000).to_bytes(4, "little")  # the alpha mask of BI_BITFIELDS' blue-green-red-alpha bytes


def _bmp_read_by_tf(bits, compression, masks):
    """Whether ``tf.io.decode_bmp`` reads a BMP's pixels as they are: see the module docstring."""
    return (bits in (24, 32) and compression == 0) or (bits == 32 and compression == 3 and masks == BMP_MASKS)


def tf_decodable(data):
    """Whether encoded ``data`` (bytes) is a format :func:`decode` reads.

    Example:
    >>> tf_decodable(b"\\x89PNG\\r\\n\\x1a\\n..."), tf_decodable(b"II*\\x00 a TIFF")
    (True, False)
    """
    if data[:2] == b"BM":
        field = lambda offset, size: int.from_bytes(data[offset : offset + size], "little")  # noqa: E731
        return _bmp_read_by_tf(field(28, 2), field(30, 4), tuple(field(o, 4) for o in (54, 58, 62)))
    return any(data[offset : offset + len(signature)] == signature for offset, signature in SIGNATURES)


def declared_size(data):
    """``(height, width)`` that a PNG, BMP or JPEG header declares (bytes), or None for another file or a header cut short.

    Read before decoding, so that a file of zero height or width is refused as such, where the
    decoders only say they cannot read it.

    Example:
    >>> declared_size(b"\\x89PNG\\r\\n\\x1a\\n" + bytes(8) + (16).to_bytes(4, "big") + (0).to_bytes(4, "big"))
    (0, 16)
    """
    if data[:8] == _PNG and len(data) >= 24:  # IHDR: width, height (big-endian) at bytes 16..24
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if data[:2] == b"BM" and len(data) >= 26:  # DIB header: width, height (signed; negative: top-down)
        return abs(int.from_bytes(data[22:26], "little", signed=True)), abs(int.from_bytes(data[18:22], "little", signed=True))
    if data[:3] == b"\xff\xd8\xff":  # the first start-of-frame segment: FFCn, length, precision, height, width
        offset = 2
        while offset + 9 <= len(data) and data[offset] == 0xFF:
            marker = data[offset + 1]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                return int.from_bytes(data[offset + 5 : offset + 7], "big"), int.from_bytes(data[offset + 7 : offset + 9], "big")
            offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    return None


def decode(data):
    """One encoded image (a scalar ``tf.string``) to ``uint8 (H, W, 3)``; see the module docstring."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    data = tf.convert_to_tensor(data, tf.string)
    is_png = tf.equal(tf.strings.substr(data, 0, len(_PNG)), _PNG)
    is_bmp = tf.equal(tf.strings.substr(data, 0, 2), b"BM")
    header = tf.strings.substr(tf.strings.join([data, bytes(_BMP_HEADER)]), 0, _BMP_HEADER)  # a short file: zeros

    def field(offset, size):  # a little-endian integer of the BMP header
        raw = tf.io.decode_raw(tf.strings.substr(header, offset, size), tf.uint16 if size == 2 else tf.int32)
        return tf.cast(raw[0], tf.int64)

    bits, compression, header_size = field(28, 2), field(30, 4), field(14, 4)
    masks = tf.stack([field(offset, 4) for offset in (54, 58, 62)])
    uncompressed = tf.logical_and(tf.logical_or(tf.equal(bits, 24), tf.equal(bits, 32)), tf.equal(compression, 0))
    bgr_fields = tf.logical_and(tf.equal(bits, 32), tf.logical_and(tf.equal(compression, 3), tf.reduce_all(tf.equal(masks, BMP_MASKS))))
    refused = ("TensorFlow's decoder reads BMPs of 24 or 32 bits per pixel, uncompressed or with blue-green-red bit "
               "fields, only (this one would decode wrong: a palette's indices as gray); send it as PNG or JPEG. "
               "Received: bits per pixel, compression =")
    readable = tf.logical_or(tf.logical_not(is_bmp), tf.logical_or(uncompressed, bgr_fields))
    with tf.control_dependencies([tf.debugging.Assert(readable, [refused, bits, compression])]):
        data = tf.identity(data)
    # a PNG is decoded at 16 bits (8-bit ones come out as v * 257) and brought to 8 bits as round(v / 257),
    # exact for 8-bit files; tf.io.decode_image would truncate 16-bit ones (v >> 8)
    image = tf.cond(
        is_png,
        lambda: tf.round(tf.cast(tf.io.decode_png(data, channels=0, dtype=tf.uint16), tf.float32) / 257.0),
        lambda: tf.cast(tf.io.decode_image(data, channels=0, expand_animations=False), tf.float32),
    )
    size = tf.shape(image)[:2]
    message = "The image has no pixels: it must be at least 1x1. Received: (height, width) ="
    with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(size >= 1), [message, size])]):
        image = tf.identity(image)
    channels = tf.shape(image)[-1]  # 1 gray, 2 gray + alpha, 3 RGB, 4 RGBA
    rgb = tf.gather(image, tf.where(channels < 3, tf.constant([0, 0, 0]), tf.constant([0, 1, 2])), axis=-1)
    # a BMP's fourth byte is alpha where BI_BITFIELDS' header (BITMAPV3 and later: 56 bytes or more) has its mask, as
    # Pillow reads it; Windows' BI_RGB byte is "unused" (Pillow and browsers: opaque), and so is one 0 everywhere
    declared = tf.logical_and(tf.logical_and(tf.equal(compression, 3), header_size >= 56),
                              tf.equal(tf.strings.substr(header, 66, 4), _BMP_ALPHA))
    opaque_bmp = tf.logical_and(is_bmp, tf.logical_or(tf.logical_not(declared), tf.reduce_all(tf.equal(image[..., -1], 0.0))))
    alpha = tf.where(tf.logical_and(channels % 2 == 0, tf.logical_not(opaque_bmp)), image[..., -1:], 255.0)
    image = tf.round((rgb * alpha + 255.0 * (255.0 - alpha)) / 255.0)  # onto white; exact where alpha is 255
    image = exif.apply_orientation(tf.cast(image, tf.uint8), exif.orientation(data))
    return tf.ensure_shape(image, (None, None, 3))


def resize(image, size):
    """``image`` ``(H, W, C)`` (or a batch) as float32 resized to ``size`` ``(h, w)`` by the one rule, in [0, 255].

    Example:
    >>> import tensorflow as tf
    >>> resize(tf.constant([[[0.0], [255.0]]]), (1, 4)).numpy().ravel().tolist()
    [0.0, 63.75, 191.25, 255.0]
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    image = tf.image.resize(tf.cast(image, tf.float32), tuple(size), method=METHOD, antialias=True)
    return tf.clip_by_value(image, 0.0, 255.0)


def decode_and_resize(data, size):
    """Encoded bytes to float32 ``(h, w, 3)`` in [0, 255]: :func:`decode`, then :func:`resize` to ``size``."""
    return resize(decode(data), size)


_EAGER = {}
_TRACED = []  # traced_decode's one ConcreteFunction


def eager(name):
    """``decode``, ``decode_and_resize`` or ``resize`` as a ``tf.function`` traced once per call signature and process,
    for Python callers and for the tf.data maps that decode files (an image folder's splits share its one trace)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    if name not in _EAGER:
        function = {"decode": decode, "decode_and_resize": decode_and_resize, "resize": resize}[name]
        _EAGER[name] = _first_run_filtered(tf.function(function, reduce_retracing=True))
    return _EAGER[name]


def traced_decode():
    """:func:`decode` as one traced graph per process (a ``ConcreteFunction`` of a scalar ``tf.string``), for the
    graphs that call it: every SavedModel's ``serving_bytes`` embeds this one trace instead of tracing the decoder
    (every format, EXIF, alpha) again for each export, and once more inside ``tf.saved_model.save``."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    if not _TRACED:
        _TRACED.append(tf.function(decode, autograph=False).get_concrete_function(tf.TensorSpec((), tf.string)))
    return _TRACED[0]


def _first_run_filtered(function):
    """``function``, its first run (where TensorFlow builds the graph) under
    :func:`keras_vit.hardware.terminal.native_stderr_filtered`: there oneDNN, on for an AVX2 CPU, logs an
    ERROR that reports no error (uint8 kernels need AVX-512; Eigen's run instead), which the filter drops
    at the log level ``TF_CPP_MIN_LOG_LEVEL`` asks for (nothing is dropped when it is unset)."""
    ran = []

    def run(*args, **kwargs):
        if ran:
            return function(*args, **kwargs)
        with native_stderr_filtered():
            result = function(*args, **kwargs)
        ran.append(True)
        return result

    return run
