"""Deployment exports, each run in its target runtime and checked against Keras.

``export_model(model, format, output, *, quantize=..., ...)`` writes a TF
Serving SavedModel version, a TFLite flatbuffer (float32 / float16 / dynamic
/ int8), an ONNX file or a keras-hub preset folder, runs it (TensorFlow, ``ai_edge_litert``,
onnxruntime) on real images, and returns a :class:`VerificationReport`; an
export outside its tolerance raises :class:`ExportVerificationError` and
leaves nothing at ``output``.

This file only names the public API. The modules, one job each:
:mod:`~keras_vit.export.orchestration` (``export_model``),
:mod:`~keras_vit.export.errors`, :mod:`~keras_vit.export.options` (formats,
modes, the domains of the arguments; no Keras), :mod:`~keras_vit.export.common` (labels, shapes), :mod:`~keras_vit.export.data` (verification and calibration
images), :mod:`~keras_vit.export.verify` (the report and its bars), one module
per format (:mod:`~keras_vit.export.saved_model` with
:mod:`~keras_vit.export.rest`, whose ``serving_bytes`` decodes with
:mod:`keras_vit.inference.decoding` as ``predict`` does,
:mod:`~keras_vit.export.tflite` with :mod:`~keras_vit.export.gpu_delegate`, the GPU delegate's rules,
:mod:`~keras_vit.export.onnx`, :mod:`~keras_vit.export.keras_hub`, whose preset keras_vit reads back to check it), and
:mod:`~keras_vit.export.quantization` (the size / latency / agreement table).
"""

from keras_vit.lazy import lazy_exports

# public name -> the module that defines it: imported on first use (PEP 562), so that a leaf module such as
# keras_vit.export.options loads without Keras or TensorFlow (the command's --help builds from it)
_EXPORTS = {
    "keras_vit.export.options": ("FORMATS", "QUANTIZE_MODES"),
    "keras_vit.export.data": ("as_images", "mnist_images"),
    "keras_vit.export.errors": ("ExportError", "ExportVerificationError"),
    "keras_vit.export.gpu_delegate": ("GpuDelegateReport", "gpu_delegate_report"),
    "keras_vit.export.orchestration": ("export_model",),
    "keras_vit.export.verify": ("TOLERANCES", "VerificationReport"),
}
__getattr__, __dir__, __all__ = lazy_exports(globals(), _EXPORTS)
