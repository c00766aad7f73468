"""Downloading a preset's file into the Keras cache, verified before it is kept.

Files are fetched with ``keras.utils.get_file`` (its progress bar on a terminal, one line otherwise) into
``$KERAS_HOME/models/keras_vit/<the file's path under the bucket>`` (``KERAS_HOME``
defaults to ``~/.keras``), so a second build reads the cache and never touches the
network. A download goes to a temporary folder beside the cache first; it is moved
into place only once every array passed its zip CRC check (and the SHA-256 where the
preset records one), so the cache never holds a truncated or corrupt file.
"""

import hashlib
import logging
import os
import shutil
import tempfile
import zipfile

import keras
import numpy as np

from keras_vit.errors import CheckpointError, DownloadError
from keras_vit.hardware.terminal import on_a_terminal
from keras_vit.weights import presets

logger = logging.getLogger("keras_vit")

CACHE_SUBDIR = os.path.join("models", "keras_vit")


def cache_root():
    """``$KERAS_HOME/models/keras_vit`` (``~/.keras/models/keras_vit`` by default), read at each call."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, CACHE_SUBDIR)


def cache_path(preset):
    """Where ``preset``'s file lives in the cache: its path under the bucket, below :func:`cache_root`.

    Example:
    >>> import os
    >>> path = cache_path(presets.find("B/16", "imagenet21k+imagenet2012", 384))
    >>> path.endswith(os.path.join("models", "keras_vit", "imagenet21k+imagenet2012", "ViT-B_16.npz"))
    True
    """
    return os.path.join(cache_root(), *preset.file.split("/"))


def is_cached(preset):
    """Whether ``preset``'s file is in the cache."""
    return os.path.isfile(cache_path(preset))


def fetch(preset):
    """The local path of ``preset``'s file: from the cache, else downloaded, verified and cached.

    Raises:
        DownloadError: the file is not cached and cannot be downloaded (offline, a
            missing file on a mirror); the message names the URL, the cache path and
            how to put the file there by hand.
        CheckpointError: the download (or a cached file) is truncated or corrupt; it is
            removed from the cache, and the message names the URL and the cache path.

    Example:
    >>> path = fetch(presets.find("Ti/16", "augreg_in21k_ft_in1k", 224))  # doctest: +SKIP
    Downloading data from https://storage.googleapis.com/vit_models/augreg/Ti_16-...-res_224.npz
    """
    url, path = presets.url_of(preset), cache_path(preset)
    if os.path.isfile(path):
        try:
            with zipfile.ZipFile(path):  # the central directory: absent from a truncated file
                pass
        except (zipfile.BadZipFile, OSError) as error:
            _remove(path)
            raise CheckpointError(
                f"The cached file {path!r} (from {url}) is not a valid .npz ({error}); it was removed. "
                "Build the model again to download it anew."
            ) from error
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".download-", dir=cache_root())
    try:
        name = os.path.basename(path)
        try:
            if on_a_terminal():
                downloaded = keras.utils.get_file(fname=name, origin=url, cache_dir=staging, cache_subdir="")
            else:  # Keras' bar writes backspaces, carriage returns and colour codes wherever stdout goes
                print(f"Downloading {url} into {path}", flush=True)
                interactive = keras.config.is_interactive_logging_enabled()
                keras.config.disable_interactive_logging()  # this thread's Keras messages go to absl logging
                try:
                    downloaded = keras.utils.get_file(fname=name, origin=url, cache_dir=staging, cache_subdir="")
                finally:
                    if interactive:
                        keras.config.enable_interactive_logging()
        except Exception as error:  # get_file re-raises HTTP and URL errors as a bare Exception
            raise DownloadError(
                f"Cannot download the {preset.tag!r} weights of {preset.variant} from {url}: {error}. "
                f"Nothing is cached at {path!r}. Without network access, download the file elsewhere "
                f"and copy it to {path!r} (KERAS_HOME sets the cache folder), or set "
                f"{presets.URL_ENV} to a mirror that holds {preset.file!r}."
            ) from error
        _verify(downloaded, preset, url, path)
        os.replace(downloaded, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("Cached %s at %s", url, path)
    return path


def _verify(downloaded, preset, url, path):
    """Raise ``CheckpointError`` unless every array of the download reads back intact."""
    try:
        if preset.sha256 is not None:
            digest = _sha256(downloaded)
            if digest != preset.sha256:
                raise ValueError(f"SHA-256 {digest} != the published {preset.sha256}")
        with zipfile.ZipFile(downloaded) as archive:
            bad = archive.testzip()  # reads every member, checking its CRC-32
            if bad is not None:
                raise ValueError(f"bad CRC-32 in {bad!r}")
            if not archive.namelist():
                raise ValueError("no arrays")
            for member in archive.namelist():
                with archive.open(member) as stream:
                    np.lib.format.read_magic(stream)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise CheckpointError(
            f"The download from {url} is truncated or corrupt ({error}); nothing was kept at {path!r}. "
            "Try again; if it persists, the file at that URL is damaged."
        ) from error


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
