"""BMPs through the one decoder: what ``tf.io.decode_bmp`` reads right is TensorFlow's, what it would read wrong
(a palette's indices as gray, bit fields in another order) is Pillow's in ``predict`` and refused in the served
graph; a 32-bit BMP's fourth byte is alpha unless it is 0 everywhere (Windows' "unused" byte), as browsers read it."""

import io
import struct

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit.inference import decoding, images

RNG = np.random.default_rng(7)
PIXELS = RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8)


def bmp32(pixels, fourth, compression=0, masks=None):
    """A bottom-up 32-bit BMP: BITMAPINFOHEADER (40 bytes), or BITMAPV3 (56) with ``masks`` (red, green, blue,
    alpha) for BI_BITFIELDS; each pixel's bytes in the order the masks give (blue, green, red, ``fourth``)."""
    h, w, _ = pixels.shape
    order = [2, 1, 0]  # B, G, R by default
    if masks is not None:  # the byte of each channel: the mask's lowest set bit / 8
        order = [int(np.log2(m & -m)) // 8 for m in masks[:3]]
    rows = b""
    for y in range(h - 1, -1, -1):
        for x in range(w):
            pixel = [0, 0, 0, 0]
            for channel, byte in enumerate(order):
                pixel[byte] = int(pixels[y, x, channel])
            pixel[({0, 1, 2, 3} - set(order)).pop()] = int(fourth[y, x])
            rows += bytes(pixel)
    header = 56 if masks is not None else 40
    info = struct.pack("<IiiHHIIiiII", header, w, h, 1, 32, compression, len(rows), 2835, 2835, 0, 0)
    if masks is not None:
        info += struct.pack("<4I", *masks)
    offset = 14 + len(info)
    return struct.pack("<2sIHHI", b"BM", offset + len(rows), 0, 0, offset) + info + rows


def pillow_bmp(pixels, mode):
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(buffer, format="BMP")
    return buffer.getvalue()


def read(tmp_path, data, name="image.bmp"):
    path = tmp_path / name
    path.write_bytes(data)
    return images.read_image_and_decoder(str(path))


def test_a_palette_bmp_is_read_by_pillow_and_refused_by_the_served_decoder(tmp_path):
    data = pillow_bmp(PIXELS, "P")  # 8 bits per pixel: indices into a colour table
    want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert len(np.unique(want)) > 2  # colours, not grays: indices shown as gray would differ
    pixels, decoder = read(tmp_path, data)
    assert decoder == "pillow"
    np.testing.assert_array_equal(pixels, want)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"BMPs of 24 or 32 bits per pixel.*\n8\n0"):
        decoding.decode(tf.constant(data))


def test_a_32_bit_bmp_whose_fourth_byte_is_zero_is_opaque(tmp_path):
    data = bmp32(PIXELS, np.zeros(PIXELS.shape[:2], np.uint8))  # as Windows writes BI_RGB: the byte unused
    pixels, decoder = read(tmp_path, data)
    assert decoder == "tensorflow"
    np.testing.assert_array_equal(pixels, PIXELS)  # not composited onto white
    np.testing.assert_array_equal(pixels, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))


def test_a_32_bit_bmp_whose_header_has_an_alpha_mask_is_composited_onto_white_and_another_is_opaque(tmp_path):
    alpha = np.full(PIXELS.shape[:2], 255, np.uint8)
    alpha[0, 0], alpha[1, 1] = 0, 128
    plain = bmp32(PIXELS, alpha)  # BI_RGB: the fourth byte "unused", whatever it holds (Pillow: RGB)
    np.testing.assert_array_equal(decoding.decode(tf.constant(plain)).numpy(), PIXELS)
    np.testing.assert_array_equal(read(tmp_path, plain)[0], np.asarray(Image.open(io.BytesIO(plain)).convert("RGB")))
    with_alpha = bmp32(PIXELS, alpha, compression=3, masks=(0xFF0000, 0xFF00, 0xFF, 0xFF000000))
    assert Image.open(io.BytesIO(with_alpha)).mode == "RGBA"  # Pillow reads the mask as alpha too
    got = decoding.decode(tf.constant(with_alpha)).numpy().astype(int)
    assert got[0, 0].tolist() == [255, 255, 255]
    want = np.round((PIXELS[1, 1].astype(int) * 128 + 255 * 127) / 255)
    assert got[1, 1].tolist() == want.astype(int).tolist()
    np.testing.assert_array_equal(got[2:], PIXELS[2:])


def test_bit_fields_are_tensorflows_in_its_byte_order_and_pillows_in_another(tmp_path):
    opaque = np.full(PIXELS.shape[:2], 255, np.uint8)
    standard = bmp32(PIXELS, opaque, compression=3, masks=(0xFF0000, 0xFF00, 0xFF, 0xFF000000))
    pixels, decoder = read(tmp_path, standard, "standard.bmp")
    assert decoder == "tensorflow"
    np.testing.assert_array_equal(pixels, PIXELS)
    swapped = bmp32(PIXELS, opaque, compression=3, masks=(0xFF, 0xFF00, 0xFF0000, 0xFF000000))  # R, G, B, A bytes
    assert not decoding.tf_decodable(swapped)
    pixels, decoder = read(tmp_path, swapped, "swapped.bmp")
    assert decoder == "pillow"
    np.testing.assert_array_equal(pixels, PIXELS)  # TensorFlow would have swapped red and blue
    with pytest.raises(tf.errors.InvalidArgumentError, match="BMPs of 24 or 32 bits per pixel"):
        decoding.decode(tf.constant(swapped))


@pytest.mark.parametrize("mode", ["RGB", "L", "1"])
def test_what_pillow_writes_reads_the_same_on_both_paths(tmp_path, mode):
    data = pillow_bmp(PIXELS, mode)  # 24-bit; 8-bit gray (a palette of grays); 1-bit
    pixels, decoder = read(tmp_path, data)
    assert decoder == ("tensorflow" if mode == "RGB" else "pillow")
    np.testing.assert_array_equal(pixels, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))
