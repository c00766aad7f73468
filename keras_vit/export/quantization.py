"""Size, latency and agreement of every TFLite mode and ONNX, as one table.

:func:`quantization_report` exports a trained model in each mode (into a
work folder), verifies it on real images, times single-image latency in its
runtime, and returns one row per export; :func:`format_table` prints it.
The latency helpers (:func:`keras_latency`, :func:`tflite_latency`,
:func:`onnx_latency`, :func:`saved_model_latency`) are public so
``benchmarks/`` can time large models the same way.
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from keras_vit import saving
from keras_vit.domains import check_arguments
from keras_vit.export.options import REPORT_DOMAINS
from keras_vit.export import common, data, onnx, saved_model, tflite, verify
from keras_vit.export.orchestration import export_model
from keras_vit.inference import tflite_files


def _time(fn, runs, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def keras_latency(model, images, runs=20):
    """Median ms of one ``model(images)`` call in a ``tf.function`` (TF's thread settings apply)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    fn = tf.function(lambda x: model(x, training=False))
    x = tf.constant(np.asarray(images, "float32"))
    return _time(lambda: fn(x).numpy(), runs)


def saved_model_latency(path, images, runs=20):
    """Median ms of one ``serving_default`` call on ``images``."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    fn = tf.saved_model.load(os.fspath(path)).signatures[saved_model.SERVING_SIGNATURE]
    x = tf.constant(np.asarray(images, "float32"))
    return _time(lambda: fn(**{saved_model.PIXELS_INPUT: x})["probabilities"].numpy(), runs)


def tflite_latency(path, image, num_threads=2, *, runs=20):
    """Median ms of one ``invoke`` in ``ai_edge_litert`` (XNNPACK, ``num_threads``)."""
    it = tflite_files.tflite_interpreter(path, num_threads=num_threads)
    detail = tflite_files.tflite_input(it)
    batch = int(detail["shape"][0])
    x = np.repeat(np.asarray(image, "float32").reshape((1,) + tuple(detail["shape"][1:])), batch, axis=0)
    it.set_tensor(detail["index"], tflite_files.quantize(x, detail))
    return _time(it.invoke, runs)


def onnx_latency(path, images, num_threads=2, *, runs=20):
    """Median ms of one onnxruntime ``run`` on ``images`` (``num_threads`` intra-op threads)."""
    sess = onnx.session(os.fspath(path), num_threads)
    name = sess.get_inputs()[0].name
    x = np.asarray(images, "float32")
    return _time(lambda: sess.run(None, {name: x}), runs)




def quantization_report(
    model,
    eval_data=None,
    eval_labels=None,
    *,
    representative_data=None,
    num_images=100,
    modes=("float32", "float16", "dynamic", "int8"),
    selective_int8=True,
    include_onnx=True,
    include_saved_model=False,
    num_threads=2,
    runs=20,
    throughput_batch=0,
    workdir=None,
    labels=None,
):
    """One row per export: size, latency, throughput, agreement with Keras, accuracy.

    Args:
        model: a ``keras.Model`` or a ``.keras`` path (a trained classifier).
        eval_data: real images (any form :func:`~keras_vit.export.as_images`
            takes); default the held-out images of the data the ``.keras`` file records it
            was trained on (the MNIST subset with its labels), else MNIST digits, unlabelled.
        eval_labels: true classes of ``eval_data`` for an accuracy column.
        representative_data: int8 calibration images; default the training images of
            the dataset the model records (:func:`~keras_vit.export.data.calibration_images`:
            without either, the int8 rows are refused).
        num_images: images to verify and calibrate on.
        modes: TFLite modes to include (``int8`` is strict full int8).
        selective_int8: add an ``int8-selective`` row (int8 with
            :data:`~keras_vit.export.tflite.FRAGILE_OPS` kept in float).
        include_onnx: add an ONNX row.
        include_saved_model: add a SavedModel row (``serving_default``).
        num_threads: threads for LiteRT and onnxruntime (TensorFlow's are
            fixed when the process starts).
        runs: timed runs per latency (median reported).
        throughput_batch: if > 0, also time a batch of this many images
            (Keras, SavedModel, ONNX; TFLite runs batch 1, so its throughput
            is ``1000 / latency_ms``) and report images per second.
        workdir: where the exports go, kept (files of an earlier report there are
            replaced); default a temporary folder, removed when the report is made,
            and every row's ``path`` None.
        labels: class names.

    Returns:
        A list of dicts with ``format, quantize, path, size_bytes, latency_ms,
        throughput_ips, max_abs_diff, top1_agreement, accuracy, passed``
        (``passed`` against the default bars of
        :data:`~keras_vit.export.TOLERANCES`; exports are kept even when they
        miss them, so they can be timed). A model that returns an embedding has no
        ``top1_agreement`` or ``accuracy`` (None) and ``passed`` None where the bar is a
        top-1 agreement; ``accuracy`` is measured only against ``eval_labels`` or, for a
        model trained on the MNIST subset, the digits' labels.
    """
    check_arguments(REPORT_DOMAINS, num_images=num_images, num_threads=num_threads, runs=runs, throughput_batch=throughput_batch)
    dataset = data.recorded_dataset(model)
    int8 = "int8" in modes or selective_int8
    if int8 and representative_data is None and data.dataset_kind(dataset) is None:
        data.calibration_images(None, (1, 1, 3), 1, dataset=dataset)  # refused, naming the argument, before any work
    model = saving.load_model(model)
    shape = common.image_shape(model)
    if int8:
        representative_data = data.calibration_images(representative_data, shape, num_images, dataset=dataset).pixels
    embedding = common.is_embedding(model)  # no classes: judged by max|diff| alone, no top-1, no accuracy
    if eval_data is None and data.dataset_kind(dataset) == "mnist" and not embedding:  # the digits are its classes
        images, eval_labels = data.mnist_images(shape, num_images, split="test", with_labels=True)
    elif eval_data is None:  # its own folder's test images, else MNIST digits: no accuracy on classes it has not
        images = data.eval_images(None, shape, num_images, dataset=dataset).pixels
    else:
        images = data.as_images(eval_data, shape, num_images, what="eval_data")
    eval_labels = None if eval_labels is None or embedding else np.asarray(eval_labels)[: len(images)]
    temporary = not workdir  # the default folder (None, "") is removed when the report is made: its rows carry no path
    workdir = tempfile.mkdtemp(prefix="keras_vit_quant_") if temporary else workdir
    os.makedirs(workdir, exist_ok=True)
    try:
        expected = common.keras_reference(model, images)
        batch = np.resize(images, (throughput_batch,) + images.shape[1:]) if throughput_batch else None

        def accuracy(outputs):
            return None if eval_labels is None else float(np.mean(np.asarray(outputs).argmax(-1) == eval_labels))

        def throughput(latency_fn):
            return None if batch is None else len(batch) * 1e3 / latency_fn(batch)

        rows = [{
            "format": "keras", "quantize": "float32", "path": None,
            "size_bytes": int(sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.weights)),
            "latency_ms": keras_latency(model, images[:1], runs),
            "throughput_ips": throughput(lambda x: keras_latency(model, x, max(3, runs // 4))),
            "max_abs_diff": 0.0, "top1_agreement": None if embedding else 1.0, "accuracy": accuracy(expected), "passed": True,
        }]
        jobs = [("tflite", mode, ()) for mode in modes]
        if selective_int8:
            jobs.append(("tflite", "int8-selective", tflite.FRAGILE_OPS))
        if include_onnx:
            jobs.append(("onnx", "float32", ()))
        if include_saved_model:
            jobs.append(("saved_model", "float32", ()))
        for fmt, label, float_ops in jobs:
            mode = "int8" if label == "int8-selective" else label
            path = os.path.join(workdir, f"{model.name}_{label}.{fmt}") if fmt != "saved_model" else workdir
            report = export_model(
                model, fmt, path, quantize=mode, labels=labels, eval_data=images,
                representative_data=representative_data, num_images=num_images, name=f"{model.name}_saved_model",
                # no bar here (the rows are judged against TOLERANCES below): the largest finite tolerance, a float's maximum
                max_abs_diff=sys.float_info.max, min_top1_agreement=0.0, float_ops=float_ops, warmup=False,
                overwrite=True,  # the report's own files, named by it
            )
            bars = verify.TOLERANCES[(fmt, mode)]
            if fmt == "tflite":
                latency = tflite_latency(report.path, images[0], num_threads, runs=runs)
                ips = None if batch is None else 1e3 / latency
            elif fmt == "onnx":
                latency = onnx_latency(report.path, images[:1], num_threads, runs=runs)
                ips = throughput(lambda x: onnx_latency(report.path, x, num_threads, runs=max(3, runs // 4)))
            else:
                latency = saved_model_latency(report.path, images[:1], runs)
                ips = throughput(lambda x: saved_model_latency(report.path, x, max(3, runs // 4)))
            rows.append({
                "format": fmt, "quantize": label, "path": report.path, "size_bytes": report.size_bytes,
                "latency_ms": latency, "throughput_ips": ips, "max_abs_diff": report.max_abs_diff,
                "top1_agreement": None if embedding else report.top1_agreement, "accuracy": accuracy(report.outputs),
                "passed": _passed(bars, report, embedding),
            })
    finally:
        if temporary:
            shutil.rmtree(workdir, ignore_errors=True)
    if temporary:
        for row in rows:
            row["path"] = None
    return rows


def _passed(bars, report, embedding):
    """Whether a row meets its default bars; None for an embedding where the bar is a top-1 agreement only (dynamic,
    int8): no default bar on an embedding's scale (``export_model`` asks for ``max_abs_diff=`` there)."""
    if embedding and "max_abs_diff" not in bars:
        return None
    if embedding:
        return report.max_abs_diff <= bars["max_abs_diff"]
    return report.max_abs_diff <= bars.get("max_abs_diff", float("inf")) and report.top1_agreement >= bars.get("top1_agreement", 0.0)


def format_table(rows):
    """The rows of :func:`quantization_report` as a fixed-width text table."""
    header = (f"{'format':11} {'quantize':14} {'size MB':>9} {'latency ms':>11} {'img/s':>8} {'max|diff|':>10} "
              f"{'top-1 agree':>12} {'accuracy':>9}  bar")
    lines = [header, "-" * len(header)]
    for r in rows:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.2%}"
        top1 = "-" if r["top1_agreement"] is None else f"{r['top1_agreement']:.2%}"
        bar = {True: "ok", False: "MISSED", None: "-"}[r["passed"]]
        ips = "-" if r.get("throughput_ips") is None else f"{r['throughput_ips']:.1f}"
        lines.append(
            f"{r['format']:11} {r['quantize']:14} {r['size_bytes'] / 1e6:>9.3f} {r['latency_ms']:>11.3f} {ips:>8} "
            f"{r['max_abs_diff']:>10.3g} {top1:>12} {acc:>9}  {bar}"
        )
    return "\n".join(lines)
