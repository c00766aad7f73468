"""Deployment exports, each run in its target runtime and checked against Keras.

``export_model(model, format, output, *, quantize=..., ...)`` writes a TF
Serving SavedModel version, a TFLite flatbuffer (float32 / float16 / dynamic
/ int8), an ONNX file or a keras-hub preset folder, runs it (TensorFlow, ``ai_edge_litert``,
onnxruntime) on real images, and returns a :class:`VerificationReport`; an
export outside its tolerance raises :class:`ExportVerificationError` and
leaves nothing at ``output``.

This file only names the public API. The modules, one job each:
:mod:`~keras_vit.export.orchestration` (``export_model``),
:mod:`~keras_vit.export.errors`, :mod:`~keras_vit.export.common` (formats,
modes, labels), :mod:`~keras_vit.export.data` (verification and calibration
images), :mod:`~keras_vit.export.verify` (the report and its bars), one module
per format (:mod:`~keras_vit.export.saved_model` with
:mod:`~keras_vit.export.rest`, whose ``serving_bytes`` decodes with
:mod:`keras_vit.inference.decoding` as ``predict`` does,
:mod:`~keras_vit.export.tflite` with :mod:`~keras_vit.export.gpu_delegate`, the GPU delegate's rules,
:mod:`~keras_vit.export.onnx`, :mod:`~keras_vit.export.keras_hub`, whose preset keras_vit reads back to check it), and
:mod:`~keras_vit.export.quantization` (the size / latency / agreement table).
"""

from keras_vit.export.common import FORMATS, QUANTIZE_MODES
from keras_vit.export.data import as_images, mnist_images
from keras_vit.export.errors import ExportError, ExportVerificationError
from keras_vit.export.gpu_delegate import GpuDelegateReport, gpu_delegate_report
from keras_vit.export.orchestration import export_model
from keras_vit.export.verify import TOLERANCES, VerificationReport

__all__ = [
    "FORMATS",
    "QUANTIZE_MODES",
    "TOLERANCES",
    "ExportError",
    "ExportVerificationError",
    "GpuDelegateReport",
    "VerificationReport",
    "as_images",
    "export_model",
    "gpu_delegate_report",
    "mnist_images",
]
