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
import tempfile
import zipfile

METADATA_ENTRY = "keras_vit.json"


def atomic_write(path, write):
    """Write through ``write(tmp_path)`` then ``os.replace`` onto ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    suffix = "".join(os.path.basename(path).partition(".")[1:])  # keep ".keras", ".weights.h5"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_model(model, path, metadata=None):
    """Save ``model`` as ``.keras`` atomically, with ``metadata`` (e.g. ``{"class_names": [...]}``) inside."""

    def write(tmp):
        model.save(tmp)
        if metadata is not None:
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(METADATA_ENTRY, json.dumps(metadata, indent=2, sort_keys=True))

    atomic_write(os.fspath(path), write)


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


def load_model(model, compile=False):
    """A ``keras.Model`` from a ``.keras`` path (safe mode), or ``model`` itself if it is one.

    Class names saved by :func:`save_model` are read with :func:`read_metadata`.

    Raises:
        FileNotFoundError: no file at ``model``.
        ValueError: the file is not a readable ``.keras`` archive, e.g. corrupt
            or truncated (the message names it).
    """
    import keras

    if isinstance(model, keras.Model):
        return model
    path = os.fspath(model)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Model file not found: {path!r}")
    import keras_vit.registry  # noqa: F401  (registers the layers for loading)

    if not zipfile.is_zipfile(path):  # keras would say "File not found" of a file that is there
        raise ValueError(f"Corrupt model file {path!r}: not a .keras zip archive (truncated or overwritten?)")
    try:
        return keras.saving.load_model(path, compile=compile, safe_mode=True)
    except Exception as error:  # keras raises many types for a corrupt file
        raise ValueError(f"Corrupt or unreadable model file {path!r} ({type(error).__name__}: {error})") from error
