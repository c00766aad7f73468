"""keras-hub presets as a :class:`~keras_vit.weights.source.Source` (:mod:`keras_vit.weights.keras_hub` reads them)."""

import os

from keras_vit.weights import config as config_lib
from keras_vit.weights import keras_hub
from keras_vit.weights.input_normalization import fold_normalization
from keras_vit.weights.source import Reading, Source


def keras_hub_folder(path):
    """The keras-hub preset folder ``path`` is or whose ``.weights.h5`` it is, else None."""
    folder = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    if (os.path.isdir(path) or path.endswith(".weights.h5")) and keras_hub.is_preset(folder):
        return folder
    return None


def _task_activation(task):
    """``(activation or None for logits, said)`` of a keras-hub ``task.json``, or ``()`` without one."""
    if task is None:
        return ()
    activation = None if task["activation"] in (None, "linear") else task["activation"]
    return activation, f"task.json config.activation={task['activation']!r}"


class KerasHubSource(Source):
    name = keras_hub.FORMAT
    reads = "file or folder"

    def claims(self, opened):
        return keras_hub_folder(opened.path) is not None

    def describe(self, opened, architecture=None):
        folder = keras_hub_folder(opened.path)
        settings = keras_hub.settings(folder)
        shapes = keras_hub.shapes(folder, settings)
        expected = list(settings["expected"])
        if settings["task"] is not None:
            expected.append(("num_classes", f"task.json config.num_classes={settings['task']['num_classes']!r}", settings["task"]["num_classes"]))
        config_lib.check_against_weights(expected, shapes, settings["flags"]["use_mha_bias"], os.path.join(folder, "config.json"))
        reading = Reading(declared=settings["declared"], expected=settings["expected"], class_names=settings["class_names"],
                          architecture=settings["architecture"], mean=settings["mean"], std=settings["std"], notes=settings["notes"],
                          skipped=settings.get("skipped") or {}, position_resampling=settings.get("position_resampling"),
                          classifier_activation=_task_activation(settings["task"]))
        return reading.info(folder, self.name, shapes, os.path.join(folder, "config.json"))

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        folder = keras_hub_folder(opened.path)
        settings = keras_hub.settings(folder)
        arrays = keras_hub.arrays(folder, settings)
        return fold_normalization(arrays, settings["mean"], settings["std"], input_mean, input_std)


SOURCE = KerasHubSource()
