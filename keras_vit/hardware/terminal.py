"""Where output goes: a terminal (progress bars) or a log, and the native libraries' stderr lines filtered.

TensorFlow and LiteRT write some lines from C++ straight to file descriptor 2, ignoring
``TF_CPP_MIN_LOG_LEVEL`` (TensorFlow's start-up notices, printed before absl's logging is
initialised; LiteRT's "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."). Around the few
calls that print them (importing TensorFlow, probing its devices, creating a LiteRT interpreter),
:func:`native_stderr_filtered` captures descriptor 2 and writes back every line except those below
the level ``TF_CPP_MIN_LOG_LEVEL`` asks for, so a real error still shows.

Example:
>>> import io
>>> on_a_terminal(io.StringIO())
False
"""

import contextlib
import os
import re
import sys
import tempfile
import threading

LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"

# absl / glog lines: "I0000 00:00:1795543993.046214    1776 port.cc:153] ..."
_GLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\s\]]+:\d+\] ")
# LiteRT's minimal logger and absl's pre-initialisation notice: "INFO: ...", "WARNING: ..."
_PLAIN = re.compile(r"^(VERBOSE|INFO|WARNING|ERROR): ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3, "VERBOSE": -1, "INFO": 0, "WARNING": 1, "ERROR": 2}
# on a machine without an NVIDIA driver, TensorFlow's CUDA build logs an ERROR for the cuInit it cannot make
_NO_DRIVER_ERRORS = ("failed call to cuInit",)
# ERROR lines that report no error: oneDNN, turned on for an AVX2 CPU, meets a uint8 op (image decoding) and says it
# runs Eigen's kernel for it instead, on every CPU without AVX-512
_NOT_ERRORS = ("oneDNN supports DT_UINT8 only on platforms with AVX-512",)
NVIDIA_DRIVER = "/proc/driver/nvidia/version"
# descriptor 2 is the process's: two threads' blocks interleaved would restore each other's capture
_FD2_LOCK = threading.RLock()


def on_a_terminal(stream=None):
    """Whether ``stream`` (default ``sys.stdout``) is a terminal: progress bars there, plain lines elsewhere."""
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def native_log_level():
    """``TF_CPP_MIN_LOG_LEVEL`` as an int (0: show everything, the default; 3: errors hidden too)."""
    try:
        return int(os.environ.get(LEVEL_ENV, "0"))
    except ValueError:
        return 0


def shown(line, level, driver=None):
    """Whether a native stderr ``line`` is shown under ``TF_CPP_MIN_LOG_LEVEL=level``.

    Lines of no known logger format (a Python traceback, a crash report) are always shown.
    ``failed call to cuInit`` counts as information where no NVIDIA driver is installed (``driver``
    False; None: look for :data:`NVIDIA_DRIVER`): nothing can be wrong with a GPU there is not.

    Example:
    >>> shown("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.", 2)
    False
    >>> shown("E0000 00:00:1795544261.397070    5203 cuda_platform.cc:52] failed call to cuInit: INTERNAL", 2, driver=False)
    False
    >>> shown("E0000 00:00:1795544261.397070    5203 cuda_platform.cc:52] failed call to cuInit: INTERNAL", 2, driver=True)
    True
    >>> shown("E0000 00:00:1795544261.397070    5203 op_kernel.cc:1]  OOM when allocating tensor", 2), shown("Traceback (most recent", 3)
    (True, True)
    >>> shown("E0000 00:00:1795707275.860168    9221 util.cc:131] oneDNN supports DT_UINT8 only on platforms with AVX-512. Falling back", 2)
    False
    """
    match = _GLOG.match(line) or _PLAIN.match(line)
    if match is None:
        return True
    severity = _SEVERITY[match.group(1)]
    if severity == 2 and any(text in line for text in _NOT_ERRORS):
        severity = 0
    if severity == 2 and any(text in line for text in _NO_DRIVER_ERRORS):
        if driver is None:
            driver = os.path.exists(NVIDIA_DRIVER)
        if not driver:
            severity = 0
    return severity >= level


@contextlib.contextmanager
def native_stderr_filtered(hide=None):
    """Capture file descriptor 2 for the block, then write back the lines :func:`shown` keeps.

    ``hide``: a regular expression of further lines to drop, e.g. the diagnostics a converter prints
    that its exception repeats. A no-op when ``TF_CPP_MIN_LOG_LEVEL`` is 0 or unset (every line is
    wanted) or descriptor 2 cannot be duplicated; descriptor 2 is restored, and what was kept written,
    before any exception leaves. Blocks of several threads run one after the other.
    """
    if native_log_level() <= 0:
        yield
        return
    with _FD2_LOCK:
        yield from _filtered(native_log_level(), re.compile(hide) if hide else None)


def _filtered(level, hide=None):
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        capture = tempfile.TemporaryFile()
    except OSError:
        yield
        return
    try:
        os.dup2(capture.fileno(), 2)
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        capture.seek(0)
        lines = [line.decode(errors="replace") for line in capture.read().splitlines(keepends=True)]
        kept = [line.encode() for line in lines if shown(line, level) and not (hide and hide.search(line))]
        capture.close()
        if kept:
            os.write(2, b"".join(kept))
