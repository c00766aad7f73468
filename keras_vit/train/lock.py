"""One run per output folder: an exclusive lock file that the operating system releases when the process ends.

Two runs writing into the same ``--output`` would share one backup and
interleave ``log.csv``. :func:`output_lock` takes an exclusive
``fcntl.flock`` on ``<folder>/.lock`` (which holds the pid of the run
holding it) for the duration of a ``with`` block; a second run fails at once
with :class:`OutputInUse`, naming the folder and the other run's pid. A
killed run leaves no stale lock: the kernel drops a ``flock`` with the
process's last file descriptor, so the file left behind is free to take.

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
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise OutputInUse(
                f"Output folder {folder!r} is in use by another run (pid {other}); wait for it to end "
                "or choose another --output"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock
