"""EXIF orientation in a TensorFlow graph, for the one decoder (:mod:`keras_vit.inference.decoding`).

Cameras store a photo as the sensor saw it and record in the EXIF
``Orientation`` tag (0x0112) how to turn it upright; keras_vit's Pillow reader
applies it (``ImageOps.exif_transpose``), ``tf.io.decode_image`` does not.
:func:`orientation` reads the tag from the encoded bytes with TensorFlow ops
only (the served graph cannot run Pillow) and :func:`apply_orientation` turns
the decoded image as Pillow does, so a photo is classified upright by
``keras-vit predict`` and by the SavedModel's ``serving_bytes`` alike.

The tag is looked for where JPEG (an ``APP1`` segment ``Exif\\0\\0``) and PNG
(an ``eXIf`` chunk) keep it, in the first :data:`SEARCH_BYTES` bytes; any other
file, or a tag that is missing, truncated or outside 1..8, means 1 (upright).
"""

SEARCH_BYTES = 65536 + 16  # a JPEG APP1 segment is at most 64 KiB, and it comes first
ORIENTATION_TAG = 0x0112
_MARKERS = (  # (file signature, what precedes the TIFF header, the 2 bytes before that or None)
    (b"\xff\xd8", b"Exif\x00\x00", b"\xff\xe1"),  # JPEG: APP1 marker, length, "Exif\0\0"
    (b"\x89PNG\r\n\x1a\n", b"eXIf", None),  # PNG: length, chunk type "eXIf"
)


def _tiff_orientation(tiff):
    """The orientation tag of a TIFF header + IFD0 given as a uint8 vector (1 when absent or invalid)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    size = tf.shape(tiff)[0]
    padded = tf.concat([tf.cast(tiff, tf.int32), tf.zeros([16], tf.int32)], 0)
    little = tf.logical_and(size >= 8, tf.equal(padded[0], 0x49))

    def u16(offsets):
        a, b = tf.gather(padded, offsets), tf.gather(padded, offsets + 1)
        return tf.where(little, a + 256 * b, 256 * a + b)

    def u32(offset):  # offsets in a header of at most SEARCH_BYTES: no int32 overflow that matters
        return tf.where(little, u16(offset) + 65536 * u16(offset + 2), 65536 * u16(offset) + u16(offset + 2))

    valid = tf.logical_and(size >= 8, tf.logical_or(tf.equal(padded[0], 0x49), tf.equal(padded[0], 0x4D)))
    ifd = tf.where(valid, u32(tf.constant(4)), 0)
    valid = tf.logical_and(valid, tf.logical_and(ifd >= 8, ifd + 2 <= size))
    ifd = tf.where(valid, ifd, 0)
    count = tf.where(valid, u16(ifd), 0)
    count = tf.minimum(count, tf.maximum((size - ifd - 2) // 12, 0))  # entries that are really there
    entries = ifd + 2 + 12 * tf.range(count)
    found = tf.equal(u16(entries), ORIENTATION_TAG)
    values = u16(entries + 8)  # type SHORT: the value sits in the first 2 of the 4 value bytes
    value = tf.reduce_max(tf.concat([tf.where(found, values, 0), [0]], 0))  # 0 when no entry matches
    return tf.where(tf.logical_and(value >= 1, value <= 8), value, 1)


def orientation(data):
    """EXIF orientation (1..8) of one encoded image, a scalar ``tf.string``; 1 when it has none.

    Example:
    >>> import tensorflow as tf
    >>> int(orientation(tf.constant(b"not an image")))
    1
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    head = tf.strings.substr(data, 0, SEARCH_BYTES)
    result = tf.constant(1, tf.int32)
    for signature, marker, before in _MARKERS:
        parts = tf.strings.split(head, sep=marker, maxsplit=1)
        present = tf.logical_and(
            tf.equal(tf.strings.substr(head, 0, len(signature)), signature), tf.equal(tf.size(parts), 2)
        )
        prefix = parts[0]
        if before is not None:  # the marker must open the APP1 segment: FFE1, then its 2 length bytes
            tail = tf.strings.substr(prefix, tf.maximum(tf.strings.length(prefix) - 4, 0), 2)
            present = tf.logical_and(present, tf.equal(tail, before))
        tiff = tf.io.decode_raw(tf.strings.substr(parts[-1], 0, SEARCH_BYTES), tf.uint8)
        value = tf.cond(present, lambda tiff=tiff: _tiff_orientation(tiff), lambda: tf.constant(1, tf.int32))
        result = tf.where(tf.equal(result, 1), value, result)
    return result


def apply_orientation(image, value):
    """Turn a decoded ``(H, W, C)`` image upright as ``PIL.ImageOps.exif_transpose`` does for ``value``."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    def transpose(x):
        return tf.transpose(x, (1, 0, 2))

    branches = [
        lambda: image,  # 1 (and anything invalid)
        lambda: image,  # 1
        lambda: tf.reverse(image, [1]),  # 2: mirrored left-right
        lambda: tf.reverse(image, [0, 1]),  # 3: rotated 180
        lambda: tf.reverse(image, [0]),  # 4: mirrored top-bottom
        lambda: transpose(image),  # 5: PIL TRANSPOSE
        lambda: tf.image.rot90(image, k=3),  # 6: PIL ROTATE_270 (90 clockwise)
        lambda: tf.reverse(transpose(image), [0, 1]),  # 7: PIL TRANSVERSE
        lambda: tf.image.rot90(image, k=1),  # 8: PIL ROTATE_90 (90 counter-clockwise)
    ]
    index = tf.where(tf.logical_and(value >= 1, value <= 8), value, 0)
    return tf.switch_case(tf.cast(index, tf.int32), branches)

