"""Class names: the ImageNet lists of the original checkpoints, label files, and
the lookup that finds the names stored with a model.

The ImageNet-1k and ImageNet-21k lists under ``keras_vit/inference/assets/`` come from
timm 1.0.31 (``timm/data/_info/``, Apache-2.0): the WordNet ids in the order of
the original ViT heads (``imagenet21k_goog_synsets.txt`` for the 21,843-class
imagenet21k checkpoints) joined with their lemmas.

Where names come from, first match wins (:func:`class_names`):

1. names given explicitly (a list, or a text file with one name per line);
2. names stored with the model: each reader registered with
   :func:`register_label_reader` is asked in turn (other formats plug theirs
   in here); built in are ``class_names`` in the ``keras_vit.json`` entry of a
   ``.keras`` saved by ``keras-vit train``, a ``model.class_names`` attribute,
   label files next to the model (``<model>.labels.txt``, ``labels.txt``) or in
   a SavedModel's ``assets/``, and label files zipped onto a ``.tflite`` (as
   TFLite metadata stores associated files);
3. the ImageNet-1k or -21k list when the head has 1000 or 21843 classes;
4. ``class_0``, ``class_1``, ...
"""

import functools
import os
import zipfile

from keras_vit import saving

IMAGENET1K = "imagenet1k"
IMAGENET21K = "imagenet21k"
DATASETS = {IMAGENET1K: ("imagenet1k_labels.txt", 1000), IMAGENET21K: ("imagenet21k_labels.txt", 21843)}
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")

# file names a model's class names may be stored under, next to it or in its assets
LABEL_FILE_NAMES = ("labels.txt", "class_names.txt", "classes.txt")

_LABEL_READERS = []


@functools.lru_cache(maxsize=None)
def imagenet_classes(dataset=IMAGENET1K):
    """``[(wordnet_id, lemmas), ...]`` of ``"imagenet1k"`` or ``"imagenet21k"``, in head order.

    Example:
    >>> imagenet_classes("imagenet1k")[0]
    ('n01440764', 'tench, Tinca tinca')
    """
    if dataset not in DATASETS:
        raise ValueError(f"Unknown label set: expected one of {tuple(DATASETS)}. Received: dataset={dataset!r}")
    filename, count = DATASETS[dataset]
    with open(os.path.join(_DATA_DIR, filename), encoding="utf-8") as f:
        rows = [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip() and not line.startswith("#")]
    if len(rows) != count:
        raise RuntimeError(f"{filename} holds {len(rows)} classes, expected {count}")
    return tuple(rows)


def imagenet_labels(dataset=IMAGENET1K):
    """Short class names (the first lemma) of an ImageNet head, e.g. ``'tench'``."""
    return [lemmas.split(",")[0].strip() for _, lemmas in imagenet_classes(dataset)]


def imagenet_dataset_of(tag, num_classes):
    """The ImageNet label set a pretrained head was trained on, from its tag, or None.

    ``tag`` is a preset tag (``"imagenet21k+imagenet2012"``, ``"augreg_in21k_ft_in1k"``) or a timm
    pretrained tag (``"augreg2_in21k_ft_in1k"``, ``"fb_in1k"``): the dataset it ends with names the
    head's classes when their number is that dataset's (1000 for ImageNet-1k / ILSVRC-2012, 21843
    for the ImageNet-21k head of the original checkpoints).

    Example:
    >>> imagenet_dataset_of("augreg_in21k_ft_in1k", 1000), imagenet_dataset_of("imagenet21k", 21843)
    ('imagenet1k', 'imagenet21k')
    >>> imagenet_dataset_of("augreg_in21k_ft_in1k", 10) is None, imagenet_dataset_of(None, 1000) is None
    (True, True)
    """
    endings = {IMAGENET1K: ("in1k", "imagenet2012", "imagenet1k"), IMAGENET21K: ("in21k", "imagenet21k")}
    for dataset, suffixes in endings.items():
        if tag and str(tag).lower().endswith(suffixes) and num_classes == DATASETS[dataset][1]:
            return dataset
    return None


def read_label_file(path):
    """Class names from a text file, one per line (blank lines skipped).

    Lines of the form ``id<TAB>name`` keep the name only.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Label file not found: {path!r}")
    with open(path, encoding="utf-8") as f:
        return _parse_labels(f.read())


def _parse_labels(text):
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line:
            names.append(line.split("\t", 1)[-1].strip())
    return names


def default_labels(num_classes):
    """``['class_0', 'class_1', ...]``."""
    return [f"class_{i}" for i in range(num_classes)]


def register_label_reader(function):
    """Register ``function(model_path, loaded) -> list[str] | None`` as a source of stored names.

    ``loaded`` is the loaded model object (a ``keras.Model``, a loaded
    SavedModel, or None for a ``.tflite``). Readers registered later are asked
    first. Returns ``function``, so it works as a decorator.
    """
    _LABEL_READERS.insert(0, function)
    return function


def stored_labels(model_path=None, loaded=None):
    """Class names stored with a model, or None: asks every registered reader."""
    for reader in _LABEL_READERS:
        names = reader(model_path, loaded)
        if names:
            return list(names)
    return None


def class_names(num_classes, labels=None, model_path=None, loaded=None):
    """The names of a head's ``num_classes`` outputs (see the module docstring for the order).

    Args:
        num_classes: size of the model's output.
        labels: None, a list of names, or the path to a label file.
        model_path: the model file or directory, for the stored-name readers.
        loaded: the loaded model, for the stored-name readers.

    Returns:
        A list of ``num_classes`` strings.
    """
    source = "labels"
    if labels is None:
        names = stored_labels(model_path, loaded)
        source = f"the labels stored with {model_path!r}"
        if names is None:
            for dataset, (_, count) in DATASETS.items():
                if num_classes == count:
                    return imagenet_labels(dataset)
            return default_labels(num_classes)
    elif isinstance(labels, (str, os.PathLike)):
        source = f"label file {os.fspath(labels)!r}"
        names = read_label_file(labels)
    else:
        names = [str(name) for name in labels]
    if len(names) != num_classes:
        raise ValueError(
            f"The model has {num_classes} classes but {source} holds {len(names)} names. "
            f"Received: {len(names)} names, num_classes={num_classes}"
        )
    return names


def class_ids(num_classes):
    """WordNet ids for an ImageNet-sized head, else the class indices as strings."""
    for dataset, (_, count) in DATASETS.items():
        if num_classes == count:
            return [wnid for wnid, _ in imagenet_classes(dataset)]
    return [str(i) for i in range(num_classes)]


@register_label_reader
def _label_files(model_path, loaded):
    """Label files next to the model (``<model>.labels.txt``, ``labels.txt``) or in SavedModel assets."""
    if model_path is None:
        return None
    model_path = os.fspath(model_path)
    candidates = [os.path.splitext(model_path)[0] + ".labels.txt"]
    if os.path.isdir(model_path):  # SavedModel
        candidates += [os.path.join(model_path, "assets", name) for name in LABEL_FILE_NAMES]
        candidates += [os.path.join(model_path, name) for name in LABEL_FILE_NAMES]
    else:
        candidates += [os.path.join(os.path.dirname(model_path), name) for name in LABEL_FILE_NAMES]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return read_label_file(candidate)
    return None


@register_label_reader
def tflite_associated_labels(model_path, loaded=None):
    """A label file zipped onto a ``.tflite`` (how TFLite metadata stores associated files), or None."""
    if model_path is None or not str(model_path).endswith(".tflite") or not zipfile.is_zipfile(model_path):
        return None
    with zipfile.ZipFile(model_path) as archive:
        names = [n for n in archive.namelist() if n.endswith(".txt")]
        preferred = [n for n in names if os.path.basename(n) in LABEL_FILE_NAMES or "label" in n.lower()]
        for name in preferred or names:
            return _parse_labels(archive.read(name).decode("utf-8"))
    return None


@register_label_reader
def _keras_attribute(model_path, loaded):
    """``model.class_names`` on a loaded Keras model, if something set it."""
    names = getattr(loaded, "class_names", None)
    return list(names) if names else None


@register_label_reader
def _keras_archive_metadata(model_path, loaded):
    """``class_names`` in the metadata of a ``.keras`` file saved by :func:`keras_vit.saving.save_model`."""
    if model_path is None or not str(model_path).endswith(".keras") or not zipfile.is_zipfile(model_path):
        return None
    names = saving.read_metadata(model_path).get("class_names")
    return [str(name) for name in names] if names else None
