"""``export_model``: export a model, run the export in its runtime, compare it with Keras.

The one path every format takes: load (and resize) the model, read the
verification (and int8 calibration) images, let the format's module convert
and write (:mod:`~keras_vit.export.saved_model`, :mod:`~keras_vit.export.tflite`,
:mod:`~keras_vit.export.onnx`), run the export in its target runtime, and
keep it only when :mod:`~keras_vit.export.verify` finds it within its bars.

Example:
>>> report = export_model("model.keras", "tflite", "model.tflite", quantize="dynamic")  # doctest: +SKIP
>>> report.top1_agreement, report.size_bytes, report.ops  # doctest: +SKIP
"""

import os

from keras_vit.export import common, data, gpu_delegate, keras_hub, naflex, onnx, saved_model, tflite, verify
from keras_vit.inference import naflex_runtime
from keras_vit.export.errors import ExportError, ExportVerificationError
from keras_vit.inference.predictors import softmax
from keras_vit.architecture.arguments import positive_pair
from keras_vit.architecture.model import config_of
from keras_vit.architecture.state import model_state
from keras_vit.models.resize import resize_model
from keras_vit.saving import atomic_write, check_output, load_model, temporary_path
from keras_vit.domains import check_arguments
from keras_vit.export.options import ARGUMENT_DOMAINS, FILE_FORMATS


def export_model(
    model,
    format,
    output,
    *,
    quantize="float32",
    labels=None,
    eval_data=None,
    representative_data=None,
    num_images=100,
    name=None,
    version=None,
    top_k=5,
    batch_size=1,
    float_ops="auto",
    max_abs_diff=None,
    min_top1_agreement=None,
    warmup=True,
    opset=onnx.DEFAULT_OPSET,
    report=None,
    image_size=None,
    overwrite=False,
    progress=None,
    max_patches=None,
):
    """Export ``model``, run the export in its runtime, compare it with Keras.

    Args:
        model: a ``keras.Model`` or the path to a ``.keras`` file.
        format: ``"saved_model"``, ``"tflite"``, ``"onnx"`` or ``"keras-hub"`` (a keras-hub preset folder:
            :mod:`~keras_vit.export.keras_hub`).
        output: for ``saved_model`` the base path (the version goes to
            ``<output>/<name>/<version>``); for ``keras-hub`` the new preset folder; otherwise the file to write.
        quantize: TFLite mode: ``"float32"``, ``"float16"``, ``"dynamic"``
            or ``"int8"`` (the other formats take ``"float32"`` only).
        labels: class names (list or label file); default: names stored with
            the model, ImageNet names for 1000 or 21843 classes, else ``class_i``.
        eval_data: real images to verify on: array, ``tf.data.Dataset`` of
            images or ``(images, labels)``, or an image folder; default the
            held-out test images of the data the ``.keras`` file records it was
            trained on (``keras-vit train`` records the MNIST subset or an image
            folder), else MNIST digits, which the report says are not the model's
            own (:func:`~keras_vit.export.data.eval_images`).
        representative_data: calibration images for ``int8`` (same forms);
            default the training images of the recorded dataset (disjoint from
            the eval images); without either, ``int8`` is refused
            (:func:`~keras_vit.export.data.calibration_images`). The report's
            ``eval_images`` and ``calibration_images`` say which images were used.
        num_images: how many images to verify / calibrate on.
        name, version: SavedModel name (default the model's) and version
            (default next free; an existing one raises ``FileExistsError``).
        top_k: size of the SavedModel's ``top_k_*`` outputs.
        batch_size: TFLite fixed batch (1 for Android).
        float_ops: ``int8`` only: ``"auto"`` (full int8, then keep
            ``tflite.FRAGILE_OPS`` in float if the agreement bar is missed),
            a list of TFLite op names to keep in float, or ``()``.
        max_abs_diff, min_top1_agreement: override the bars of :data:`TOLERANCES`
            (a finite number >= 0; a share in [0, 1]).
        warmup: write TF Serving warmup requests (needs tensorflow-serving-api).
        opset: ONNX opset.
        report: optional path of a JSON report (written pass or fail).
        image_size: int or ``(height, width)`` to export at: the model is
            resized to it first (:func:`keras_vit.resize_model`). A model built
            with ``image_size=None`` is exported to TFLite and ONNX at this size
            (default: its native size); its SavedModel keeps taking any size in
            ``serving_default`` and ``serving_bytes`` resizes images to this size
            (default: its native size).
        overwrite: replace an existing ``.tflite`` / ``.onnx`` file at ``output``
            (checked before any work; a folder there is always refused). A
            SavedModel version or a keras-hub folder is never replaced.
        progress: ``progress(stage, done=None, total=None)``, called as the
            export goes: a stage starting (``done`` None), or ``done`` of ``total``
            calibration images (the ``keras-vit export`` command draws it).
        max_patches: a NaFlex model's budget of patches per image (default its own ``max_patches``, else its native
            grid's): its SavedModel and TFLite exports take each image at its own aspect ratio and are verified on
            images of three (:mod:`keras_vit.export.naflex`). The TFLite file's fixed budget; the SavedModel's
            ``serving_bytes`` budget, recorded for ``keras-vit predict`` (its ``serving_default`` takes any length
            from a model without ``max_patches``). A positive int; refused for a model that is not a NaFlex model.

    Returns:
        The :class:`VerificationReport` (``report.path`` is the export).

    Raises:
        ExportVerificationError: the export missed its tolerance (nothing is
            left at ``output``; ``error.report`` has the numbers).
        ExportError: the converter or the runtime failed.
        FileExistsError: the SavedModel version exists, or the output file and ``overwrite`` is False.
        IsADirectoryError: ``output`` of a ``.tflite`` / ``.onnx`` file is a folder.
        NotADirectoryError: ``output`` of a SavedModel (or its ``name`` folder in it) is a file.
        ValueError: bad arguments (a number out of its domain, :data:`ARGUMENT_DOMAINS`, is
            refused first; a ``.tflite`` / ``.onnx`` output without its format's extension) or data of the wrong shape.
    """
    check_arguments(  # before anything is read or written
        ARGUMENT_DOMAINS, num_images=num_images, version=version, top_k=top_k, batch_size=batch_size, opset=opset,
        max_abs_diff=max_abs_diff, min_top1_agreement=min_top1_agreement, max_patches=max_patches,
    )
    common.check_format(format)
    common.check_quantize(quantize, format)
    if float_ops != "auto" and isinstance(float_ops, str):
        raise ValueError(f"`float_ops` must be 'auto' or a list of TFLite op names. Received: float_ops={float_ops!r}")
    if float_ops != "auto":
        tflite.check_op_names(float_ops)
    progress = progress or _silent
    model_path = None if not isinstance(model, (str, os.PathLike)) else os.fspath(model)
    if format == "keras-hub":  # checked before the model is resized or any image read
        keras_hub.check_output(output)
    if format in FILE_FORMATS:  # of its format's extension: load_predictor and keras-vit predict tell the runtime by it
        check_output(output, overwrite=overwrite, extension=f".{format}",
                     what=f"A {format} export's output (predict and load_predictor tell its runtime by the extension)")
    if format == "tflite" and not os.path.exists(output) and os.path.exists(tflite.label_file_path(output)):
        raise FileExistsError(  # the .tflite's own label file is written (or removed) beside it: not another's
            f"{tflite.label_file_path(output)!r} exists beside no {os.path.basename(output)!r}: the export writes its label "
            "file there. Move it, or export to another name.")
    dataset = data.recorded_dataset(model)
    int8 = format == "tflite" and quantize == "int8"
    if int8 and representative_data is None and data.dataset_kind(dataset) is None:
        data.refuse_uncalibrated(dataset)  # naming the argument, before any work
    progress(f"loading {model_path or model.name}")
    model = load_model(model)
    if format == "keras-hub":  # a quantized or LoRA model is refused before it is resized
        keras_hub.check_state(model)
    elif format == "tflite":  # a model quantized by Keras: the converter quantizes the float model itself
        tflite.check_state(model)
    if naflex_runtime.is_naflex(model):
        _check_naflex_options(model, format, image_size, batch_size)
        return _export_naflex(model, format, output, quantize=quantize, labels=labels, model_path=model_path,
                              eval_data=eval_data, num_images=num_images, dataset=dataset, max_patches=max_patches,
                              bars=verify.tolerance_for(format, quantize, max_abs_diff=max_abs_diff,
                                                        min_top1_agreement=min_top1_agreement),
                              name=name, version=version, top_k=top_k, report=report, progress=progress)
    if max_patches is not None:  # an image model would ignore it: refused before any work
        raise ValueError(f"max_patches (keras-vit export --max-patches) is a NaFlex model's budget of patches per "
                         f"image; model {model.name!r} is not a NaFlex model: it takes images of one size (image_size=, "
                         f"--image-size). Received: max_patches={max_patches!r}")
    model, shape = _at_size(model, format, image_size)
    if format == "keras-hub":
        return _export_keras_hub(model, output, labels, model_path, eval_data, shape, num_images, max_abs_diff, report)
    labels = common.resolve_labels(model, labels, model_path)  # None for an embedding: no classes to name
    bars = verify.tolerance_for(format, quantize, max_abs_diff=max_abs_diff, min_top1_agreement=min_top1_agreement)
    if common.is_embedding(model) and "max_abs_diff" not in bars:
        raise ValueError(
            f"Model {model.name!r} returns an embedding, not class scores: the top-1 agreement that verifies a "
            f"{format} {quantize} export says nothing of an embedding. Pass max_abs_diff= (--max-abs-diff) on the "
            "embedding's scale to verify it, before any work."
        )
    if format == "saved_model":  # fail before any work
        saved_model.version_path(output, name or model.name, version)
    calibration = None
    if int8:
        progress("reading the calibration images")
        calibration = data.calibration_images(representative_data, shape, num_images, dataset=dataset)
    progress("reading the verification images")
    images = data.eval_images(eval_data, shape, num_images, dataset=dataset)
    progress(f"running the Keras model on {len(images.pixels)} images")
    expected = common.keras_reference(model, images.pixels)

    if format == "saved_model":
        progress(f"writing and verifying the SavedModel on {len(images.pixels)} images")
        result = _export_saved_model(
            model, output, name=name, version=version, labels=labels, top_k=top_k, images=images.pixels,
            expected=expected, bars=bars, warmup=warmup, image_size=shape[:2],
        )
    elif format == "tflite":
        result = _export_tflite(
            model, output, quantize=quantize, labels=labels, calibration=calibration and calibration.pixels,
            images=images.pixels, expected=expected, bars=bars, batch_size=batch_size, float_ops=float_ops,
            progress=progress,
        )
    else:
        progress(f"converting to ONNX (opset {opset}) and verifying on {len(images.pixels)} images")
        result = _export_onnx(model, output, labels=labels, images=images.pixels, expected=expected, bars=bars, opset=opset)
    if labels is not None:
        result.details.setdefault("labels", list(labels))
    result.details["output"] = common.output_kind(model)  # what the export calls its output
    result.eval_images = images.describe()
    result.calibration_images = calibration.describe() if calibration is not None else None
    if report is not None:
        result.write_json(report)
    if not result.passed:
        raise ExportVerificationError(result, _state_hint(model, format))
    return result


def _export_naflex(model, format, output, *, labels, model_path, eval_data, num_images, dataset, report, progress,
                   **options):
    """A NaFlex model's export (:mod:`keras_vit.export.naflex`), verified on the eval images at three aspect ratios."""
    labels = common.resolve_labels(model, labels, model_path)
    progress("reading the verification images")
    shape = tuple(config_of(model).native_image_size) + (3,)
    images = data.eval_images(eval_data, shape, num_images, dataset=dataset)
    result = naflex.export(model, format, output, labels=labels, pixels=images.pixels, progress=progress, **options)
    if labels is not None:
        result.details.setdefault("labels", list(labels))
    result.details["output"] = common.output_kind(model)
    result.eval_images = images.describe()
    if report is not None:
        result.write_json(report)
    if not result.passed:
        raise ExportVerificationError(result)
    return result


def _check_naflex_options(model, format, image_size, batch_size):
    """Refuse the image model's options a NaFlex export would not read (before any work)."""
    if image_size is not None:
        raise ValueError(f"Model {model.name!r} is a NaFlex model: its exports take each image at its own size under a "
                         f"budget of patches (max_patches=, --max-patches), at no image size. Received: "
                         f"image_size={image_size!r}")
    if format == "tflite" and batch_size != 1:
        raise ValueError(f"A NaFlex model's TFLite file takes one image at a time (batch 1; its mask and coordinates "
                         f"are per image). Received: batch_size={batch_size!r}")


def _state_hint(model, format):
    """What a failed verification owes to a model Keras quantized (its runtime computes the int8 kernels otherwise:
    another rounding, not the bar's float agreement), or None for a float or LoRA model."""
    state = model_state(model)
    if not state.quantized_layers:
        return None
    return (f"The model is {state.describe()}: its {format} export computes Keras' integer kernels with other rounding "
            "than Keras, beyond the float export's tolerance. Export the float model instead (for TFLite with "
            "quantize='dynamic' or 'int8'), or pass a larger max_abs_diff if this difference is acceptable.")


def _export_keras_hub(model, output, labels, model_path, eval_data, shape, num_images, max_abs_diff, report):
    """A keras-hub preset folder: refused first if keras-hub's ViT cannot express the model, checked by reading it back."""
    keras_hub.check_expressible(model)
    config = config_of(model)
    if config.include_top:
        labels = common.resolve_labels(model, labels, model_path)
    if eval_data is not None:
        images = data.eval_images(eval_data, shape, num_images)
    else:  # the preset is read back by keras_vit: the same computation, whatever the pixels
        images = data.Images(keras_hub.random_images(shape, min(num_images, 8)), "random pixels (the preset, read "
                             "back by keras_vit, runs the same computation on any image)")
    return keras_hub.export(model, output, labels=labels, images=images.pixels, source=model_path or model.name,
                            max_abs_diff=max_abs_diff, report=report, images_source=images.describe())


def _at_size(model, format, image_size):
    """``(model, (H, W, C))``: the model to export, resized where needed, and the size of its images."""
    config = config_of(model)
    current = config.image_size
    size = None if image_size is None else positive_pair(image_size, "image_size")
    if current is None and format == "keras-hub" and size is None:  # refused with its reason by keras_hub.unsupported
        return model, tuple(config.native_image_size) + tuple(model.input_shape[-1:])
    if current is None:  # any size: fixed for TFLite and ONNX, the bytes signature's resize for TF Serving
        size = size or config.native_image_size
        if format != "saved_model":
            model = resize_model(model, size)
    elif size is not None and size != current:
        model = resize_model(model, size)
    return model, tuple(size or current) + tuple(model.input_shape[-1:])


def _export_saved_model(model, base, *, name, version, labels, top_k, images, expected, bars, warmup, image_size):
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    logits = common.output_kind(model) == "logits"  # served as probabilities; an embedding is served as it is
    if logits:
        expected = softmax(expected)
    holder = {}

    def reference(pixels):
        outputs = common.keras_reference(model, pixels)
        return softmax(outputs) if logits else outputs

    def check(tmp):
        loaded = tf.saved_model.load(tmp)
        actual = saved_model.run_signature(loaded, images)
        report = holder["report"] = verify.make_report(
            "saved_model", "float32", tmp, size_bytes=common.file_size(tmp), ops=saved_model.graph_ops(tmp),
            expected=expected, actual=actual, tolerance=bars, runtime="tensorflow",
        )
        # serving_bytes (what TF Serving's REST clients get) on the same images sent as files
        report.details["serving_bytes"] = verify.check_serving_bytes(
            lambda files: saved_model.run_bytes_signature(loaded, files), reference, images, image_size, bars
        )
        report.passed = report.passed and report.details["serving_bytes"]["passed"]
        if not holder["report"].passed:
            raise ExportVerificationError(holder["report"])

    return saved_model.export_verified(
        model, base, holder, name=name or model.name, version=version, labels=labels, top_k=top_k,
        warmup_images=images if warmup else None, check=check, image_size=image_size,
    )


def _silent(stage, done=None, total=None):
    """The default ``progress`` of :func:`export_model`: nothing shown."""


def _export_tflite(model, output, *, quantize, labels, calibration, images, expected, bars, batch_size, float_ops,
                   progress=_silent):
    tmp = temporary_path(output)
    attempts = [tuple(float_ops)] if float_ops != "auto" else [(), tflite.FRAGILE_OPS]
    if quantize != "int8":
        attempts = [()]
    result, failures = None, []
    try:
        for kept in attempts:
            kind = f"TFLite {quantize}" + (f", {', '.join(kept)} kept in float" if kept else "")
            progress(f"converting to {kind}" + (f" (calibrating on {len(calibration)} images)" if calibration is not None else ""))
            try:
                content = tflite.convert(
                    model, quantize, calibration, batch_size=batch_size, float_ops=kept,
                    on_calibration_image=(lambda done: progress("calibrating", done, len(calibration)))
                    if calibration is not None else None,
                )
            except ExportError as error:
                if kept == attempts[-1]:
                    raise
                failures.append(f"float_ops={list(kept)}: {error}")
                continue
            ops = tflite.flatbuffer_ops(content)
            tflite.check_builtin_only(ops)
            tflite.write(content, tmp, labels)
            progress(f"verifying on {len(images)} images in LiteRT")
            actual = tflite.run(tmp, images)
            result = verify.make_report(
                "tflite", quantize, output, size_bytes=common.file_size(tmp), ops=ops, expected=expected,
                actual=actual, tolerance=bars, runtime="ai_edge_litert",
                details={"batch_size": int(batch_size), "input": "images float32 (batch, H, W, 3) RGB [0, 255]",
                         "gpu_delegate": gpu_delegate.gpu_delegate_report(content).line()},
            )
            if quantize == "int8":
                result.details["float_ops"] = list(kept)
            if failures:
                result.details["earlier_attempts"] = list(failures)
            if result.passed:
                break
            failures.append(
                f"float_ops={list(kept)}: top1_agreement={result.top1_agreement:.4f}, max_abs_diff={result.max_abs_diff:.3g}"
            )
        if result.passed:
            os.replace(tmp, output)
            if labels is not None:  # an embedding has no classes
                atomic_write(tflite.label_file_path(output), lambda path: _write_lines(path, labels))
            elif os.path.isfile(tflite.label_file_path(output)):  # the classes of the file it replaced (overwrite)
                os.remove(tflite.label_file_path(output))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return result


def _export_onnx(model, output, *, labels, images, expected, bars, opset):
    tmp = temporary_path(output)
    try:
        proto = onnx.convert(model, opset)
        onnx.write(proto, tmp, labels)
        actual = onnx.run(tmp, images)  # raises ExportError if onnxruntime cannot load it
        result = verify.make_report(
            "onnx", "float32", output, size_bytes=common.file_size(tmp), ops=onnx.graph_ops(proto), expected=expected,
            actual=actual, tolerance=bars, runtime="onnxruntime",
            details={"opset": int(opset), "input": "images float32 (batch, H, W, 3) RGB [0, 255]"},
        )
        if result.passed:
            os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return result


def _write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines))
