"""The one download path: a URL streamed into a staging folder of the cache, with timeouts, never half-kept.

Why not ``keras.utils.get_file``: it calls ``urllib.request.urlretrieve(origin, download_target, ...)``
(keras-team/keras ``keras/src/utils/file_utils.py``, Keras 3.15), which takes no timeout, so a mirror that
stalls after its headers hangs the build forever; and it writes into the cache file itself, which a killed
process leaves behind. Wrapping it in ``socket.setdefaulttimeout`` would change every socket the process
opens afterwards, other threads' included, and still leave the partial file. So :func:`download` opens the
URL with ``urllib.request.urlopen(url, timeout=...)`` (the connection and every read: a download fails
after :func:`timeout` seconds without a byte, not after a total time), checks the length the server
announced, and writes into ``<cache>/.download-<pid>-<random>/``; the caller verifies the file there and
moves it into place with ``os.replace``. Staging folders whose process is dead (or untouched for
:data:`STALE_AFTER_S`) are removed at the start of every download (:func:`remove_stale`).

``KERAS_VIT_DOWNLOAD_TIMEOUT`` (seconds, default :data:`DEFAULT_TIMEOUT_S`) sets the timeout.
"""

import os
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request

from keras_vit.errors import DownloadError
from keras_vit.hardware.terminal import on_a_terminal

TIMEOUT_ENV = "KERAS_VIT_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
STAGING_PREFIX = ".download-"
STALE_AFTER_S = 24 * 3600  # a staging folder of another host (shared cache) untouched for a day is dead too
OWNER_FILE = "owner"
_BLOCK = 1 << 20


def timeout():
    """Seconds without a byte before a download fails: ``$KERAS_VIT_DOWNLOAD_TIMEOUT``, else 60.

    Example:
    >>> import os
    >>> os.environ.pop(TIMEOUT_ENV, None) and None
    >>> timeout()
    60.0
    """
    value = os.environ.get(TIMEOUT_ENV)
    if value is None or not value.strip():
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{TIMEOUT_ENV} must be a positive number of seconds. Received: {TIMEOUT_ENV}={value!r}")
    return seconds


def staging_folder(root):
    """A new ``.download-<pid>-<random>`` folder in ``root``, with an ``owner`` file naming this host."""
    os.makedirs(root, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=root)
    with open(os.path.join(folder, OWNER_FILE), "w", encoding="utf-8") as f:
        f.write(f"{socket.gethostname()} {os.getpid()}\n")
    return folder


def remove_stale(root, now=None):
    """Remove the staging folders in ``root`` left by a killed download; return their paths.

    A folder is stale when the process its name records (``.download-<pid>...``) is dead on this
    host, or when nothing in it changed for :data:`STALE_AFTER_S` (a host sharing the cache that died).
    """
    now = time.time() if now is None else now
    try:
        names = [n for n in os.listdir(root) if n.startswith(STAGING_PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        folder = os.path.join(root, name)
        if os.path.isdir(folder) and (_owner_dead(folder, name) or now - _last_change(folder) > STALE_AFTER_S):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _owner_dead(folder, name):
    try:
        with open(os.path.join(folder, OWNER_FILE), encoding="utf-8") as f:
            host = f.read().split()[0]
        if host != socket.gethostname():
            return False  # another machine's download: only its age tells
    except (OSError, IndexError):
        pass  # no owner file (an older or hand-made folder): the pid in its name on this host
    pid = name[len(STAGING_PREFIX):].split("-", 1)[0]
    return pid.isdigit() and not _alive(int(pid))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, under another user
        return True
    except (OverflowError, OSError):  # not a pid this system can have
        return False
    return True


def _last_change(folder):
    times = [os.path.getmtime(folder)]
    for entry in os.scandir(folder):
        try:
            times.append(entry.stat().st_mtime)
        except OSError:
            pass
    return max(times)


def download(url, destination, shown_as=None):
    """Stream ``url`` into ``destination`` (in a staging folder), failing after :func:`timeout` seconds of silence.

    Prints a progress bar on a terminal, one line naming ``shown_as`` (where the file will be kept)
    otherwise. Raises ``DownloadError`` naming the URL (and the timeout, for a stall) when the server
    cannot be reached, answers an error, stalls, or closes the connection before the length it
    announced; ``destination`` is removed then.
    """
    seconds = timeout()
    try:
        with urllib.request.urlopen(url, timeout=seconds) as response:
            total = response.headers.get("Content-Length")
            total = int(total) if total and total.isdigit() else None
            progress = _progress(url, shown_as or destination, total)
            received = 0
            with open(destination, "wb") as out:
                for block in iter(lambda: response.read(_BLOCK), b""):
                    out.write(block)
                    received += len(block)
                    progress(received)
        if total is not None and received < total:
            raise DownloadError(
                f"The download from {url} stopped after {received:,} of {total:,} bytes: the server closed "
                "the connection."
            )
    except (DownloadError, OSError) as error:  # OSError: URLError, HTTPError, a refused connection, a timeout
        remove(destination)
        if isinstance(error, DownloadError):
            raise
        if isinstance(error, urllib.error.HTTPError):
            raise DownloadError(f"{url} answered HTTP {error.code} ({error.reason}).") from error
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError):
            raise DownloadError(
                f"No data from {url} for {seconds:g} s ({TIMEOUT_ENV}={seconds:g}): the server stalled. Try "
                f"again later or use a mirror; {TIMEOUT_ENV} sets the seconds to wait."
            ) from error
        raise DownloadError(f"Cannot download {url}: {reason}.") from error


def _progress(url, shown_as, total):
    """A callback of the bytes received: Keras' bar on a terminal; else one line now and nothing after."""
    if on_a_terminal():
        import keras  # deferred: its progress bar, on a terminal only

        print(f"Downloading data from {url}", flush=True)
        bar = keras.utils.Progbar(total, unit_name="B")
        return lambda received: bar.update(received)
    # Keras' bar writes backspaces, carriage returns and colour codes wherever stdout goes
    print(f"Downloading {url} into {shown_as}", flush=True)
    return lambda received: None


def remove(path):
    """Remove ``path`` if it is there."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
