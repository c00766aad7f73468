"""What an export can be asked for: the formats, the TFLite modes and the domains of the numeric arguments.

One leaf module that imports neither Keras nor TensorFlow, so that ``keras-vit export --help`` and
``keras-vit quantization-report --help`` build their flags (choices and ``argparse`` types, from
:mod:`keras_vit.domains`) without starting them; :func:`~keras_vit.export.export_model` and
:func:`~keras_vit.export.quantization.quantization_report` check their arguments against the same tables.

Example:
>>> check_quantize("int4")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: Unknown quantization mode: expected one of ('float32', ...). Received: quantize='int4'
"""

from keras_vit.domains import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE_INT, PROBABILITY, Optional

FORMATS = ("saved_model", "tflite", "onnx", "keras-hub")
QUANTIZE_MODES = ("float32", "float16", "dynamic", "int8")
# the formats written to one file (a folder at their path is refused, an existing file kept unless overwrite=True)
FILE_FORMATS = ("tflite", "onnx")
DEFAULT_OPSET = 17  # ONNX

# the domains of the tolerance overrides: `keras-vit export --max-abs-diff/--min-top1-agreement` use them too
TOLERANCE_DOMAINS = {"max_abs_diff": Optional(NON_NEGATIVE), "min_top1_agreement": Optional(PROBABILITY)}
# the domains of export_model's numeric arguments; `keras-vit export` takes its flags' types here
ARGUMENT_DOMAINS = {
    "num_images": POSITIVE_INT,
    "version": Optional(POSITIVE_INT),  # TF Serving reads numeric folders from 1
    "top_k": POSITIVE_INT,
    "batch_size": POSITIVE_INT,
    "opset": POSITIVE_INT,
    "max_patches": Optional(POSITIVE_INT),  # a NaFlex model's budget of patches per image (the grid rule needs one)
    **TOLERANCE_DOMAINS,
}
# the domains of quantization_report's numbers; `keras-vit quantization-report` uses them too
REPORT_DOMAINS = {"num_images": POSITIVE_INT, "num_threads": POSITIVE_INT, "runs": POSITIVE_INT, "throughput_batch": NON_NEGATIVE_INT}


def check_format(fmt):
    if fmt not in FORMATS:
        raise ValueError(f"Unknown export format: expected one of {FORMATS}. Received: format={fmt!r}")
    return fmt


def check_quantize(quantize, fmt="tflite"):
    """``quantize`` if ``fmt`` takes it, else a ``ValueError`` naming it."""
    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"Unknown quantization mode: expected one of {QUANTIZE_MODES}. Received: quantize={quantize!r}")
    if fmt != "tflite" and quantize != "float32":
        raise ValueError(
            f"Quantization is a TFLite option; format={fmt!r} exports float32 only. Received: quantize={quantize!r}"
        )
    return quantize
