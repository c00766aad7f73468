"""Exported models: SavedModel, TFLite (each mode, XNNPACK) and ONNX Runtime.

Conversion uses :mod:`keras_vit.export` (the functions ``keras-vit export``
calls) and runs in its own subprocess (``build``); the timing subprocess
(``inference``) only loads the file, so its peak memory is the runtime's.
"""

import os
import time

import numpy as np

from benchmarks import common, tf_setup

TFLITE_MODES = {"tflite-float32": "float32", "tflite-float16": "float16", "tflite-dynamic": "dynamic", "tflite-int8": "int8"}
RUNTIMES = ("saved-model", *TFLITE_MODES, "onnxruntime")


def artifact_path(task):
    name = f"{task['model'].replace('/', '')}-{task['runtime']}-b{task['batch_size']}"
    return os.path.join(task["work_dir"], name)


def _size(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    return os.path.getsize(path)


def build(task):
    """Convert the model for ``task['runtime']`` into the work folder; record the file size."""
    tf_setup.tensorflow(task)
    model = tf_setup.build_model(task["model"])
    path = artifact_path(task)
    runtime = task["runtime"]
    start = time.perf_counter()
    if runtime == "saved-model":
        from keras_vit.export import saved_model

        labels = [f"class_{i}" for i in range(model.output_shape[-1])]
        path, _ = saved_model.export_saved_model(model, path, name="vit", version=1, labels=labels)
    elif runtime in TFLITE_MODES:
        from keras_vit.export import data, tflite

        calibration = None
        if TFLITE_MODES[runtime] == "int8":
            calibration = data.mnist_images(model.input_shape[1:], count=4 if task.get("quick") else 8)
        # keras_vit.export calibrates full int8 with single images, so that model keeps batch 1
        batch = 1 if TFLITE_MODES[runtime] == "int8" else int(task["batch_size"])
        content = tflite.convert(model, TFLITE_MODES[runtime], calibration, batch_size=batch)
        path += ".tflite"
        with open(path, "wb") as f:
            f.write(content)
    elif runtime == "onnxruntime":
        from keras_vit.export import onnx

        path += ".onnx"
        with open(path, "wb") as f:
            f.write(onnx.convert(model).SerializeToString())
    else:
        raise ValueError(f"Unknown export runtime: expected one of {RUNTIMES}. Received: runtime={runtime!r}")
    return common.make_record(task, status="built", path=path, size_bytes=_size(path), build_s=round(time.perf_counter() - start, 1))


def inference(task):
    """Images/s of the exported file in its runtime (threads pinned like TensorFlow's)."""
    threads = int(task.get("threads", 2))
    batch = int(task["batch_size"])
    path = task["path"]
    runtime = task["runtime"]
    shape = tuple(task["image_shape"])
    x = np.random.default_rng(0).uniform(0, 255, (batch, *shape)).astype("float32")
    if runtime == "saved-model":
        tf = tf_setup.tensorflow(task)
        from keras_vit.export.saved_model import PIXELS_INPUT, SERVING_SIGNATURE

        fn = tf.saved_model.load(path).signatures[SERVING_SIGNATURE]
        xt = tf.constant(x)

        def step():
            np.asarray(fn(**{PIXELS_INPUT: xt})["probabilities"])
    elif runtime in TFLITE_MODES:
        from keras_vit.export import tflite

        it = tflite.interpreter(path, num_threads=threads)
        detail = it.get_input_details()[0]
        if detail["dtype"] != np.float32:
            scale, zero = detail["quantization"]
            x = np.clip(np.round(x / scale + zero), -128, 127).astype(detail["dtype"])
        out = it.get_output_details()[0]["index"]
        model_batch = int(detail["shape"][0])
        chunks = [x[i : i + model_batch] for i in range(0, batch, model_batch)]  # a batch-1 model: one call per image

        def step():
            for chunk in chunks:
                it.set_tensor(detail["index"], chunk)
                it.invoke()
                it.get_tensor(out)
    elif runtime == "onnxruntime":
        from keras_vit.export import onnx

        session = onnx.session(path, num_threads=threads)
        name = session.get_inputs()[0].name

        def step():
            session.run(None, {name: x})
    else:
        raise ValueError(f"Unknown export runtime: expected one of {RUNTIMES}. Received: runtime={runtime!r}")
    return common.measure(task, step, size_bytes=task.get("size_bytes"))
