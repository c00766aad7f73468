"""Class names for predict and export: label files, the lookup that finds the names stored with a model,
and the ImageNet lists (:mod:`keras_vit.weights.imagenet`) for an ImageNet-sized head.

Where names come from, first match wins (:func:`class_names`):

1. names given explicitly (a list, or a text file with one name per line);
2. names stored with the model: each reader registered with
   :func:`register_label_reader` is asked in turn (other formats plug theirs
   in here); built in are ``class_names`` in the ``keras_vit.json`` entry of a
   ``.keras`` saved by ``keras-vit train``, a ``model.class_names`` attribute,
   label files next to the model (``<model>.labels.txt``, ``labels.txt``) or in
   a SavedModel's ``assets/``, label files zipped onto a ``.tflite`` (as
   TFLite metadata stores associated files), and ``labels`` in an ``.onnx`` file's metadata;
3. the ImageNet-1k or -21k list when the head has 1000 or 21843 classes;
4. ``class_0``, ``class_1``, ...
"""

import os
import zipfile

from keras_vit import saving
from keras_vit.weights import imagenet

# file names a model's class names may be stored under, next to it or in its assets
LABEL_FILE_NAMES = ("labels.txt", "class_names.txt", "classes.txt")

_LABEL_READERS = []


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

    Raises:
        ValueError: another number of names than ``num_classes``; a given name that is empty or holds a line break.
    """
    source = "labels"
    if labels is None:
        names = stored_labels(model_path, loaded)
        source = f"the labels stored with {model_path!r}" if model_path is not None else (
            f"model {getattr(loaded, 'name', type(loaded).__name__)!r} (its class_names)")
        if names is None:
            for dataset, (_, count) in imagenet.DATASETS.items():
                if num_classes == count:
                    return imagenet.imagenet_labels(dataset)
            return default_labels(num_classes)
    elif isinstance(labels, (str, os.PathLike)):
        source = f"label file {os.fspath(labels)!r}"
        names = read_label_file(labels)
    else:
        names = [str(name) for name in labels]
        bad = next((i for i, name in enumerate(names) if not name.strip() or "\n" in name or "\r" in name), None)
        if bad is not None:  # a label file holds one name a line: it would shift every name after it
            raise ValueError(f"Class names are stored one a line (label files, TFLite and ONNX metadata): name {bad} "
                             f"is {names[bad]!r}, empty or with a line break. Received: labels={names!r}")
    if len(names) != num_classes:
        raise ValueError(
            f"The model has {num_classes} classes but {source} holds {len(names)} names. "
            f"Received: {len(names)} names, num_classes={num_classes}"
        )
    return names


def class_ids(num_classes):
    """WordNet ids for an ImageNet-sized head, else the class indices as strings."""
    for dataset, (_, count) in imagenet.DATASETS.items():
        if num_classes == count:
            return [wnid for wnid, _ in imagenet.imagenet_classes(dataset)]
    return [str(i) for i in range(num_classes)]


@register_label_reader
def _label_files(model_path, loaded):
    """Label files next to the model (``<model>.labels.txt``, ``labels.txt``) or in SavedModel assets."""
    if model_path is None:
        return None
    model_path = os.fspath(model_path)
    # <model>.labels.txt: a .tflite's (a .keras holds its names; another file of the stem is no label file of it)
    candidates = [os.path.splitext(model_path)[0] + ".labels.txt"] if model_path.endswith(".tflite") else []
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


@register_label_reader
def _onnx_metadata(model_path, loaded):
    """``labels`` in the metadata of an ``.onnx`` file (keras_vit's export writes them), read from its onnxruntime session."""
    if loaded is None or not hasattr(loaded, "get_modelmeta"):
        return None
    names = loaded.get_modelmeta().custom_metadata_map.get("labels")
    return _parse_labels(names) if names else None
