"""One run per output folder: an exclusive lock file that the operating system releases when the process ends.

Two runs writing into the same ``--output`` would share one backup and
interleave ``log.csv``. :func:`output_lock` takes an exclusive
``fcntl.flock`` on ``<folder>/.lock`` (which holds the pid of the run
holding it) for the duration of a ``with`` block; a second run fails at once
with :class:`OutputInUse`, naming the folder and the other run's pid. A
killed run leaves no stale lock: the kernel drops a ``flock`` with the
process's last file descriptor, so the file left behind is free to take. A run that fails before it writes
anything leaves no folder it created (a lock file alone in a new ``--output`` was all that a typo left).

Example:
>>> import tempfile
>>> folder = tempfile.mkdtemp()
>>> with output_lock(folder):  # doctest: +ELLIPSIS
...     with output_lock(folder):  # a second run
...         pass
Traceback (most recent call last):
keras_vit.train.lock.OutputInUse: Output folder '...' is in use by another run (pid ...); wait for it to end or choose another --output
"""

import contextlib
import os

LOCK_NAME = ".lock"


class OutputInUse(RuntimeError):
    """Another run holds the output folder's lock."""


@contextlib.contextmanager
def output_lock(folder):
    """Hold an exclusive lock on ``folder`` (created if needed) while the block runs.

    Raises:
        OutputInUse: another process (or another block of this one) holds it.
    """
    import fcntl  # deferred: POSIX only (Linux, macOS); the module is still importable elsewhere

    folder = os.fspath(folder)
    created = _first_missing(folder)  # a run that fails before writing anything leaves no folder of its own behind
    fd, path = _take(folder, fcntl)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    except BaseException:
        if created:  # still under the lock: no other run can have taken the folder meanwhile
            _remove_untouched(folder, path, created)
        raise
    finally:
        os.close(fd)  # releases the lock


def _take(folder, fcntl, tries=5):
    """``(fd, path)`` of the folder's lock file, locked. A lock file that its holder removed while this run opened
    it (a failed run cleaning up the folder it made) is not the folder's any more: taken again from the start."""
    path = os.path.join(folder, LOCK_NAME)
    for _ in range(tries):
        os.makedirs(folder, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder was removed after makedirs
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise OutputInUse(
                f"Output folder {folder!r} is in use by another run (pid {other}); wait for it to end "
                "or choose another --output"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            return fd, path
        os.close(fd)
    raise OutputInUse(f"Output folder {folder!r} is being created and removed by other runs; try again or choose another --output")


def _same_file(fd, path):
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _remove_untouched(folder, path, created):
    """Remove the lock file and the folders this run made (``created`` and below) if nothing else was written."""
    try:
        if os.listdir(folder) != [LOCK_NAME]:
            return
        os.remove(path)
    except OSError:  # gone, or unreadable: the run's own error is the one to report
        return
    _remove_empty(folder, created)


def _first_missing(folder):
    """The outermost folder of ``folder``'s path that does not exist yet (None if ``folder`` exists)."""
    missing = None
    path = os.path.abspath(folder)
    while not os.path.isdir(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _remove_empty(folder, top):
    """Remove ``folder`` and its parents up to ``top`` while they are empty."""
    path = os.path.abspath(folder)
    while True:
        try:
            os.rmdir(path)
        except OSError:  # not empty: something else was written there meanwhile
            return
        if path == top:
            return
        path = os.path.dirname(path)
