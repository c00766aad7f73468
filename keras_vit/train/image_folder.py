"""A folder of images, one subfolder per class, as an :class:`~keras_vit.train.dataset.ImageDataset`.

``train/`` and ``test/`` subfolders (and ``validation/``) if present, otherwise every fifth image of each
class (sorted by file name) is held out for testing; ``validation_fraction`` holds out a seeded share of
each class's training images. Every file is decoded once up front by the one reader, so a corrupt image is
named before training starts, and read in the pipeline by the one decoder predict and serving use.
"""

import os
import warnings

import numpy as np
import tensorflow as tf

from keras_vit.domains import FRACTION
from keras_vit.inference import decoding
from keras_vit.inference import images as images_lib
from keras_vit.inference.images import IMAGE_EXTENSIONS
from keras_vit.train.choices import VALIDATION_FOLDERS
from keras_vit.train.dataset import ImageDataset


TEST_EVERY = 5  # without test/: image i of each class (sorted by name) is a test image iff i % 5 == 4


def _class_folders(root):
    """The sorted names of ``root``'s class subfolders (a hidden one, ``.ipynb_checkpoints``, is none)."""
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))


def _list_class_folder(root):
    if not os.path.isdir(root):
        raise FileNotFoundError(f"Image folder not found: {root!r}")
    classes = _class_folders(root)
    if not classes:
        raise ValueError(f"Image folder {root!r} has no class subfolders (expected one subfolder per class)")
    files, labels = [], []
    for label, name in enumerate(classes):
        folder = os.path.join(root, name)
        found = sorted(f for f in os.listdir(folder) if images_lib.is_image_file(f))
        files += [os.path.join(folder, f) for f in found]
        labels += [label] * len(found)
    if not files:
        raise ValueError(f"Image folder {root!r} has class subfolders {classes} but no images ({', '.join(IMAGE_EXTENSIONS)})")
    empty = [name for label, name in enumerate(classes) if label not in labels]
    if empty:  # a class of no image is an output the model learns never to give
        warnings.warn(f"Image folder {root!r}: the class subfolder(s) {empty} hold no image ({', '.join(IMAGE_EXTENSIONS)}; "
                      "subfolders of a class folder are not read): a class the model cannot learn.", stacklevel=3)
    return classes, files, np.asarray(labels, "int32")


def _held_for_test(labels, test_every):
    """Whether each file (``labels`` in file order) is a test image: the ``test_every``-th of its class, sorted by name."""
    rank = np.zeros(len(labels), "int64")
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        rank[members] = np.arange(len(members))
    return rank % test_every == test_every - 1


def split_files(path, split, test_every=TEST_EVERY):
    """The image files of ``split`` (``"train"`` or ``"test"``) of an image folder as :func:`load_image_folder` splits
    it (the training split before any validation fraction), listed and not read: what an export verifies on."""
    path = os.fspath(path)
    if os.path.isdir(os.path.join(path, "train")) and os.path.isdir(os.path.join(path, "test")):
        return _list_class_folder(os.path.join(path, split))[1]
    _, files, labels = _list_class_folder(path)
    return [f for f, test in zip(files, _held_for_test(labels, test_every)) if test == (split == "test")]


def _check_images(files):
    """Decode every file once with the one reader, so that a corrupt image is named up front; which ones TF decodes."""
    return np.asarray([images_lib.read_image_and_decoder(path)[1] == "tensorflow" for path in files], bool)


def _decode(path, label, in_graph):
    # the one decoder (keras_vit.inference.decoding), as predict and serving_bytes read files; the files it
    # does not read (TIFF...) through the one reader's Pillow path (keras_vit.inference.images). The decoder is
    # the tf.function the up-front check ran: its graph (EXIF orientation, alpha, every format) is traced once
    # per process, not again for each split's map (about 1.2 s a trace on 2 cores)
    image = tf.cond(
        in_graph,
        lambda: decoding.eager("decode")(tf.io.read_file(path)),
        lambda: tf.numpy_function(lambda p: images_lib.read_image(os.fsdecode(p)), [path], tf.uint8, stateful=False),
    )
    image.set_shape((None, None, 3))
    return image, label


ENTRIES = "_keras_vit_entries"  # a split's attribute: (its undecoded entries, the decoder), read by make_pipeline


def _file_dataset(files, labels, in_graph):
    entries = tf.data.Dataset.from_tensor_slices((np.asarray(files), labels, in_graph))
    ds = entries.map(_decode, num_parallel_calls=tf.data.AUTOTUNE)
    setattr(ds, ENTRIES, (entries, _decode))  # a training pipeline shuffles the file names and decodes after
    return ds


def undecoded(dataset):
    """``(entries, decode)`` of a split of :func:`load_image_folder` (``decode(*entry)`` is ``(image, label)``), or
    None for any other dataset (one a user mapped or took from: it decodes as it is)."""
    return getattr(dataset, ENTRIES, None)


def held_out_count(num, fraction):
    """How many of ``num`` images a validation ``fraction`` holds out: rounded, and one at least for a fraction > 0.

    Example:
    >>> held_out_count(4000, 0.1), held_out_count(4000, 0.0001), held_out_count(4000, 0.0)
    (400, 1, 0)
    """
    count = int(round(num * fraction))
    return 1 if fraction > 0 and count == 0 else count


def _held_out(labels, fraction, seed):
    """A boolean mask of the images held out for validation: ``fraction`` of them, of every class alike, seeded.

    Each class's images are ranked in a seeded random order; the images of the
    lowest relative ranks go, so every class gives its share (rounded overall).
    """
    count = held_out_count(len(labels), fraction)
    rng = np.random.default_rng(seed)
    position = np.zeros(len(labels))
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        position[members] = (rng.permutation(len(members)) + 0.5) / len(members)
    mask = np.zeros(len(labels), bool)
    mask[np.argsort(position, kind="stable")[:count]] = True
    return mask


def load_image_folder(path, *, test_every=TEST_EVERY, validation_fraction=0.0, seed=0):
    """Images in one subfolder per class (``path/<class>/<image>``).

    If ``path/train`` and ``path/test`` exist, each is read as a class folder,
    and ``path/validation`` (or ``path/val``), if it exists, as the validation split.
    Otherwise image ``i`` of each class (files sorted by name) is a test image
    iff ``i % test_every == test_every - 1``. Every file is checked up front:
    a corrupt image raises ``ValueError`` naming it.

    ``validation_fraction`` holds out that share of the training images, of
    each class alike, chosen with ``seed``: the same split every time (as
    ``keras.utils.image_dataset_from_directory(validation_split=..., seed=...)``
    does, stratified). A folder with a validation folder of its own refuses it.

    Returns:
        An :class:`ImageDataset` whose class names are the subfolder names.
    """
    path = os.fspath(path)
    validation_fraction = FRACTION.check(validation_fraction, "validation_fraction")
    train_dir, test_dir = os.path.join(path, "train"), os.path.join(path, "test")
    validation_files, validation_labels = [], np.zeros(0, "int32")
    if os.path.isdir(train_dir) and os.path.isdir(test_dir):
        classes, train_files, train_labels = _list_class_folder(train_dir)
        test_classes, test_files, test_labels = _list_class_folder(test_dir)
        if test_classes != classes:
            raise ValueError(f"train/ and test/ of {path!r} have different classes: {classes} vs {test_classes}")
        validation_dir = next((os.path.join(path, d) for d in VALIDATION_FOLDERS if os.path.isdir(os.path.join(path, d))), None)
        if validation_dir is not None and validation_fraction:
            raise ValueError(
                f"Image folder {path!r} has a validation folder of its own ({validation_dir!r}): leave out "
                f"validation_fraction (--validation-fraction) to validate on it, or remove the folder to hold out a "
                f"fraction of train/. Received: validation_fraction={validation_fraction!r}"
            )
        if validation_dir is not None:
            validation_classes, validation_files, validation_labels = _list_class_folder(validation_dir)
            if validation_classes != classes:
                raise ValueError(
                    f"train/ and {os.path.basename(validation_dir)}/ of {path!r} have different classes: "
                    f"{classes} vs {validation_classes}"
                )
    else:
        splits = [d for d in ("train", "test", *VALIDATION_FOLDERS) if os.path.isdir(os.path.join(path, d))]
        folders = _class_folders(path) if os.path.isdir(path) else []
        if "train" in splits and len(splits) == len(folders):  # split folders only (a class named train has others)
            raise ValueError(f"Image folder {path!r} has {', '.join(s + '/' for s in splits)} but no test/: a split "
                             "folder needs train/ and test/ (validation/ optional), each with one subfolder per class")
        if test_every < 2:
            raise ValueError(f"`test_every` must be at least 2. Received: test_every={test_every!r}")
        classes, files, labels = _list_class_folder(path)
        is_test = _held_for_test(labels, test_every)
        train_files = [f for f, t in zip(files, is_test) if not t]
        test_files = [f for f, t in zip(files, is_test) if t]
        train_labels, test_labels = labels[~is_test], labels[is_test]
        if not test_files:
            raise ValueError(f"Image folder {path!r} is too small to hold out a test image from any class (need {test_every} per class)")
    if validation_fraction:
        held = _held_out(train_labels, validation_fraction, seed)
        if held.all():
            raise ValueError(
                f"validation_fraction={validation_fraction!r} of the {len(train_files)} training images of {path!r} "
                "leaves none to train on"
            )
        validation_files = [f for f, h in zip(train_files, held) if h]
        train_files = [f for f, h in zip(train_files, held) if not h]
        validation_labels, train_labels = train_labels[held], train_labels[~held]
    in_graph = _check_images(train_files + validation_files + test_files)
    n_train, n_validation = len(train_files), len(validation_files)
    return ImageDataset(
        name=path,
        class_names=classes,
        train=_file_dataset(train_files, train_labels, in_graph[:n_train]),
        test=_file_dataset(test_files, test_labels, in_graph[n_train + n_validation :]),
        validation=(
            _file_dataset(validation_files, validation_labels, in_graph[n_train : n_train + n_validation])
            if validation_files else None
        ),
        num_train=len(train_files),
        num_test=len(test_files),
        num_validation=len(validation_files),
    )
