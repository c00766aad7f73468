"""``.tflite`` files loaded and run in LiteRT: the interpreter, the int8 tensors' (de)quantisation, batches of the
file's fixed size, and the :class:`~keras_vit.inference.runtimes.Runtime` predict runs them with. The exporter verifies
its ``.tflite`` files with the same helpers."""

import os
import threading

import numpy as np

from keras_vit.hardware.terminal import native_stderr_filtered
from keras_vit.inference.runtimes import OUTPUT_NAMES, Runtime, input_size


def tflite_interpreter(path_or_content, num_threads=None):
    """An ``ai_edge_litert`` interpreter of a ``.tflite`` path or flatbuffer bytes, tensors allocated."""
    from ai_edge_litert.interpreter import Interpreter  # deferred: ai_edge_litert is an optional extra ([export])

    # LiteRT prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." from C++, whatever
    # TF_CPP_MIN_LOG_LEVEL says: filtered here to the level that variable asks for
    with native_stderr_filtered():
        if isinstance(path_or_content, (bytes, bytearray)):
            interpreter = Interpreter(model_content=bytes(path_or_content), num_threads=num_threads)
        else:
            interpreter = Interpreter(model_path=os.fspath(path_or_content), num_threads=num_threads)
        interpreter.allocate_tensors()
    return interpreter


def _is_quantized(detail):
    return np.issubdtype(detail["dtype"], np.integer) and bool(detail["quantization"][0])


def quantize(x, detail):
    """Float values to a TFLite tensor's type: ``round(x / scale + zero_point)`` clipped for integer tensors.

    ``detail`` is one entry of ``get_input_details()``; a float tensor (or an
    integer one without quantization parameters) gets a plain cast.

    Example:
    >>> detail = {"dtype": np.uint8, "quantization": (2.0, 10)}
    >>> quantize(np.array([0.0, 7.0, 1000.0]), detail)
    array([ 10,  14, 255], dtype=uint8)
    """
    if _is_quantized(detail):
        scale, zero_point = detail["quantization"]
        info = np.iinfo(detail["dtype"])
        x = np.clip(np.round(np.asarray(x) / scale + zero_point), info.min, info.max)
    return np.asarray(x).astype(detail["dtype"])


def dequantize(y, detail):
    """A TFLite output tensor as float32: ``(y - zero_point) * scale`` for a quantised integer tensor.

    Example:
    >>> dequantize(np.array([10, 14], np.uint8), {"dtype": np.uint8, "quantization": (2.0, 10)})
    array([0., 8.], dtype=float32)
    """
    y = np.asarray(y).astype("float32")
    if _is_quantized(detail):
        scale, zero_point = detail["quantization"]
        y = (y - np.float32(zero_point)) * np.float32(scale)
    return y


def tflite_input(interpreter):
    """The detail of a TFLite model's one image input."""
    details = interpreter.get_input_details()
    if len(details) != 1 or len(details[0]["shape"]) != 4:
        received = [(d["name"], d["shape"].tolist()) for d in details]
        raise ValueError(f"Expected a TFLite model with one (batch, H, W, 3) image input. Received inputs: {received}")
    return details[0]


def tflite_output(interpreter):
    """The detail of the output holding the class scores: the widest output."""
    return max(interpreter.get_output_details(), key=lambda d: int(d["shape"][-1]))


def run_tflite(interpreter, images):
    """Float outputs of a TFLite model on float ``images`` (NHWC), in chunks of its fixed batch.

    Inputs are quantised and outputs dequantised as the tensors' types say;
    a last chunk smaller than the batch is padded with its last image.
    """
    input_detail = tflite_input(interpreter)
    output_detail = tflite_output(interpreter)
    batch = int(input_detail["shape"][0])
    images = np.asarray(images)
    expected = tuple(int(v) for v in input_detail["shape"][1:])
    if images.ndim != 4 or images.shape[1:] != expected:
        raise ValueError(
            f"The TFLite model takes images of shape (batch, {', '.join(map(str, expected))}). "
            f"Received: shape={images.shape}"
        )
    results = []
    for i in range(0, len(images), batch):
        chunk = np.asarray(images[i : i + batch], dtype="float32")
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - n, axis=0)])
        interpreter.set_tensor(input_detail["index"], quantize(chunk, input_detail))
        interpreter.invoke()
        results.append(dequantize(interpreter.get_tensor(output_detail["index"]), output_detail)[:n])
    if not results:
        return np.zeros((0, int(output_detail["shape"][-1])), "float32")
    return np.concatenate(results)


def tflite_runtime(path, include_preprocessing=None, image_size=None):
    """A ``.tflite`` file with one ``(batch, H, W, 3)`` input, run by LiteRT.

    ``run`` may be called from several threads at once: each thread runs its
    own interpreter.

    It is taken to scale [0, 255] pixels itself (as keras_vit exports do)
    unless ``include_preprocessing=False``. Its input size is fixed; an
    ``image_size`` other than it is refused.
    """
    interpreter = tflite_interpreter(path)
    _, h, w, _ = tflite_input(interpreter)["shape"]
    h, w = input_size((h, w), image_size, what=f"The TFLite model {os.fspath(path)!r}")
    output_detail = tflite_output(interpreter)
    # A LiteRT interpreter holds its input and output tensors: two threads sharing one overwrite each
    # other's images (RuntimeError, or another image's scores). One interpreter per thread, the
    # flatbuffer read once; a thread's interpreter goes with the thread.
    with open(os.fspath(path), "rb") as f:
        content = f.read()
    local = threading.local()
    local.interpreter = interpreter

    def run(images):
        if getattr(local, "interpreter", None) is None:
            local.interpreter = tflite_interpreter(content)
        return run_tflite(local.interpreter, images)

    num_classes = int(output_detail["shape"][-1])
    out_scale = output_detail["quantization"][0] if _is_quantized(output_detail) else 0.0
    atol = max(1e-3, num_classes * out_scale)  # each dequantised score is off by up to one step
    output = output_detail["name"] if output_detail["name"] in OUTPUT_NAMES else None  # keras_vit names it (export.tflite)
    return Runtime(run, (h, w), num_classes, include_preprocessing is not False, None, atol, output)
