"""How each model format is loaded and run: ``.keras`` in Keras, SavedModel in TensorFlow, ``.onnx`` in onnxruntime
(``.tflite`` in LiteRT: :mod:`keras_vit.inference.tflite_files`).

Each ``*_runtime`` function returns a :class:`Runtime`: ``run(x)`` mapping a
float32 batch ``(batch, H, W, 3)``, as the model takes it, to the model's raw
``(batch, classes)`` outputs, and what :class:`~keras_vit.inference.predictors.Predictor`
needs to know about the model (its input size, whether it takes [0, 255]
pixels or [-1, 1]). The ``.tflite`` runtime and its helpers are
:mod:`keras_vit.inference.tflite_files`; :func:`onnx_session` and those helpers are the ones the
exporter verifies its ``.tflite`` and ``.onnx`` files with.
"""

import collections
import json
import os

import numpy as np

from keras_vit.architecture.arguments import positive_pair
from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.model import config_of

FORMATS = ("keras", "saved_model", "tflite", "onnx")  # what model_format tells apart
# written by keras_vit's SavedModel export: {"image_size": [H, W] (what serving_bytes resizes to), "vit_config": {...}}
# (a NaFlex model's also "max_patches": the budget its serving_bytes cuts images under)
SAVED_MODEL_METADATA = os.path.join("assets", "keras_vit.json")

Runtime = collections.namedtuple(
    "Runtime", "run image_size num_classes takes_pixels loaded atol output", defaults=(None, 1e-3, None)
)
Runtime.__doc__ = """A loaded model as a function of its input.

Attributes:
    run: ``run(x) -> outputs``, float32 ``(batch, H, W, 3)`` as the model
        takes it to ``(batch, classes)`` (probabilities or logits).
    image_size: ``(H, W)`` of the model input.
    num_classes: size of the output.
    takes_pixels: whether the model takes RGB in [0, 255] (it scales them
        itself) or [-1, 1].
    loaded: the loaded object (a ``keras.Model``, a loaded SavedModel), or None.
    atol: how far from 1 a row of probabilities may sum (quantised outputs).
    output: what the model returns (:attr:`keras_vit.ViTConfig.output`): ``"embedding"`` for a model
        without a classification head, ``"probabilities"`` or ``"logits"``; None where the file does not
        say (class scores: a file keras_vit exported before it named its outputs, another tool's model).
"""
EMBEDDING = "embedding"  # the output name of a model that returns an embedding, in every format keras_vit exports
OUTPUT_NAMES = ("probabilities", "logits", EMBEDDING)  # what keras_vit's exports name their output: Runtime.output


def model_format(path):
    """``"keras"``, ``"saved_model"``, ``"tflite"`` or ``"onnx"`` from a model path.

    Example:
    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "vit.tflite")
    >>> open(path, "wb").close()
    >>> model_format(path)
    'tflite'
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "saved_model.pb")):
            return "saved_model"
        raise ValueError(f"Folder is not a SavedModel (no saved_model.pb): {path!r}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"Model not found: {path!r}")
    if path.endswith(".keras"):
        return "keras"
    if path.endswith(".tflite"):
        return "tflite"
    if path.endswith(".onnx"):
        return "onnx"
    raise ValueError(
        f"Unknown model format: expected a .keras, .tflite or .onnx file or a SavedModel folder. Received: {path!r}"
    )


def unit_range(pixels):
    """RGB in ``[0, 255]`` as float32 in ``[-1, 1]``: what a model built with ``include_preprocessing=False`` takes."""
    return np.asarray(pixels, dtype="float32") / np.float32(127.5) - np.float32(1.0)


def model_takes_pixels(model):
    """Whether a Keras model scales [0, 255] pixels itself (it has the ``preprocessing`` layer)."""
    try:
        model.get_layer("preprocessing")
        return True
    except ValueError:
        return False


def input_size(static, image_size=None, *, default=None, config=None, what="The model"):
    """``(H, W)`` to run a model at: its static input size, else ``image_size``, else ``default``.

    ``image_size`` other than a static size is refused, naming both; for a model of any size the
    size must make a patch grid (``config.grid_for``), else the message names it and the patch size.

    Example:
    >>> input_size((32, 32), None), input_size((None, None), (16, 24), default=(32, 32))
    ((32, 32), (16, 24))
    >>> input_size((32, 32), (64, 64))
    Traceback (most recent call last):
    ...
    ValueError: The model takes images of size (32, 32) only. Received: image_size=(64, 64)
    """
    requested = None if image_size is None else positive_pair(image_size, "image_size")
    if None not in tuple(static):
        static = tuple(int(v) for v in static)
        if requested is not None and requested != static:
            raise ValueError(f"{what} takes images of size {static} only. Received: image_size={requested}")
        return static
    size = requested or (None if default is None else tuple(int(v) for v in default))
    if size is None:
        raise ValueError(
            f"{what} takes images of any size and records no size to classify files at: pass image_size=(H, W) "
            "(keras-vit predict --image-size H W)"
        )
    if config is not None:
        config.grid_for(size)  # a size the patches do not cut into a grid: a ValueError naming it
    return size


_CHUNK = 32  # images per predict_on_batch call of a Keras model


def one_eager_batch(model, count, batch_size):
    """Whether ``count`` images are better run as one eager call than through a traced predict step: they fit in one
    batch of ``batch_size`` and ``model`` has no predict step yet. Tracing one costs about 2 s for ViT-Ti/16 on 2
    cores, which one batch does not repay; the traced graph then runs each batch faster than an eager call
    (``python benchmarks/eager_or_traced.py``)."""
    return getattr(model, "predict_function", None) is None and 0 < count <= batch_size


def eager_outputs(model, images):
    """``model(images, training=False)`` called once, eagerly, as NumPy in the structure the model returns.

    A model built on another's ``inputs`` takes a list of one input and is given one (a bare batch works too, but
    Keras warns that the structure differs; ``predict`` unpacks it without a word).
    """
    import keras  # deferred: the TFLite, ONNX and SavedModel runtimes run without Keras

    try:
        structure = model.input
    except (AttributeError, ValueError):  # a keras.Sequential never called ("has no defined input"): one bare batch
        structure = None
    listed = isinstance(structure, (list, tuple)) and len(structure) == 1
    return keras.tree.map_structure(keras.ops.convert_to_numpy, model([images] if listed else images, training=False))


def keras_runtime(model, include_preprocessing=None, image_size=None):
    """A ``keras.Model`` with one image input.

    ``include_preprocessing=None`` asks the model whether it takes [0, 255]
    pixels (:func:`model_takes_pixels`). A model of any size (``image_size=None``)
    runs at ``image_size``, by default its native size.
    """
    if include_preprocessing is None:
        include_preprocessing = model_takes_pixels(model)
    shape = model.input_shape
    if isinstance(shape, list) or len(shape) != 4:
        raise ValueError(f"Expected a model with one (batch, H, W, 3) image input. Received: input_shape={shape}")
    config = None
    if None in shape[1:3]:  # a model of any size: its native size by default
        try:
            config = config_of(model)
        except ValueError:  # a Keras model of any size that is no keras_vit model: image_size must be named
            pass
    size = input_size(shape[1:3], image_size, default=config and config.native_image_size, config=config)
    if config is None:
        try:
            config = config_of(model)
        except ValueError:  # another Keras model: class scores
            pass
    shape = (None,) + size + tuple(shape[3:])
    if len(model.outputs) != 1:
        raise ValueError(f"predict takes a model of one output (class scores or an embedding); {model.name!r} has "
                         f"{len(model.outputs)}. Received: output_shape={model.output_shape}")
    out = tuple(model.outputs[0].shape)  # its one output, bare or in a dict or list of one
    if len(out) != 2 or out[-1] is None:  # tokens or a feature map: no scores to rank
        gives = f" (it gives {config.output}: include_top=False with pooling={config.pooling!r})" if config is not None else ""
        raise ValueError(f"predict needs a model of class scores or an embedding, (batch, n){gives}; take its tokens "
                         f"or feature map with model(images) or keras_vit.forward_features. Received: "
                         f"output_shape={out}")

    first = True  # an eager first call leaves no predict step on the model: the runtime remembers it

    def run(images):
        nonlocal first
        eager, first = first and one_eager_batch(model, len(images), _CHUNK), False
        if eager:  # this runtime's first batch (the usual `keras-vit predict` of a few files)
            return _one(eager_outputs(model, images))
        # predict_on_batch per chunk, not model.predict: model.predict builds a tf.data iterator per call,
        # which made some calls much slower on CPU (docs/performance.md, "What makes it fast")
        chunks = [_one(model.predict_on_batch(images[i : i + _CHUNK])) for i in range(0, len(images), _CHUNK)]
        return np.concatenate(chunks, axis=0) if chunks else np.zeros((0, out[-1]), "float32")

    return Runtime(run, shape[1:3], out[-1], include_preprocessing, model,
                   output=config.output if config is not None else None)


def _one(outputs):
    """A Keras model's one output as an array, whether it returns it bare or in a dict or list of one."""
    if isinstance(outputs, dict):
        (outputs,) = outputs.values()
    elif isinstance(outputs, (list, tuple)):
        (outputs,) = outputs
    return np.asarray(outputs)


def saved_model_runtime(path, include_preprocessing=None, image_size=None):
    """A SavedModel's ``serving_default`` signature (else its first) with one ``(batch, H, W, 3)`` input.

    One that takes any size (exported from an ``image_size=None`` model) runs at ``image_size``, by
    default the size keras_vit's export recorded (:data:`SAVED_MODEL_METADATA`: the size its
    ``serving_bytes`` resizes to).

    It is taken to scale [0, 255] pixels itself (as keras_vit exports do)
    unless ``include_preprocessing=False``.
    The class scores are the output named ``probabilities`` (an embedding model's: ``embedding``), else
    the widest float ``(batch, classes)`` output that is not a top-k.
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    loaded = tf.saved_model.load(path)
    signatures = dict(loaded.signatures)
    if not signatures:
        raise ValueError(f"SavedModel has no serving signature: {path!r}")
    signature = signatures.get("serving_default") or next(iter(signatures.values()))
    inputs = signature.structured_input_signature[1]
    if len(inputs) != 1:
        raise ValueError(f"Expected a SavedModel signature with one image input. Received inputs: {sorted(inputs)}")
    input_name, spec = next(iter(inputs.items()))
    if spec.shape.rank != 4:
        raise ValueError(f"Expected a (batch, height, width, 3) image input. Received: {input_name}: {spec.shape}")
    metadata = saved_model_metadata(path)
    config = ViTConfig.from_dict(metadata["vit_config"]) if "vit_config" in metadata else None
    size = input_size(
        tuple(spec.shape[1:3]), image_size, default=metadata.get("image_size"), config=config,
        what=f"The SavedModel {path!r} ({input_name}: {spec.shape})",
    )
    outputs = {
        name: out
        for name, out in signature.structured_outputs.items()
        if out.dtype.is_floating and out.shape.rank == 2
    }
    if not outputs:
        raise ValueError(f"SavedModel signature has no (batch, classes) output: {sorted(signature.structured_outputs)}")
    output_name = min(outputs, key=lambda n: (n not in ("probabilities", EMBEDDING), "top_k" in n, -(outputs[n].shape[-1] or 0), n))
    fixed_batch = spec.shape[0]

    def run(images):
        step = fixed_batch or len(images)
        chunks = [images[i : i + step] for i in range(0, len(images), step)]
        result = [signature(**{input_name: tf.constant(c, dtype=spec.dtype)})[output_name].numpy() for c in chunks]
        return np.concatenate(result)

    # the served output's own name: a logits model's SavedModel serves the softmax as "probabilities"
    output = output_name if output_name in OUTPUT_NAMES else None
    return Runtime(run, size, outputs[output_name].shape[-1], include_preprocessing is not False, loaded, output=output)


def saved_model_metadata(path):
    """What keras_vit's export recorded beside a SavedModel (:data:`SAVED_MODEL_METADATA`), or ``{}``."""
    file = os.path.join(path, SAVED_MODEL_METADATA)
    if not os.path.isfile(file):
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            metadata = json.load(f)
    except (OSError, ValueError) as error:
        raise ValueError(f"Unreadable SavedModel metadata {file!r}: {error}") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"SavedModel metadata {file!r} must hold a JSON object. Received: {type(metadata).__name__}")
    return metadata


def onnx_session(path_or_bytes, num_threads=None):
    """An onnxruntime CPU session of an ONNX model (path or bytes)."""
    import onnxruntime as ort  # deferred: an optional extra ([export])

    options = ort.SessionOptions()
    if num_threads:
        options.intra_op_num_threads = int(num_threads)
        options.inter_op_num_threads = 1
    return ort.InferenceSession(path_or_bytes, sess_options=options, providers=["CPUExecutionProvider"])


def onnx_runtime(path, include_preprocessing=None, image_size=None):
    """An ``.onnx`` file with one ``(batch, H, W, 3)`` input, run by onnxruntime (as the export verified it).

    It is taken to scale [0, 255] pixels itself (as keras_vit exports do) unless
    ``include_preprocessing=False``. The class scores are the output named ``probabilities`` (else
    ``logits``, else an embedding model's ``embedding``, else the first ``(batch, classes)`` output).
    """
    path = os.fspath(path)
    try:
        session = onnx_session(path)
    except ImportError:
        raise
    except Exception as error:  # onnxruntime raises its own types for a file it cannot read
        raise ValueError(f"onnxruntime cannot load {path!r}: {error}") from error
    inputs = session.get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 4:
        received = [(i.name, i.shape) for i in inputs]
        raise ValueError(f"Expected an ONNX model with one (batch, H, W, 3) image input. Received inputs: {received}")
    name = inputs[0].name
    static = tuple(v if isinstance(v, int) else None for v in inputs[0].shape[1:3])
    size = input_size(static, image_size, what=f"The ONNX model {path!r}")
    outputs = [o for o in session.get_outputs() if len(o.shape) == 2]
    if not outputs:
        raise ValueError(f"The ONNX model {path!r} has no (batch, classes) output: {[o.name for o in session.get_outputs()]}")
    output = min(outputs, key=lambda o: (o.name != "probabilities", o.name != "logits", o.name != EMBEDDING))

    def run(images):
        chunks = [
            session.run([output.name], {name: np.asarray(images[i : i + _CHUNK], "float32")})[0]
            for i in range(0, len(images), _CHUNK)
        ]
        return np.concatenate(chunks) if chunks else np.zeros((0, output.shape[-1]), "float32")

    kind = output.name if output.name in OUTPUT_NAMES else None
    return Runtime(run, size, int(output.shape[-1]), include_preprocessing is not False, session, output=kind)
