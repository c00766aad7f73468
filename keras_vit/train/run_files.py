"""The files a run keeps beside its model: JSON (metrics, timings, backup metadata) and the CSV log, rewritten atomically.

* :func:`write_json` / :func:`read_json` -- JSON through a temporary file and
  ``os.replace``; NaN and infinities are written as ``null`` (JSON has no NaN).
* :func:`drop_log_rows` -- a ``CSVLogger`` log without the rows of the epochs
  a resumed run does again.
"""

import csv
import json
import os

import numpy as np

from keras_vit.saving import atomic_write


def _finite_or_none(obj):
    """``obj`` with every NaN or infinite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {key: _finite_or_none(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(value) for value in obj]
    if isinstance(obj, (float, np.floating)) and not np.isfinite(obj):
        return None
    return obj


def write_json(path, obj):
    """Write JSON atomically (temporary file + ``os.replace``); NaN and infinities are written as ``null``.

    Example:
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "m.json")
    >>> write_json(path, {"loss": float("nan"), "accuracy": 0.5})
    >>> read_json(path)
    {'accuracy': 0.5, 'loss': None}
    """

    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(_finite_or_none(obj), f, indent=2, sort_keys=True, allow_nan=False)
            f.write("\n")

    atomic_write(path, write)


def read_json(path):
    """The JSON object in ``path``, or ``{}`` when the file is missing or unreadable."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def last_log_row(path, separator=","):
    """``{column: value}`` of the CSV log's last row (strings), or ``{}`` without a log or a row."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f, delimiter=separator))
    except OSError:
        return {}
    return rows[-1] if rows else {}


def drop_log_rows(path, *, first_epoch, separator=","):
    """Rewrite the CSV log ``path`` (atomically) without the rows of epochs ``first_epoch`` and later."""
    if not os.path.isfile(path):
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter=separator))
    if not rows or "epoch" not in rows[0]:
        return
    column = rows[0].index("epoch")

    def kept(row):
        try:
            return len(row) == len(rows[0]) and int(row[column]) < first_epoch
        except ValueError:
            return False

    body = [row for row in rows[1:] if kept(row)]
    if len(body) == len(rows) - 1:
        return

    def write(tmp):
        with open(tmp, "w", newline="") as f:
            csv.writer(f, delimiter=separator).writerows([rows[0], *body])

    atomic_write(path, write)
