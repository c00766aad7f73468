"""What a run shows and counts of its time: the progress bar or lines, and the wall time kept across resumes.

* :func:`progress_verbosity` -- a progress bar on a terminal, one line per
  epoch in a log file or a pipe.
* :class:`RunProgbar` -- Keras' progress logger counting the epochs of the whole run.
* :class:`Timer` -- the wall time spent training, kept across resumes.

Example:
>>> import io
>>> progress_verbosity("auto", io.StringIO())  # not a terminal: one line per epoch
2
"""

import os
import time

import keras

from keras_vit.hardware.terminal import on_a_terminal
from keras_vit.train.run_files import read_json
from keras_vit.train.run_files import write_json


def progress_verbosity(verbose="auto", stream=None):
    """Keras' ``verbose`` for ``model.fit``: ``"auto"`` is a progress bar (1) on a terminal, one line per epoch (2) otherwise.

    Keras' own ``"auto"`` draws the bar everywhere, and a bar written to a log
    file or a pipe is a wall of carriage returns and escape codes.
    """
    if verbose != "auto":
        return int(verbose)
    return 1 if on_a_terminal(stream) else 2


class RunProgbar(keras.callbacks.ProgbarLogger):
    """Keras' progress logger with ``Epoch e/N`` counting the ``N`` epochs of the whole run.

    :func:`keras_vit.train.resumable.fit_resumable` finishes an interrupted epoch with a ``fit`` of that one
    epoch, for which Keras' own logger prints ``Epoch e/e`` (and no header at all when it is the first epoch).
    """

    def __init__(self, epochs):
        super().__init__()
        self.run_epochs = epochs

    def set_params(self, params):
        super().set_params(params)
        self.epochs = self.run_epochs


class Timer(keras.callbacks.Callback):
    """Wall time spent in ``fit``, kept across resumes in ``path`` (a JSON file written each epoch)."""

    def __init__(self, path):
        super().__init__()
        self.path = os.fspath(path)
        self.already = float(read_json(self.path).get("train_seconds", 0.0))
        self.elapsed, self.start = 0.0, None

    def on_train_begin(self, logs=None):
        self.start = time.time()

    def on_train_end(self, logs=None):
        self.elapsed += time.time() - self.start
        self.start = None

    def on_epoch_end(self, epoch, logs=None):
        write_json(self.path, {"train_seconds": self.total()})

    def total(self):
        """Seconds spent training, this run and the interrupted ones before it."""
        running = time.time() - self.start if self.start else 0.0
        return self.already + self.elapsed + running

    def remove(self):
        """Delete the file (and its folder when that is left empty)."""
        if os.path.exists(self.path):
            os.remove(self.path)
        folder = os.path.dirname(self.path)
        if os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)
