"""TFLite for Android: builtin ops only, four quantization modes, labels attached.

Conversion goes through ``tf.lite.TFLiteConverter`` on the model frozen at a
fixed batch (1 by default) with ``supported_ops=[TFLITE_BUILTINS]`` (plus
``TFLITE_BUILTINS_INT8`` for full int8), never ``model.export(format=
"litert")``, which lets Flex (select TF) ops in silently. The op list is read
back from the flatbuffer and any custom op (``Flex*`` included) fails the
export, so the standard LiteRT runtime on Android runs the file.

Modes: ``float32``; ``float16`` (float16 weights); ``dynamic`` (int8 weights,
float activations); ``int8`` (weights and activations calibrated on a
representative dataset of real images; float32 input/output). In ``int8``,
``float_ops="auto"`` first converts everything to int8 and, if the top-1
agreement bar is missed, converts again keeping :data:`FRAGILE_OPS` (softmax,
GELU, LayerNorm's mean/variance/rsqrt, and the SUM that makes the attention-pooling
head's query-key dot products) in float via
``tf.lite.experimental.QuantizationDebugger``'s denylist. An int8 SUM is the op whose
result depends most on which kernels run it: LiteRT's reference kernels and its
default (XNNPACK) round int8 SUM differently, and one int8 file of a MAP-head model
agreed with Keras on 60 % and 96 % of top-1 classes under the two
(``benchmarks/int8_kernels.py``, AVX2 CPU).

Labels: the class names are zipped onto the flatbuffer as ``labels.txt``
(the TFLite-metadata "associated file" layout that LiteRT ignores and
Android's metadata extractor reads), and also written beside the model.
"""

import contextlib
import os
import re
import warnings
import zipfile

from keras_vit.architecture.state import model_state
from keras_vit.export import common, naflex_graph
from keras_vit.export.errors import ExportError
from keras_vit.hardware.terminal import native_stderr_filtered
from keras_vit.inference import labels as labels_lib
from keras_vit.inference import tflite_files
from keras_vit.layers import formulation

FRAGILE_OPS = ("SOFTMAX", "GELU", "MEAN", "SQUARED_DIFFERENCE", "RSQRT", "SUM")
# what the converter prints from C++ that its exception repeats, or that says nothing to a user: the MLIR
# locations of a failed op (one line each), and the modes of a quantized conversion
_CONVERTER_LINES = r"^loc\(|^fully_quantize: "
# the converter's Python warnings that say nothing to a user: the float input of an int8 model (on purpose), and
# tf.lite.Interpreter's deprecation, which QuantizationDebugger (float_ops) creates (keras_vit runs ai_edge_litert's)
_CONVERTER_WARNINGS = (r"Statistics for quantized inputs were expected", r"\s*Warning: tf\.lite\.Interpreter is deprecated")
_MLIR_ERROR = re.compile(r"error: (.*)")


def _frozen_function(model, batch_size):
    # deferred: TensorFlow, not imported under the JAX and PyTorch backends
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    h, w, c = common.image_shape(model)
    spec = tf.TensorSpec((batch_size, h, w, c), tf.float32, name="images")
    fn = tf.function(lambda images: tf.cast(model(images, training=False), tf.float32), input_signature=[spec])
    with formulation.rank4(model):  # the layers' graph of rank 4 at most, which the GPU delegate takes whole
        concrete = fn.get_concrete_function()
    return convert_variables_to_constants_v2(concrete)


def _representative(images, on_image=None):
    def generate():
        for done, image in enumerate(images, 1):
            yield [image[None].astype("float32")]
            if on_image is not None:
                on_image(done)

    return generate


def conversion_error(quantize, error):
    """The :class:`ExportError` of a failed conversion: each distinct MLIR error once, not the call stack of each op.

    Example:
    >>> text = "<frozen runpy>:88:1: error: 'tfl.fully_connected' op operand #0 must be QI8\\nsys.exit(main())\\n" * 3
    >>> str(conversion_error("float32", text))
    "TFLite conversion (float32) with builtin ops only failed (3 ops): 'tfl.fully_connected' op operand #0 must be QI8"
    """
    errors = list(dict.fromkeys(m.group(1).strip() for m in _MLIR_ERROR.finditer(str(error))))
    count = len(_MLIR_ERROR.findall(str(error)))
    if not errors:
        return ExportError(f"TFLite conversion ({quantize}) with builtin ops only failed: {error}")
    ops = f" ({count} ops)" if count > 1 else ""
    return ExportError(f"TFLite conversion ({quantize}) with builtin ops only failed{ops}: {'; '.join(errors)}")


def convert(model, quantize="float32", representative_images=None, *, batch_size=1, float_ops=(), on_calibration_image=None,
            max_patches=None):
    """Convert a Keras model to a TFLite flatbuffer (bytes), builtin ops only, its output named for what it is.

    The output tensor is named ``probabilities``, ``logits`` or ``embedding``
    (:func:`keras_vit.export.common.output_kind`), as the SavedModel and ONNX outputs are.

    Args:
        model: a ``keras.Model`` image classifier.
        quantize: ``"float32"``, ``"float16"``, ``"dynamic"`` or ``"int8"``.
        representative_images: float32 ``(N, H, W, 3)`` real images, required
            for ``"int8"`` (already shape-checked, see ``data.as_images``).
        batch_size: the fixed batch of the input.
        float_ops: ``int8`` only: TFLite op names (e.g. ``"SOFTMAX"``) kept in float.
        on_calibration_image: ``int8`` only: called with the count of calibration images fed so far.
        max_patches: a NaFlex model's fixed budget: its three inputs at ``(batch_size, max_patches, ...)``
            (:func:`keras_vit.export.naflex_graph.frozen_function`); None for an image model.

    Returns:
        The flatbuffer bytes.
    """
    return name_output(
        _convert(model, quantize, representative_images, batch_size, float_ops, on_calibration_image, max_patches),
        common.output_kind(model))


def check_state(model):
    """Refuse a model quantized by ``model.quantize`` before any work: the converter cannot read Keras' integer kernels
    (it stopped on ``tfl.fully_connected`` taking an int8 tensor); it quantizes the float model itself. A LoRA model
    converts as it computes (W + (alpha / rank) A B)."""
    state = model_state(model)
    if state.quantized_layers:
        raise ValueError(
            f"Cannot export model {model.name!r} to TFLite: it is {state.describe()}; TFLite's converter cannot read "
            "Keras' integer kernels. Instead, export the float model with quantize='dynamic' (int8 weights) or "
            "quantize='int8' (int8 weights and activations). Nothing was written."
        )


def name_output(content, name):
    """The flatbuffer with its one output tensor named ``name`` (the frozen graph calls it ``Identity``).

    The rest of the file is unchanged (the object API of TensorFlow's ``flatbuffer_utils`` reads it and writes it back).
    """
    from tensorflow.lite.tools import flatbuffer_utils  # deferred: TensorFlow, as in convert

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(content))
    subgraph = model.subgraphs[0]
    if len(subgraph.outputs) != 1:
        raise ExportError(f"Expected one output in the TFLite model. Received: {len(subgraph.outputs)}")
    subgraph.tensors[subgraph.outputs[0]].name = name.encode("utf-8")
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _convert(model, quantize, representative_images, batch_size, float_ops, on_calibration_image, max_patches=None):
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    common.check_quantize(quantize)
    check_op_names(float_ops)
    if int(batch_size) < 1:
        raise ValueError(f"`batch_size` must be positive. Received: batch_size={batch_size!r}")
    frozen = (_frozen_function(model, int(batch_size)) if max_patches is None
              else naflex_graph.frozen_function(model, int(batch_size), int(max_patches)))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        # one weight scale per dense layer: per-channel scales make FULLY_CONNECTED version 12, above the 9
        # that LiteRT's GPU delegate parses (keras_vit.export.gpu_delegate), so every dense layer left the GPU
        converter._experimental_disable_per_channel_quantization_for_dense_layers = True
    elif quantize == "int8":
        if representative_images is None or len(representative_images) == 0:
            raise ValueError("quantize='int8' needs a representative dataset of real images. Received: none")
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = _representative(representative_images, on_calibration_image)
        if float_ops:
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
            options = tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=list(float_ops))
            with _quiet_converter():
                debugger = tf.lite.experimental.QuantizationDebugger(
                    converter=converter,
                    debug_dataset=_representative(representative_images),
                    debug_options=options,
                )
                return bytes(debugger.get_nondebug_quantized_model())
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    try:
        with _quiet_converter():
            return bytes(converter.convert())
    except Exception as error:
        raise conversion_error(quantize, error) from error


def _quiet_converter():
    """The converter's lines and warnings that say nothing to a user, left out (all shown with ``TF_CPP_MIN_LOG_LEVEL=0``)."""
    stack = contextlib.ExitStack()
    stack.enter_context(native_stderr_filtered(hide=_CONVERTER_LINES))
    stack.enter_context(warnings.catch_warnings())
    for message in _CONVERTER_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    return stack


def builtin_op_names():
    from tensorflow.lite.python import schema_py_generated as schema  # deferred: TensorFlow, as in convert

    return {k for k in vars(schema.BuiltinOperator) if not k.startswith("_")}


def check_op_names(names):
    """Every name must be a TFLite builtin op (e.g. ``"SOFTMAX"``), for ``float_ops``."""
    unknown = [name for name in names if name not in builtin_op_names()]
    if unknown:
        raise ValueError(
            f"`float_ops` takes TFLite builtin op names such as {list(FRAGILE_OPS)}. Received unknown: {unknown}"
        )


def flatbuffer_ops(content):
    """Sorted op names of a TFLite flatbuffer: builtin names, or the custom code (``Flex...``)."""
    from tensorflow.lite.python import schema_py_generated as schema  # deferred: TensorFlow, as in convert

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    model = schema.Model.GetRootAs(content, 0)
    ops = set()
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == schema.BuiltinOperator.CUSTOM:
            ops.add(code.CustomCode().decode("utf-8"))
        else:
            ops.add(names.get(builtin, f"BUILTIN_{builtin}"))
    return sorted(ops)


def check_builtin_only(ops):
    """Raise if any op is not a TFLite builtin (Flex ops or other custom ops)."""
    builtin = builtin_op_names()
    bad = [op for op in ops if op.startswith("Flex") or op not in builtin]
    if bad:
        raise ExportError(
            f"The TFLite model needs non-builtin ops {bad}; the standard Android runtime cannot run it."
        )


def attach_labels(path, labels):
    """Zip ``labels.txt`` onto the flatbuffer (TFLite metadata associated-file layout)."""
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("labels.txt", "".join(f"{label}\n" for label in labels))


def read_labels(path):
    """The labels zipped onto a ``.tflite`` by :func:`attach_labels` (as ``keras_vit.predict`` finds them), or None."""
    return labels_lib.tflite_associated_labels(path)


interpreter = tflite_files.tflite_interpreter  # the predictor's (benchmarks/ times through this name)


def run(path_or_content, images, num_threads=None):
    """Outputs of a TFLite model on ``images`` (float32 NHWC), through ai_edge_litert.

    The interpreter, the (de)quantisation and the batching are the
    predictor's (:mod:`keras_vit.inference.runtimes`): an export is verified
    the way ``keras_vit.predict`` runs it.
    """
    return tflite_files.run_tflite(tflite_files.tflite_interpreter(path_or_content, num_threads), images)


def write(content, path, labels):
    """Write the flatbuffer to ``path`` with the labels zipped on (none for an embedding: ``labels`` None)."""
    with open(path, "wb") as f:
        f.write(content)
    if labels is not None:
        attach_labels(path, labels)


def label_file_path(path):
    """The label file written beside a ``.tflite`` (found by ``keras_vit.inference.labels``).

    Example:
    >>> label_file_path("models/vit.tflite")
    'models/vit.labels.txt'
    """
    return os.path.splitext(os.fspath(path))[0] + ".labels.txt"
