"""Image files that a plain reader gets wrong, with the pixels they hold: shared by the inference tests."""

import numpy as np


def awkward_images(folder):
    """Files that a plain ``convert("RGB")`` or ``tf.io.decode_image`` reads wrong, and what they hold.

    Returns ``({file name: expected uint8 (H, W, 3)}, truncated_jpeg_path)``; the
    expected pixels are computed here from the arrays written, not by the reader.
    """
    import io

    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    expected = {}
    # 16-bit grayscale PNG (Pillow mode I;16): a ramp over the whole 0..65535 range, 8 bits = round(v / 257)
    ramp = np.linspace(0, 65535, 18 * 26).round().astype(np.uint16).reshape(18, 26)
    Image.fromarray(ramp).save(folder / "gray16.png")
    expected["gray16.png"] = np.repeat(np.round(ramp / 257.0).astype(np.uint8)[..., None], 3, axis=-1)
    # a JPEG stored 20 wide x 12 high with EXIF orientation 6: shown rotated 90 degrees clockwise, 12 wide x 20 high
    stored = np.zeros((12, 20, 3), np.uint8)
    stored[:, :10] = (250, 20, 20)
    stored[:, 10:] = (20, 20, 250)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(stored).save(folder / "exif.jpg", exif=exif, quality=95)
    import tensorflow as tf

    # the stored orientation, as JPEG decoders without EXIF give it: TensorFlow's, the one decoder's (Pillow's
    # libjpeg rounds some pixels of this high-contrast image differently, by up to 7)
    decoded = tf.io.decode_jpeg((folder / "exif.jpg").read_bytes(), channels=3).numpy()
    expected["exif.jpg"] = np.rot90(decoded, k=-1)
    # a 32-bit float TIFF in [0, 1]
    values = rng.uniform(0, 1, (14, 22)).astype("float32")
    Image.fromarray(values).save(folder / "float.tif")
    expected["float.tif"] = np.repeat(np.round(values * 255.0).astype(np.uint8)[..., None], 3, axis=-1)
    # a JPEG cut in half: its header is fine (Image.verify() passes), its pixels are not all there
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(buffer, "JPEG", quality=90)
    truncated = folder / "truncated.jpg"
    truncated.write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    return expected, truncated
