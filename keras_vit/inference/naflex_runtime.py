"""A NaFlex model (``.keras`` or ``.tflite``) as a function of images of any shape: the grid rule, then the model.

A NaFlex model takes the dict ``{patches, patch_coord, patch_valid}`` (:mod:`keras_vit.layers.naflex_grid`);
``keras-vit predict`` gives it each image at its own aspect ratio, no crop: resized by the grid rule under the
model's budget of patches and cut into that dict (:func:`keras_vit.inference.naflex_input.batch`). The budget is
the model's ``max_patches``, else ``max_patches=`` (``keras-vit predict --max-patches``), else the patches of its
native grid. A ``.tflite`` export of a NaFlex model has a fixed budget: the length of its inputs.

:func:`run_tflite` is also what the exporter verifies a NaFlex ``.tflite`` with.
"""

import os

import numpy as np

from keras_vit.architecture.model import config_of
from keras_vit.inference import naflex_input
from keras_vit.inference.runtimes import EMBEDDING, Runtime, model_takes_pixels, tflite_interpreter, tflite_output
from keras_vit.layers.naflex_grid import KEYS

_CHUNK = 32  # images per Keras call


def is_naflex(model):
    """Whether a Keras model is a keras_vit NaFlex model (``vit_config.input_mode == "naflex"``)."""
    try:
        return config_of(model).input_mode == "naflex"
    except ValueError:  # a Keras model that is no keras_vit model
        return False


def check_grid_rule(config, what):
    """Refuse a model whose weights were trained under another grid rule than timm's, the one the TensorFlow input
    path (:mod:`keras_vit.inference.naflex_input`) computes: its images would get other grids without a word."""
    if config.grid_rule != "timm":
        raise ValueError(
            f"{what} cuts the images by timm's NaFlex grid rule, in TensorFlow; this model's weights were trained "
            f"with grid_rule={config.grid_rule!r}, whose TensorFlow form keras_vit does not have yet. Run the Keras model "
            f"on naflex_grid.batch of the images resized by keras_vit.layers.naflex_grid.resize_to_budget(image, "
            f"patch_size, max_patches, rule={config.grid_rule!r}) instead."
        )


def budget_of(config, max_patches=None):
    """The patches per image a NaFlex model of ``config`` runs at: its own ``max_patches`` (another is refused), else
    ``max_patches``, else its native grid's ``rows * cols``; a model of another grid rule than timm's is refused
    (:func:`check_grid_rule`)."""
    check_grid_rule(config, "keras_vit's NaFlex prediction and export")
    if config.max_patches is not None:
        if max_patches is not None and int(max_patches) != config.max_patches:
            raise ValueError(f"The NaFlex model takes max_patches={config.max_patches} patches per image only. "
                             f"Received: max_patches={max_patches!r}")
        return config.max_patches
    if max_patches is not None:
        if isinstance(max_patches, bool) or not isinstance(max_patches, (int, np.integer)) or max_patches < 1:
            raise ValueError(f"`max_patches` must be a positive int. Received: max_patches={max_patches!r}")
        return int(max_patches)
    rows, cols = config.grid
    return rows * cols


def keras_runtime(model, include_preprocessing=None, max_patches=None):
    """A NaFlex ``keras.Model``: ``run(list of float32 (H, W, 3) images)`` -> ``(n, classes)``."""
    config = config_of(model)
    budget = budget_of(config, max_patches)
    if include_preprocessing is None:
        include_preprocessing = model_takes_pixels(model)

    def run(images):
        chunks = [model.predict_on_batch(naflex_input.batch(images[i : i + _CHUNK], config.patch_size, budget))
                  for i in range(0, len(images), _CHUNK)]
        return np.concatenate(chunks, axis=0) if chunks else np.zeros((0, model.output_shape[-1]), "float32")

    runtime = Runtime(run, tuple(config.native_image_size), model.output_shape[-1], include_preprocessing, model,
                      output=config.output)
    return runtime, (config.patch_size, budget)


def tflite_inputs(interpreter):
    """``{key: input detail}`` of a NaFlex ``.tflite`` (inputs named after :data:`KEYS`), or None for another file."""
    found = {}
    for detail in interpreter.get_input_details():
        for key in KEYS:
            if key in detail["name"] and not (key == "patches" and "patch_" in detail["name"]):
                found[key] = detail
    return found if len(found) == len(KEYS) == len(interpreter.get_input_details()) else None


def run_tflite(interpreter, inputs):
    """Float outputs ``(n, classes)`` of a NaFlex ``.tflite`` on the NaFlex dict ``inputs`` (batches of ``n``), one
    image at a time (the file's fixed batch is 1)."""
    details = tflite_inputs(interpreter)
    output = tflite_output(interpreter)
    budget = int(details["patches"]["shape"][1])
    if inputs["patches"].shape[1:] != tuple(int(v) for v in details["patches"]["shape"][1:]):
        raise ValueError(f"The NaFlex TFLite model takes patches of shape (1, {budget}, "
                         f"{int(details['patches']['shape'][2])}). Received: shape={inputs['patches'].shape}")
    results = []
    for i in range(len(inputs["patches"])):
        for key, detail in details.items():
            interpreter.set_tensor(detail["index"], np.asarray(inputs[key][i : i + 1]).astype(detail["dtype"]))
        interpreter.invoke()
        results.append(np.asarray(interpreter.get_tensor(output["index"]), "float32"))
    return np.concatenate(results) if results else np.zeros((0, int(output["shape"][-1])), "float32")


def tflite_runtime(path, include_preprocessing=None):
    """A NaFlex ``.tflite`` (three inputs, a fixed budget); its patch size read from the patches' width
    (``ph * pw * 3``, square patches)."""
    interpreter = tflite_interpreter(path)
    details = tflite_inputs(interpreter)
    if details is None:
        raise ValueError(f"{os.fspath(path)!r} is not a NaFlex TFLite model (inputs {', '.join(KEYS)}).")
    budget, width = (int(v) for v in details["patches"]["shape"][1:])
    patch = int(round((width // 3) ** 0.5))
    if patch * patch * 3 != width:
        raise ValueError(f"{os.fspath(path)!r}: patches of width {width} are not square RGB patches (ph * pw * 3).")
    output = tflite_output(interpreter)

    def run(images):
        return run_tflite(interpreter, naflex_input.batch(images, patch, budget))

    kind = EMBEDDING if output["name"] == EMBEDDING else None
    runtime = Runtime(run, (patch, patch), int(output["shape"][-1]), include_preprocessing is not False, None, 1e-3, kind)
    return runtime, ((patch, patch), budget)
