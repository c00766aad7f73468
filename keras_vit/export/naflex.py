"""Export a NaFlex model (SavedModel, TFLite) and verify it against Keras on images of three aspect ratios.

:func:`keras_vit.export.export_model` hands a NaFlex model (``ViTConfig(input_mode="naflex")``) here. Its exports
take each image at its own aspect ratio (:mod:`keras_vit.export.naflex_graph`); each is verified in its runtime
against the Keras model on the verification images resized to three aspect ratios in turn, 1:1, 16:9 and 1:3
(:data:`ASPECTS`: square, wide, tall), whose grids under the budget differ:

* SavedModel: ``serving_default`` on their patch dicts, and ``serving_bytes`` on them sent as PNG files (the grid
  rule in the served graph), each against Keras on the same patches (the one decoder reads PNG losslessly);
* TFLite (``float32``, ``float16``, ``dynamic``; ``int8`` is refused): the file at a fixed budget, in LiteRT, with
  the GPU delegate's verdict (:func:`keras_vit.export.gpu_delegate.gpu_delegate_report`) in the report.

The budget is the model's ``max_patches``, else ``max_patches=`` (``keras-vit export --max-patches``), else its
native grid's patches (:func:`keras_vit.inference.naflex_runtime.budget_of`).
"""

import os

import numpy as np

from keras_vit.architecture.model import config_of
from keras_vit.export import common, gpu_delegate, naflex_graph, saved_model, tflite, verify
from keras_vit.export.errors import ExportVerificationError
from keras_vit.inference import decoding, naflex_input, naflex_runtime, tflite_files
from keras_vit.inference.predictors import softmax
from keras_vit.saving import temporary_path

ASPECTS = {"1:1": (96, 96), "16:9": (90, 160), "1:3": (144, 48)}  # (height, width) of each aspect ratio's images


def aspect_images(pixels):
    """The verification images, image ``i`` resized (by the one rule) to the size of aspect ratio ``i % 3`` of
    :data:`ASPECTS` and rounded to whole levels (a PNG file holds them exactly): a list of float32 ``(h, w, 3)``."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    sizes = list(ASPECTS.values())
    return [np.round(decoding.resize(tf.constant(image), sizes[i % len(sizes)]).numpy()) for i, image in enumerate(pixels)]


def describe(images):
    """``"34 at 1:1, 33 at 16:9, 33 at 1:3"``."""
    names = list(ASPECTS)
    return ", ".join(f"{sum(1 for i in range(len(images)) if i % 3 == k)} at {name}" for k, name in enumerate(names))


def export(model, fmt, output, *, quantize, labels, pixels, bars, max_patches=None, name=None, version=None, top_k=5,
           progress=None):
    """Export NaFlex ``model`` as ``fmt`` (``"saved_model"`` or ``"tflite"``) and verify it: a :class:`VerificationReport`.

    ``pixels``: the verification images (float32 ``(n, H, W, 3)``), resized to the three aspect ratios here.
    """
    progress = progress or (lambda stage, done=None, total=None: None)
    if fmt not in ("saved_model", "tflite"):
        raise ValueError(f"A NaFlex model exports to 'saved_model' or 'tflite'. Received: format={fmt!r}")
    if quantize == "int8":
        raise ValueError("A NaFlex model's TFLite export takes quantize='float32', 'float16' or 'dynamic': int8 "
                         "calibration of its coordinates and mask is not supported. Received: quantize='int8'")
    config = config_of(model)
    budget = naflex_runtime.budget_of(config, max_patches)
    images = aspect_images(pixels)
    inputs = naflex_input.batch(images, config.patch_size, budget, config.grid_rule)
    progress(f"running the Keras model on {len(images)} images ({describe(images)}), {budget} patches each")
    expected = np.asarray(model.predict_on_batch(inputs), "float32")
    coords, valid = ("float32", "float32 1/0") if fmt == "tflite" else ("int32", "bool")
    details = {"aspect_ratios": describe(images), "max_patches": budget,
               "input": f"patches float32 (batch, {budget}, {inputs['patches'].shape[-1]}) RGB [0, 255], "
                        f"patch_coord {coords} (batch, {budget}, 2) (row, col), patch_valid {valid} (batch, {budget})"}
    if fmt == "tflite":
        return _tflite(model, output, quantize, labels, inputs, expected, bars, budget, details, progress)
    return _saved_model(model, output, name, version, labels, top_k, images, inputs, expected, bars, budget, details,
                        progress)


def _tflite(model, output, quantize, labels, inputs, expected, bars, budget, details, progress):
    progress(f"converting to TFLite {quantize} at {budget} patches")
    content = tflite.convert(model, quantize, batch_size=1, max_patches=budget)
    ops = tflite.flatbuffer_ops(content)
    tflite.check_builtin_only(ops)
    tmp = temporary_path(output)
    try:
        tflite.write(content, tmp, labels)
        progress(f"verifying on {len(expected)} images in LiteRT")
        actual = naflex_runtime.run_tflite(tflite_files.tflite_interpreter(tmp), inputs)
        report = verify.make_report(
            "tflite", quantize, output, size_bytes=common.file_size(tmp), ops=ops, expected=expected, actual=actual,
            tolerance=bars, runtime="ai_edge_litert",
            details={**details, "batch_size": 1, "gpu_delegate": gpu_delegate.gpu_delegate_report(content).line()},
        )
        if report.passed:
            os.replace(tmp, output)
            if labels is not None:
                with open(tflite.label_file_path(output), "w", encoding="utf-8") as f:
                    f.write("".join(f"{label}\n" for label in labels))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return report


def _saved_model(model, base, name, version, labels, top_k, images, inputs, expected, bars, budget, details, progress):
    import tensorflow as tf  # deferred: TensorFlow, as above

    logits = common.output_kind(model) == "logits"  # served as probabilities
    reference = softmax(expected) if logits else expected
    holder = {}

    def check(tmp):
        progress(f"verifying the SavedModel's two signatures on {len(images)} images")
        loaded = tf.saved_model.load(tmp)
        served = loaded.signatures[saved_model.SERVING_SIGNATURE](**{k: tf.constant(v) for k, v in inputs.items()})
        report = holder["report"] = verify.make_report(
            "saved_model", "float32", tmp, size_bytes=common.file_size(tmp), ops=saved_model.graph_ops(tmp),
            expected=reference, actual=saved_model._main_output(served), tolerance=bars, runtime="tensorflow",
            details=dict(details),
        )
        files = [tf.io.encode_png(np.asarray(image, np.uint8)).numpy() for image in images]  # lossless: same pixels
        actual = saved_model.run_bytes_signature(loaded, files)
        verdict = verify.bytes_verdict(reference, actual, bars)
        report.details["serving_bytes"] = {"files": f"{len(files)} PNG of any size, the grid rule in the graph", **verdict}
        report.passed = report.passed and verdict["passed"]
        if not report.passed:
            raise ExportVerificationError(report)

    return saved_model.export_verified(
        model, base, holder, name=name or model.name, version=version, labels=labels, top_k=top_k, check=check,
        image_size=tuple(config_of(model).native_image_size), metadata={"max_patches": budget},
        make_archive=lambda: naflex_graph.build_archive(model, labels, top_k, budget),
    )
