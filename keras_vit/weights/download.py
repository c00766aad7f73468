"""A preset's file in the Keras cache: downloaded through the one download path, verified whole, removed when damaged.

Files are fetched by :func:`keras_vit.weights.transfer.download` (a timeout on every read, not
``keras.utils.get_file``, which has none: see that module) into
``$KERAS_HOME/models/keras_vit/<the file's path under the bucket>`` (``KERAS_HOME`` defaults to
``~/.keras``, as for every Keras cache), so a second build reads the cache and never touches the network.
A download goes to a staging folder in the cache first; it is moved into place only once the whole
file verified: the SHA-256 where the preset records one, the zip CRC-32 and the ``.npy`` header of every
array (a short array is refused), and shapes that fit the preset's architecture. A file already in the
cache (put there by hand, or damaged since) is verified the same way before its first use; a damaged
one is removed and downloaded again, once. The verification is recorded beside the file
(``<file>.verified``: its size, modification time and SHA-256), so later builds do not read it again.
"""

import hashlib
import json
import logging
import os
import shutil

from keras_vit.architecture import variants
from keras_vit.errors import CheckpointError, DownloadError
from keras_vit.weights import formats, npz, presets, transfer
from keras_vit.weights.architecture import infer

logger = logging.getLogger("keras_vit")

CACHE_SUBDIR = os.path.join("models", "keras_vit")
VERIFIED_SUFFIX = ".verified"
# the ViTConfig fields a preset's variant fixes that a file's shapes tell (the head and resolution may differ)
_ARCHITECTURE_FIELDS = ("patch_size", "hidden_size", "num_layers", "mlp_dim", "num_heads", "block_units", "width")


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
    """The local path of ``preset``'s file: from the cache (verified once), else downloaded, verified and cached.

    Raises:
        DownloadError: the file cannot be downloaded (offline, a missing file on a mirror, a server
            that stalls for ``KERAS_VIT_DOWNLOAD_TIMEOUT`` seconds); the message names the URL, the
            cache path and how to put the file there by hand. Nothing is left in the cache.
        CheckpointError: the download is truncated, corrupt or of another architecture (the second
            try, when the cached copy was damaged); the message names the URL and the cache path.

    Example:
    >>> path = fetch(presets.find("Ti/16", "augreg_in21k_ft_in1k", 224))  # doctest: +SKIP
    Downloading https://storage.googleapis.com/vit_models/augreg/Ti_16-...-res_224.npz into ...
    """
    url, path = presets.url_of(preset), cache_path(preset)
    transfer.remove_stale(cache_root())  # what a killed download left
    damaged = None
    if os.path.isfile(path):
        if _recorded(path):
            return path
        try:
            _record(path, _verify(path, preset))
            return path
        except CheckpointError as error:
            damaged = str(error)
            logger.warning("The cached %s (from %s) is damaged: %s. Removed; downloading it again.", path, url, error)
            transfer.remove(path)
    transfer.remove(path + VERIFIED_SUFFIX)
    return _download(preset, url, path, damaged)


def _download(preset, url, path, damaged):
    again = f" (the cached copy was damaged and removed: {damaged})" if damaged else ""
    staging = transfer.staging_folder(cache_root())
    try:
        staged = os.path.join(staging, os.path.basename(path))
        try:
            transfer.download(url, staged, shown_as=path)
        except DownloadError as error:
            raise DownloadError(
                f"Cannot download the {preset.tag!r} weights of {preset.variant}: {error} Nothing is cached at "
                f"{path!r}{again}. Without network access, download the file elsewhere and copy it to {path!r} "
                f"(KERAS_HOME sets the cache folder), or set {presets.URL_ENV} to a mirror that holds {preset.file!r}."
            ) from error
        try:
            digest = _verify(staged, preset)
        except CheckpointError as error:
            raise CheckpointError(
                f"The download from {url} is truncated, corrupt or another file ({error}); nothing was kept at "
                f"{path!r}{again}. Try again; if it persists, the file at that URL is damaged."
            ) from error
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.replace(staged, path)
        _record(path, digest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    logger.info("Cached %s at %s", url, path)
    return path


def _verify(path, preset):
    """The SHA-256 of ``path`` once the whole file verified as ``preset``'s; else ``CheckpointError`` saying why."""
    digest = _sha256(path)
    if preset.sha256 is not None and digest != preset.sha256:
        raise CheckpointError(f"SHA-256 {digest} != the published {preset.sha256}")
    npz.verify_npz(path)
    found = infer(formats.describe(path), source=path)
    hybrid = "+" in preset.variant
    expected = (variants.decode_hybrid_variant if hybrid else variants.decode_variant)(preset.variant)
    wrong = [
        f"{field} {_plain(found.get(field))} (expected {_plain(expected[field])})"
        for field in _ARCHITECTURE_FIELDS
        if field in expected and _plain(found.get(field)) != _plain(expected[field])
    ]
    if wrong or (not hybrid and "block_units" in found):
        raise CheckpointError(
            f"its shapes are not those of {preset.variant}: " + (", ".join(wrong) or "a ResNet stem")
        )
    return digest


def _plain(value):
    return tuple(value) if isinstance(value, list) else value


def _record(path, digest):
    """Write ``<path>.verified`` (size, modification time, SHA-256) atomically."""
    stat = os.stat(path)
    record = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
    partial = f"{path}{VERIFIED_SUFFIX}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(partial, path + VERIFIED_SUFFIX)


def _recorded(path):
    """Whether ``<path>.verified`` records this very file (same size and modification time)."""
    try:
        with open(path + VERIFIED_SUFFIX, encoding="utf-8") as f:
            record = json.load(f)
        stat = os.stat(path)
        return record.get("size") == stat.st_size and record.get("mtime_ns") == stat.st_mtime_ns
    except (OSError, ValueError, AttributeError):
        return False


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
