"""A NaFlex model (``.keras``, SavedModel or ``.tflite``) as a function of images of any shape: the grid rule, then
the model.

A NaFlex model takes the dict ``{patches, patch_coord, patch_valid}`` (:mod:`keras_vit.layers.naflex_grid`);
``keras-vit predict`` gives it each image at its own aspect ratio, no crop: resized by the grid rule under the
model's budget of patches and cut into that dict (:func:`keras_vit.inference.naflex_input.batch`). The budget is
the model's ``max_patches``, else ``max_patches=`` (``keras-vit predict --max-patches``), else (a SavedModel) the
budget its ``serving_bytes`` was exported at, else the patches of its native grid. A SavedModel runs its
``serving_default`` signature on that dict (the same cut as ``serving_bytes`` does in its graph); a ``.tflite``
export of a NaFlex model has a fixed budget: the length of its inputs (another ``max_patches`` is refused).

:func:`run_tflite` is also what the exporter verifies a NaFlex ``.tflite`` with.
"""

import os

import numpy as np

from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.model import config_of
from keras_vit.inference import naflex_input
from keras_vit.inference.runtimes import EMBEDDING, OUTPUT_NAMES, Runtime, model_takes_pixels, saved_model_metadata, unit_range
from keras_vit.inference.tflite_files import tflite_interpreter, tflite_output
from keras_vit.layers.naflex_grid import GRID_RULES, KEYS

_CHUNK = 32  # images per Keras call


def is_naflex(model):
    """Whether a Keras model is a keras_vit NaFlex model (``vit_config.input_mode == "naflex"``)."""
    try:
        return config_of(model).input_mode == "naflex"
    except ValueError:  # a Keras model that is no keras_vit model
        return False


def check_grid_rule(config, what):
    """``config.grid_rule`` if the TensorFlow input path (:mod:`keras_vit.inference.naflex_input`) has that rule
    (:data:`keras_vit.layers.naflex_grid.GRID_RULES`), else a ``ValueError`` naming it and ``what`` refused it."""
    if config.grid_rule not in GRID_RULES:
        raise ValueError(f"{what} cuts images by the model's NaFlex grid rule, one of {tuple(GRID_RULES)}. "
                         f"Received: grid_rule={config.grid_rule!r}")
    return config.grid_rule


def check_max_patches(max_patches, name="max_patches"):
    """``max_patches`` as an int, or a ``ValueError`` naming it: a positive int. The grid rule gives every image at
    least one patch a side, so a budget of 1 already fits any image (a 1 x 1 grid); 0 or fewer fits none."""
    if isinstance(max_patches, bool) or not isinstance(max_patches, (int, np.integer)) or max_patches < 1:
        raise ValueError(f"`{name}` must be a positive int (patches per image; the grid rule needs at least one). "
                         f"Received: {name}={max_patches!r}")
    return int(max_patches)


def budget_of(config, max_patches=None):
    """The patches per image a NaFlex model of ``config`` runs at: its own ``max_patches`` (another is refused), else
    ``max_patches``, else its native grid's ``rows * cols``; a model of an unknown grid rule is refused
    (:func:`check_grid_rule`)."""
    check_grid_rule(config, "keras_vit's NaFlex prediction and export")
    if max_patches is not None:
        max_patches = check_max_patches(max_patches)
    if config.max_patches is not None:
        if max_patches is not None and max_patches != config.max_patches:
            raise ValueError(f"The NaFlex model takes max_patches={config.max_patches} patches per image only. "
                             f"Received: max_patches={max_patches!r}")
        return config.max_patches
    if max_patches is not None:
        return max_patches
    rows, cols = config.grid
    return rows * cols


def _batch(images, patch_size, budget, takes_pixels, rule):
    """:func:`naflex_input.batch` of ``images`` (``[0, 255]``) by the model's grid ``rule``; a model that does not scale its inputs itself
    (``include_preprocessing=False``) gets the patches in ``[-1, 1]``, as :func:`~keras_vit.inference.predictors.
    preprocess_input` gives the image models (after the grid rule's resize, which clips to ``[0, 255]``)."""
    inputs = naflex_input.batch(images, patch_size, budget, rule)
    if not takes_pixels:
        inputs = {**inputs, "patches": unit_range(inputs["patches"])}
    return inputs


def keras_runtime(model, include_preprocessing=None, max_patches=None):
    """A NaFlex ``keras.Model``: ``run(list of float32 (H, W, 3) images)`` -> ``(n, classes)``."""
    config = config_of(model)
    budget = budget_of(config, max_patches)
    if include_preprocessing is None:
        include_preprocessing = model_takes_pixels(model)

    def run(images):
        chunks = [model.predict_on_batch(_batch(images[i : i + _CHUNK], config.patch_size, budget,
                                                      include_preprocessing, config.grid_rule))
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


def _square_patch(path, width):
    """The side of the square RGB patches of width ``width`` (``ph * pw * 3``) a file's NaFlex inputs take."""
    side = int(round((width // 3) ** 0.5))
    if side * side * 3 != width:
        raise ValueError(f"{os.fspath(path)!r}: patches of width {width} are not square RGB patches (ph * pw * 3).")
    return side


def tflite_runtime(path, include_preprocessing=None, max_patches=None):
    """A NaFlex ``.tflite`` (three inputs, a fixed budget); its patch size read from the patches' width
    (``ph * pw * 3``, square patches). ``max_patches`` other than the file's budget is refused: it was fixed at
    export (``keras-vit export --max-patches``)."""
    interpreter = tflite_interpreter(path)
    details = tflite_inputs(interpreter)
    if details is None:
        raise ValueError(f"{os.fspath(path)!r} is not a NaFlex TFLite model (inputs {', '.join(KEYS)}).")
    budget, width = (int(v) for v in details["patches"]["shape"][1:])
    if max_patches is not None and check_max_patches(max_patches) != budget:
        raise ValueError(f"The NaFlex TFLite model {os.fspath(path)!r} takes max_patches={budget} patches per image "
                         f"only: its budget was fixed at export (keras-vit export --max-patches). Export it again at "
                         f"the budget you want. Received: max_patches={max_patches!r}")
    patch = _square_patch(path, width)
    output = tflite_output(interpreter)

    def run(images):
        # a .tflite records no vit_config: timm's rule, which gives SigLIP 2's grid wherever it gives one (the two
        # searches differ only where timm's refuses a scale under 1e-5)
        return run_tflite(interpreter, _batch(images, patch, budget, include_preprocessing is not False, "timm"))

    kind = output["name"] if output["name"] in OUTPUT_NAMES else None  # keras_vit names it (export.naflex)
    runtime = Runtime(run, (patch, patch), int(output["shape"][-1]), include_preprocessing is not False, None, 1e-3, kind)
    return runtime, ((patch, patch), budget)


def _signature_inputs(path):
    """The input names of a SavedModel's ``serving_default``, read from ``saved_model.pb`` without loading it."""
    from tensorflow.core.protobuf import saved_model_pb2  # deferred: TensorFlow, not imported under other backends

    proto = saved_model_pb2.SavedModel()
    pb = os.path.join(os.fspath(path), "saved_model.pb")
    if not os.path.isfile(pb):  # not a NaFlex SavedModel; the image SavedModel runtime names what is missing
        return set()
    with open(pb, "rb") as f:
        proto.ParseFromString(f.read())
    for meta_graph in proto.meta_graphs:
        if "serving_default" in meta_graph.signature_def:
            return set(meta_graph.signature_def["serving_default"].inputs)
    return set()


def is_naflex_saved_model(path):
    """Whether a SavedModel folder is a NaFlex model's export: its recorded ``vit_config`` says so (keras_vit's
    export), else its ``serving_default`` takes the NaFlex dict (:data:`KEYS`)."""
    metadata = saved_model_metadata(os.fspath(path))
    if "vit_config" in metadata:
        return metadata["vit_config"].get("input_mode") == "naflex"
    return _signature_inputs(path) == set(KEYS)


def saved_model_runtime(path, include_preprocessing=None, max_patches=None):
    """A NaFlex SavedModel's ``serving_default`` on each image's patch dict, cut here by its grid rule (its recorded
    ``vit_config``'s ``grid_rule``, else timm's) under the
    budget (:func:`budget_of`; by default the one its ``serving_bytes`` was exported at, which keras_vit's export
    records): the probabilities (an embedding model's embedding) of ``serving_bytes`` for the same files."""
    import tensorflow as tf  # deferred: TensorFlow, as above

    path = os.fspath(path)
    loaded = tf.saved_model.load(path)
    signature = dict(loaded.signatures).get("serving_default")
    specs = {} if signature is None else signature.structured_input_signature[1]
    if set(specs) != set(KEYS):
        raise ValueError(f"{path!r} is not a NaFlex SavedModel: its serving_default takes {sorted(specs)}, "
                         f"not {list(KEYS)}.")
    metadata = saved_model_metadata(path)
    length, width = specs["patches"].shape[1], int(specs["patches"].shape[-1])
    if "vit_config" in metadata:
        config = ViTConfig.from_dict(metadata["vit_config"])
        patch, native = tuple(config.patch_size), tuple(config.native_image_size)
        budget = budget_of(config, max_patches if max_patches is not None else metadata.get("max_patches"))
        rule = config.grid_rule
    else:  # another exporter's: the patch size read from the patches' width, the budget from its length or the caller
        side = _square_patch(path, width)
        patch, native, rule = (side, side), (side, side), "timm"
        if max_patches is None and length is None:
            raise ValueError(f"The NaFlex SavedModel {path!r} takes any number of patches and records no budget "
                             "(assets/keras_vit.json): pass max_patches= (keras-vit predict --max-patches N).")
        budget = check_max_patches(max_patches) if max_patches is not None else int(length)
    if length is not None and budget != int(length):
        raise ValueError(f"The NaFlex SavedModel {path!r} takes max_patches={int(length)} patches per image only. "
                         f"Received: max_patches={budget!r}")
    outputs = signature.structured_outputs
    name = "probabilities" if "probabilities" in outputs else EMBEDDING if EMBEDDING in outputs else None
    if name is None:
        raise ValueError(f"The NaFlex SavedModel {path!r} has neither a probabilities nor an embedding output: "
                         f"{sorted(outputs)}")

    def run(images):
        chunks = []
        for i in range(0, len(images), _CHUNK):
            inputs = _batch(images[i : i + _CHUNK], patch, budget, include_preprocessing is not False, rule)
            served = signature(**{key: tf.constant(inputs[key], dtype=specs[key].dtype) for key in KEYS})
            chunks.append(np.asarray(served[name].numpy(), "float32"))
        return np.concatenate(chunks) if chunks else np.zeros((0, int(outputs[name].shape[-1])), "float32")

    runtime = Runtime(run, native, int(outputs[name].shape[-1]), include_preprocessing is not False, loaded,
                      output=name)  # served as probabilities (a logits model's through a softmax), or the embedding
    return runtime, (patch, budget)
