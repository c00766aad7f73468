"""Saving and loading keras_vit models: ``.keras`` files with their class names inside, written atomically.

:func:`save_model` adds a JSON entry ``keras_vit.json`` (class names, ...) to the
``.keras`` zip archive, which Keras ignores when loading; :func:`read_metadata`
reads it back. :func:`load_model` is the one loader of the package (the
predictors, the exports and the CLI use it): safe mode, every keras_vit class
registered, and an error that names the file.

Example:
>>> import tempfile
>>> import keras_vit
>>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
...                       num_classes=3)
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.keras")
>>> save_model(model, path, metadata={"class_names": ["ant", "bee", "cat"]})
>>> read_metadata(path)
{'class_names': ['ant', 'bee', 'cat']}
>>> load_model(path).count_params() == model.count_params()
True
"""

import json
import os
import re
import shutil
import uuid
import zipfile

import keras

from keras_vit.architecture import legacy

METADATA_ENTRY = "keras_vit.json"


_TMP = re.compile(r"\.(?P<base>.+)\.tmp-(?P<pid>\d+)-[0-9a-f]{8}(?P<suffix>.*)")


def temporary_path(path, suffix=""):
    """A hidden temporary path beside ``path``: ``.<name>.tmp-<pid>-<random><suffix>``.

    The writer's process id is in the name, so :func:`remove_stale_temporaries`
    can tell what a killed writer left from what a running one is writing.
    Stale temporaries of ``path`` are removed first.

    Example:
    >>> name = os.path.basename(temporary_path("/tmp/vit.tflite"))
    >>> name.startswith(f".vit.tflite.tmp-{os.getpid()}-")
    True
    """
    directory, base = os.path.split(os.path.abspath(os.fspath(path)))
    os.makedirs(directory, exist_ok=True)
    remove_stale_temporaries(path)
    return os.path.join(directory, f".{base}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{suffix}")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. PermissionError: it exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(path, same_target=None):
    """Remove the temporaries of ``path`` (see :func:`temporary_path`) whose writer has died.

    A writer killed between creating its temporary and renaming it into
    place (SIGKILL, power loss) cannot clean up; the next write of the same
    path does. ``same_target(name)`` widens "of ``path``" to every sibling
    name it accepts (e.g. every SavedModel version folder). Returns the paths
    removed.
    """
    directory, base = os.path.split(os.path.abspath(os.fspath(path)))
    same_target = same_target or base.__eq__
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        match = _TMP.fullmatch(name)
        if not match or not same_target(match["base"]) or _alive(int(match["pid"])):
            continue
        stale = os.path.join(directory, name)
        if os.path.isdir(stale) and not os.path.islink(stale):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            try:
                os.remove(stale)
            except FileNotFoundError:
                pass  # another writer cleaned it first
        removed.append(stale)
    return removed


def atomic_write(path, write):
    """Write through ``write(tmp_path)`` then ``os.replace`` onto ``path``.

    The temporary is hidden beside ``path`` (:func:`temporary_path`); one left
    by a killed writer is removed by the next write of ``path``.
    """
    suffix = "".join(os.path.basename(path).partition(".")[1:])  # keep ".keras", ".weights.h5"
    tmp = temporary_path(path, suffix)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def check_output(path, *, overwrite=False, what="output", extension=None):
    """Refuse, before any work, to write a file at ``path`` where a folder is, or over a file unless ``overwrite``, or
    (with ``extension``, e.g. ``".keras"``) to a path that does not end in it.

    The one rule of every file a keras_vit command or export writes (``.keras``, ``.tflite``, ``.onnx``).

    Raises:
        IsADirectoryError: ``path`` is a folder (whatever ``overwrite`` says).
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        ValueError: ``path`` does not end in ``extension``.

    Example:
    >>> import tempfile
    >>> check_output(tempfile.mkdtemp(), what="--output")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    IsADirectoryError: --output '...' is a folder: give the path of the file to write
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{what} {path!r} is a folder: give the path of the file to write")
    if extension is not None and not path.endswith(extension):
        raise ValueError(f"{what} must name a {extension} file. Received: {path!r}")
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(
            f"{what} {path!r} exists: pass overwrite=True (keras-vit: --overwrite) to replace it, or another path"
        )
    return path


def save_model(model, path, metadata=None, *, include_optimizer=True):
    """Save ``model`` as ``.keras`` atomically, with ``metadata`` (e.g. ``{"class_names": [...]}``) inside.

    A model's ``class_names`` attribute (set by :func:`keras_vit.from_pretrained` and
    :func:`load_model`) goes into the metadata unless ``metadata`` names classes itself.
    ``include_optimizer=False`` writes the model without its compile settings and
    optimizer state (a copy of it, uncompiled: Keras 3's ``.keras`` format has no such
    switch), a file of the weights' size that predicts and exports the same.

    Raises:
        ValueError: ``path`` does not end in ``.keras`` (nothing is written).
        IsADirectoryError: ``path`` is a folder.
    """
    # Keras would write HDF5 for .h5 (the metadata zip appended: a file nothing loads), or refuse a temporary's name
    check_output(path, overwrite=True, what="save_model's path", extension=".keras")
    names = getattr(model, "class_names", None)
    if names and "class_names" not in (metadata or {}):
        metadata = {**(metadata or {}), "class_names": [str(name) for name in names]}
    if not include_optimizer and getattr(model, "optimizer", None) is not None:
        model = _uncompiled_copy(model)

    def write(tmp):
        model.save(tmp)
        if metadata is not None:
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(METADATA_ENTRY, json.dumps(metadata, indent=2, sort_keys=True))

    atomic_write(os.fspath(path), write)


def _uncompiled_copy(model):
    """The same model rebuilt from its config (as loading a ``.keras`` file does), with its weights, not compiled.

    The weights go layer by layer through each layer's ``save_own_variables`` and ``load_own_variables``, as
    they go through a ``.keras`` file: a layer with LoRA factors hands over its merged kernel, a quantized one
    its integer kernel and scale (``set_weights`` would count the factors as weights the copy lacks).
    """
    copy = type(model).from_config(model.get_config())
    layers = list(model._flatten_layers()), list(copy._flatten_layers())
    if [layer.name for layer in layers[0]] != [layer.name for layer in layers[1]]:
        raise ValueError(f"Model {model.name!r} does not rebuild from its config: its layers differ from the copy's")
    for source, target in zip(*layers):
        store = {}
        source.save_own_variables(store)
        target.load_own_variables(store)
    return copy


def read_metadata(path):
    """The ``keras_vit.json`` metadata of a ``.keras`` file written by :func:`save_model` ({} if none).

    Raises:
        ValueError: the file is not a zip archive, or its ``keras_vit.json``
            entry is not a JSON object (the message names the file and the entry).
    """
    path = os.fspath(path)
    try:
        with zipfile.ZipFile(path) as archive:
            if METADATA_ENTRY not in archive.namelist():
                return {}
            raw = archive.read(METADATA_ENTRY)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as error:
        raise ValueError(f"Corrupt model file {path!r}: not a readable .keras zip archive ({error})") from None
    try:
        metadata = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"Corrupt entry {METADATA_ENTRY!r} in {path!r}: not valid JSON ({error})") from None
    if not isinstance(metadata, dict):
        raise ValueError(
            f"Corrupt entry {METADATA_ENTRY!r} in {path!r}: expected a JSON object. "
            f"Received: {type(metadata).__name__}"
        )
    return metadata


def load_model(model, compile=False, *, custom_objects=None, safe_mode=True):
    """A ``keras.Model`` from a ``.keras`` path (safe mode), or ``model`` itself if it is one.

    ``custom_objects`` and ``safe_mode`` are ``keras.saving.load_model``'s: a larger model holding a keras_vit
    backbone and layers of your own loads with ``custom_objects={"MyLayer": MyLayer}`` (``safe_mode=False`` for a
    ``Lambda`` layer you trust).

    A keras_vit model comes back as a :class:`~keras_vit.architecture.model.VisionTransformer` with its
    ``vit_config``, also from a file written before the configuration existed (a plain functional model,
    :func:`keras_vit.architecture.legacy.upgrade`); any other Keras model as it was saved.

    Class names saved by :func:`save_model` are read with :func:`read_metadata` and set as
    ``model.class_names``, so that predicting with or exporting the loaded model names its classes.

    Raises:
        FileNotFoundError: no file at ``model``.
        IsADirectoryError: ``model`` is a folder (the message says what reads a SavedModel or a checkpoint folder).
        ValueError: the file is not a readable ``.keras`` archive, e.g. corrupt
            or truncated, or a file of another kind (the message names it, and for a known kind what reads it).
    """
    if isinstance(model, keras.Model):
        return legacy.upgrade(model)
    path = os.fspath(model)
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"{path!r} is a folder, not a .keras model file. A SavedModel folder is read by keras_vit.predict "
            "(keras-vit predict); a checkpoint folder (transformers, timm, keras-hub) by keras_vit.from_pretrained "
            "(keras-vit convert FOLDER --output model.keras)"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Model file not found: {path!r}")
    if not zipfile.is_zipfile(path):  # keras would say "File not found" of a file that is there
        raise ValueError(_not_a_keras_archive(path))
    try:
        loaded = keras.saving.load_model(path, custom_objects=custom_objects, compile=compile, safe_mode=safe_mode)
    except Exception as error:  # keras raises many types for a corrupt file
        raise ValueError(f"Corrupt or unreadable model file {path!r} ({type(error).__name__}: {error}); a model "
                         "holding layers of your own loads with custom_objects={'MyLayer': MyLayer}") from error
    loaded = legacy.upgrade(loaded)  # a file written before the configuration: the model gets its vit_config
    try:
        names = read_metadata(path).get("class_names")
    except ValueError:  # a damaged keras_vit.json: the model loads; predict reports the entry
        names = None
    if names:
        loaded.class_names = [str(name) for name in names]
    return loaded


# files that are no .keras archive but that keras_vit reads elsewhere: what reads them
_OTHER_FILES = {
    ".safetensors": "a safetensors checkpoint: keras_vit.from_pretrained or load_checkpoint read it "
                    "(keras-vit convert FILE --output model.keras)",
    ".npz": "an original ViT checkpoint: keras_vit.from_pretrained or load_checkpoint read it "
            "(keras-vit convert FILE --output model.keras)",
    ".h5": "an HDF5 file: Keras weights (.weights.h5) go into a built model with model.load_weights",
    ".tflite": "a TFLite model: keras_vit.predict runs it (keras-vit predict)",
    ".onnx": "an ONNX model: keras_vit.predict runs it (keras-vit predict)",
}


def _not_a_keras_archive(path):
    """The message for a file that is no zip archive: of another kind (by its suffix) or a damaged ``.keras``.

    Example:
    >>> _not_a_keras_archive("vit.safetensors")  # doctest: +ELLIPSIS
    "Not a .keras model file: 'vit.safetensors' is a safetensors checkpoint: keras_vit.from_pretrained ..."
    """
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _OTHER_FILES:
        return f"Not a .keras model file: {path!r} is {_OTHER_FILES[suffix]}"
    if suffix != ".keras":
        return f"Not a .keras model file: {path!r} is no zip archive, which every .keras file is"
    return f"Corrupt model file {path!r}: not a .keras zip archive (truncated or overwritten?)"
