"""The one image reader of keras_vit: listing image files, decoding them to RGB, resizing.

``keras-vit predict``, ``keras-vit attention``, the export's ``--eval-data``
folders and the training image-folder dataset all read files here, and the
SavedModel's ``serving_bytes`` signature decodes in its graph with the same
TensorFlow function (:mod:`keras_vit.inference.decoding`), so an image gives
the same pixels, and the same probabilities, on every path:

* :data:`IMAGE_EXTENSIONS` is the one list of file names a folder is searched
  for (hidden files skipped);
* :func:`read_image` decodes a file fully to ``uint8 (H, W, 3)``: JPEG, PNG,
  GIF, BMP and WebP with :func:`keras_vit.inference.decoding.decode` (EXIF
  orientation applied; gray to RGB; transparent pixels composited onto white;
  16-bit PNGs scaled to 8 bits as ``round(v / 257)``); the files it does not
  read (TIFF, palette BMP, ...) with Pillow by the same rules, float images
  (TIFF) taken as [0, 1] and scaled by 255. A file that does not decode, or
  whose header declares a zero height or width, raises a ``ValueError``
  naming it;
* :func:`resize` is the one bilinear resize (:func:`keras_vit.inference.decoding.resize`:
  half-pixel centres, edges clamped, antialiased when shrinking), for images
  and for heatmaps;
* :func:`load_image` is what a model takes: float32 RGB in [0, 255],
  optionally resized to its input size (no crop).
"""

import io
import os
import stat

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from keras_vit.inference import decoding

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")

_SIXTEEN_BIT_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N")
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")


def is_image_file(name):
    """Whether a file name has one of :data:`IMAGE_EXTENSIONS` and is not hidden.

    Example:
    >>> is_image_file("cat.JPG"), is_image_file("notes.txt"), is_image_file("._cat.jpg")
    (True, False, False)
    """
    base = os.path.basename(os.fspath(name))
    return not base.startswith(".") and base.lower().endswith(IMAGE_EXTENSIONS)


def list_images(folder_or_files, recursive=False):
    """The image files of a folder, or of a list of files and folders, in order.

    A folder becomes its image files (:func:`is_image_file`), sorted by path;
    ``recursive`` also searches its subfolders. Files are kept as given, even
    missing ones or ones with another extension, so that reading them reports
    the problem for that file.

    Args:
        folder_or_files: a path, or a list of paths.
        recursive: search the subfolders of each folder too.

    Returns:
        A list of paths (strings).

    Raises:
        ValueError: a folder holds no image file (the message names it).
        PermissionError: a folder may not be listed (the message names it).

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name in ("b.png", "a.JPG", "notes.txt"):
    ...     open(os.path.join(folder, name), "wb").close()
    >>> [os.path.basename(p) for p in list_images(folder)]
    ['a.JPG', 'b.png']
    """
    if isinstance(folder_or_files, (str, os.PathLike)):
        folder_or_files = [folder_or_files]
    paths = []
    for item in folder_or_files:
        item = os.fspath(item)
        if not os.path.isdir(item):
            paths.append(item)
            continue
        try:
            if recursive:
                found = [os.path.join(root, name) for root, _, names in os.walk(item, onerror=_raise) for name in names]
            else:
                found = [os.path.join(item, name) for name in os.listdir(item)]
        except PermissionError as error:
            raise PermissionError(f"Permission denied: cannot list folder {error.filename or item!r}") from None
        found = sorted(path for path in found if is_image_file(path) and os.path.isfile(path))
        if not found:
            raise ValueError(f"No image files ({', '.join(IMAGE_EXTENSIONS)}) in folder: {item!r}")
        paths.extend(found)
    return paths


def _raise(error):
    raise error


def _to_rgb(image, path):
    """A decoded Pillow image as uint8 RGB (H, W, 3); see the module docstring for the conversions."""
    if image.mode in _SIXTEEN_BIT_MODES or image.mode == "F":  # one channel, more than 8 bits
        pixels = np.asarray(image, dtype="float64")
        kind, high = ("float", 1) if image.mode == "F" else ("16-bit", 65535)
        if not np.all(np.isfinite(pixels)) or pixels.min() < 0 or pixels.max() > high:
            raise ValueError(
                f"Image {path!r} ({image.mode!r} pixels) has values outside [0, {high}]: "
                f"{pixels.min():g} to {pixels.max():g}; {kind} images are read as [0, {high}]"
            )
        gray = np.round(pixels * 255.0 if kind == "float" else pixels / 257.0).astype("uint8")
        return np.repeat(gray[..., None], 3, axis=-1)
    if image.mode in _ALPHA_MODES or "transparency" in image.info:
        image = image.convert("RGBA")
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, image)
    try:
        image = image.convert("RGB")
    except ValueError as error:  # e.g. modes Pillow cannot convert
        raise ValueError(f"Cannot convert image {path!r} (mode {image.mode!r}) to RGB ({error})") from None
    return np.asarray(image, dtype="uint8")


def read_image(path):
    """Decode an image file fully to RGB ``uint8 (H, W, 3)``.

    JPEG, PNG, GIF, BMP and WebP files are decoded by the one decoder,
    :func:`keras_vit.inference.decoding.decode`, as the SavedModel's
    ``serving_bytes`` decodes them; the others (TIFF, palette BMP, ...) by
    Pillow with the same rules. EXIF orientation is applied; grayscale,
    palette and CMYK images become RGB; transparent pixels are composited
    onto white; 16-bit images are scaled to 8 bits (``round(v / 257)``);
    float images (e.g. 32-bit TIFF) are taken as [0, 1] and scaled by 255.
    The first frame of an animation is read.

    Args:
        path: the image file (JPEG, PNG, BMP, GIF, WebP, TIFF, ... anything
            TensorFlow or Pillow decodes).

    Returns:
        A ``uint8`` array ``(H, W, 3)``.

    Raises:
        FileNotFoundError: no such file.
        PermissionError: the file, or a folder on its path, may not be read.
        IsADirectoryError: ``path`` is a folder.
        ValueError: the file is not an image either decoder reads, is truncated
            or corrupt, has no pixels (a zero height or width), has more pixels than Pillow's decompression-bomb
            limit (``PIL.Image.MAX_IMAGE_PIXELS``) allows, or holds values
            outside the range of its type; the message names the file.

    Example:
    >>> import tempfile
    >>> from PIL import Image
    >>> path = os.path.join(tempfile.mkdtemp(), "gray.png")
    >>> Image.new("L", (4, 2), 100).save(path)
    >>> image = read_image(path)
    >>> image.shape, image.dtype, image[0, 0].tolist()
    ((2, 4, 3), dtype('uint8'), [100, 100, 100])
    """
    return read_image_and_decoder(path)[0]


def read_image_and_decoder(path):
    """``(pixels, decoder)``: :func:`read_image`'s pixels, and ``"tensorflow"`` (the one decoder read the file) or ``"pillow"``.

    A training pipeline decodes in its graph the files the one decoder reads, and the others with Pillow.
    """
    path = os.fspath(path)
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file: {path!r}") from None
    except PermissionError:  # os.path.exists says False in a folder we may not search: not "no such file"
        raise PermissionError(f"Permission denied: cannot reach {path!r} (a folder on the path is not searchable)") from None
    if is_dir:
        raise IsADirectoryError(f"Expected an image file, got a folder: {path!r}")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except PermissionError:
        raise PermissionError(f"Permission denied: cannot read {path!r}") from None
    size = decoding.declared_size(data)
    if size is not None and min(size) < 1:
        raise ValueError(f"Image {path!r} has no pixels: its header declares {size[0]}x{size[1]} (height x width)")
    try:
        with Image.open(io.BytesIO(data)) as image:  # the header only: Pillow's decompression-bomb check
            image.size
    except Image.DecompressionBombError as error:  # not an OSError: it would end a whole predict run
        raise ValueError(f"Image too large to decode safely: {path!r} ({error})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError):
        pass  # the decoders below say what is wrong
    if decoding.tf_decodable(data):
        import tensorflow as tf  # deferred: TensorFlow, not imported by keras_vit under the JAX and PyTorch backends

        try:
            return decoding.eager("decode")(tf.constant(data)).numpy(), "tensorflow"
        except tf.errors.InvalidArgumentError as error:
            tf_error = _decoder_message(error.message)
            if "no pixels" in tf_error:
                raise ValueError(f"Image {path!r} has no pixels ({tf_error})") from None
    else:
        tf_error = None
    try:  # what tf.io.decode_image does not read (TIFF, palette BMP, ...): Pillow, by the same rules
        with Image.open(io.BytesIO(data)) as image:
            image.load()  # decode every byte: a truncated or corrupt file fails here, not later
            image = ImageOps.exif_transpose(image)
    except Image.DecompressionBombError as error:
        raise ValueError(f"Image too large to decode safely: {path!r} ({error})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError) as error:
        unknown = "not an image TensorFlow or Pillow can identify: another format, or a damaged header"
        why = tf_error or (unknown if isinstance(error, UnidentifiedImageError) else error)
        raise ValueError(f"Corrupt or unreadable image: {path!r} ({why})") from None
    pixels = _to_rgb(image, path)
    if min(pixels.shape[:2]) < 1:
        raise ValueError(f"Image {path!r} has no pixels: {pixels.shape[0]}x{pixels.shape[1]} (height x width)")
    return pixels, "pillow"


def _decoder_message(message):
    """What a TensorFlow decoder says is wrong ("Invalid PNG data, size 6210"), without the graph's wrapping
    ("Graph execution error:", "Detected at node ...", the Python frames, "[[{{node ...}}]]")."""
    said = [line.strip() for line in message.splitlines() if line.strip() and not line.strip().startswith(
        ("Graph execution error", "Detected at node", "File ", "[["))]
    return said[-1] if said else message.strip()


def _size(size, name="size"):
    """``(h, w)`` from an int or a pair of positive ints."""
    pair = (size, size) if isinstance(size, (int, np.integer)) else size
    try:
        h, w = (int(v) for v in pair)
        valid = h >= 1 and w >= 1 and not isinstance(size, (bool, str))
    except (TypeError, ValueError):
        valid = False
    if not valid:
        raise ValueError(f"Expected `{name}` to be a positive int or (height, width). Received: {name}={size!r}")
    return h, w


def resize(array, size):
    """Bilinear resize of an image ``(H, W, C)`` or a map ``(H, W)`` to ``size`` ``(h, w)``.

    The one resize rule (:func:`keras_vit.inference.decoding.resize`,
    ``tf.image.resize(..., "bilinear", antialias=True)``): pixel centres at
    half-pixel positions, edges clamped, and antialiased (a wider triangle
    filter) when shrinking, as the SavedModel's ``serving_bytes`` resizes.
    ``uint8`` arrays stay ``uint8`` (rounded); any other dtype is resized,
    and returned, in float32 (images are clipped to [0, 255] only by
    :func:`load_image`, maps are not).

    Example:
    >>> resize(np.array([[0.0, 1.0]]), (1, 4))
    array([[0.  , 0.25, 0.75, 1.  ]], dtype=float32)
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported by keras_vit under the JAX and PyTorch backends

    h, w = _size(size)
    array = np.asarray(array)
    if array.ndim not in (2, 3):
        raise ValueError(f"Expected an image (H, W, C) or a map (H, W). Received: shape={array.shape}")
    is_uint8 = array.dtype == np.uint8
    array = array.astype("float32", copy=False)
    if array.shape[:2] == (h, w):
        return array.astype("uint8") if is_uint8 else array
    planar = array if array.ndim == 3 else array[..., None]
    resized = tf.image.resize(planar, (h, w), method=decoding.METHOD, antialias=True).numpy()
    resized = resized if array.ndim == 3 else resized[..., 0]
    return np.clip(np.round(resized), 0, 255).astype("uint8") if is_uint8 else resized


def load_image(path, image_size=None):
    """Read an image file as the models take it: RGB float32 in [0, 255], optionally resized.

    :func:`read_image`, then :func:`resize` to exactly ``image_size`` (no
    crop), as in the ViT fine-tuning evaluation.

    Args:
        path: the image file.
        image_size: None (the file's own size), an int, or ``(height, width)``.

    Returns:
        float32 ``(H, W, 3)``.

    Example:
    >>> import tempfile
    >>> from PIL import Image
    >>> path = os.path.join(tempfile.mkdtemp(), "red.png")
    >>> Image.new("RGB", (64, 48), (255, 0, 0)).save(path)
    >>> image = load_image(path, image_size=(32, 32))
    >>> image.shape, image.dtype, image[0, 0].tolist()
    ((32, 32, 3), dtype('float32'), [255.0, 0.0, 0.0])
    """
    if image_size is not None:
        image_size = _size(image_size, "image_size")
    image = read_image(path)
    if image_size is None:
        return image.astype("float32")
    return decoding.eager("resize")(image, image_size).numpy()
