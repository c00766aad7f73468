"""Whether output goes to a terminal: progress bars there, plain lines in a log file or a pipe.

Example:
>>> import io
>>> on_a_terminal(io.StringIO())
False
"""

import sys


def on_a_terminal(stream=None):
    """Whether ``stream`` (default ``sys.stdout``) is a terminal: progress bars there, plain lines elsewhere."""
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
