"""A file in the Keras cache: downloaded through the one download path, verified whole, removed when damaged.

Files are fetched by :func:`keras_vit.fetch.transfer.download` (a timeout on every read, not
``keras.utils.get_file``, which has none: see that module) into ``$KERAS_HOME/models/keras_vit/...``
(``KERAS_HOME`` defaults to ``~/.keras``, as for every Keras cache), so a second build reads the cache and never
touches the network. A download goes to a staging folder in the cache first; it is moved into place only once the
whole file verified: the SHA-256 where one is published, and the caller's own check (for a preset, its
``.npz`` arrays and architecture: :mod:`keras_vit.weights.sources`). A file already in the cache (put there by
hand, or damaged since) is verified the same way before its first use; a damaged one is removed and downloaded
again, once. The verification is recorded beside the file (``<file>.verified``: its size, modification time and
SHA-256), so later builds do not read it again.
"""

import hashlib
import json
import logging
import os
import shutil

from keras_vit.errors import CheckpointError, DownloadError
from keras_vit.fetch import transfer

logger = logging.getLogger("keras_vit")

CACHE_SUBDIR = os.path.join("models", "keras_vit")
VERIFIED_SUFFIX = ".verified"


def cache_root():
    """``$KERAS_HOME/models/keras_vit`` (``~/.keras/models/keras_vit`` by default), read at each call."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return os.path.join(home, CACHE_SUBDIR)


def fetch(url, path, check, *, sha256=None, what, elsewhere=""):
    """``path`` (under :func:`cache_root`): from the cache (verified once), else downloaded from ``url``, verified, kept.

    ``check(path)`` raises ``CheckpointError`` saying why a file is not the one expected; ``sha256``, where
    published, is compared first. ``what`` names the file and ``elsewhere`` ends the sentence of how to put it
    in the cache without network access, in a ``DownloadError``.

    Raises:
        DownloadError: the file cannot be downloaded (offline, a missing file on a mirror, a server
            that stalls for ``KERAS_VIT_DOWNLOAD_TIMEOUT`` seconds); the message names the URL, the
            cache path and how to put the file there by hand. Nothing is left in the cache.
        CheckpointError: the download is truncated, corrupt or another file (the second try, when the
            cached copy was damaged); the message names the URL and the cache path.
    """
    transfer.remove_stale(cache_root())  # what a killed download left
    damaged = None
    if os.path.isfile(path):
        if _recorded(path):
            return path
        try:
            _record(path, _verify(path, check, sha256))
            return path
        except CheckpointError as error:
            damaged = str(error)
            logger.warning("The cached %s (from %s) is damaged: %s. Removed; downloading it again.", path, url, error)
            transfer.remove(path)
    transfer.remove(path + VERIFIED_SUFFIX)
    again = f" (the cached copy was damaged and removed: {damaged})" if damaged else ""
    staging = transfer.staging_folder(cache_root())
    try:
        staged = os.path.join(staging, os.path.basename(path))
        try:
            transfer.download(url, staged, shown_as=path)
        except DownloadError as error:
            raise DownloadError(
                f"Cannot download {what}: {error} Nothing is cached at {path!r}{again}. Without network access, "
                f"download the file elsewhere and copy it to {path!r} (KERAS_HOME sets the cache folder){elsewhere}."
            ) from error
        try:
            digest = _verify(staged, check, sha256)
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


def _verify(path, check, sha256):
    """The SHA-256 of ``path`` once the whole file verified; else ``CheckpointError`` saying why."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    digest = digest.hexdigest()
    if sha256 is not None and digest != sha256:
        raise CheckpointError(f"SHA-256 {digest} != the published {sha256}")
    check(path)
    return digest


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
