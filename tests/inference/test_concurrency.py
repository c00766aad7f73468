"""Every predictor type under threads: 4 threads x 50 calls, 0 errors, the sequential results.

``keras_vit.predict`` reads ``.keras``, SavedModel and ``.tflite`` models
(:data:`keras_vit.inference.runtimes.FORMATS`); ONNX files are exported and
verified in onnxruntime but not read by ``predict``, so they are not here.
"""

import concurrent.futures
import threading

import numpy as np
import pytest

import keras
from helpers import images, tiny_vit

from keras_vit import saving
from keras_vit.export import onnx, saved_model, tflite
from keras_vit.inference import predictors, runtimes

THREADS, CALLS = 4, 50
LABELS = ["ant", "bee", "cat", "dog", "eel"]


@pytest.fixture(scope="module")
def model_paths(tmp_path_factory):
    keras.utils.set_random_seed(0)
    model = tiny_vit(num_classes=len(LABELS))
    head = model.get_layer("head")  # a random head: every image gets its own scores
    head.kernel.assign(np.random.default_rng(0).normal(0, 1.0, head.kernel.shape).astype("float32"))
    folder = tmp_path_factory.mktemp("models")
    keras_path = str(folder / "vit.keras")
    saving.save_model(model, keras_path, metadata={"class_names": LABELS})
    saved_path, _ = saved_model.export_saved_model(model, str(folder), name="vit", labels=LABELS)
    tflite_path = str(folder / "vit.tflite")
    tflite.write(tflite.convert(model), tflite_path, LABELS)
    onnx_path = str(folder / "vit.onnx")
    onnx.write(onnx.convert(model), onnx_path, LABELS)
    assert set(runtimes.FORMATS) == {"keras", "saved_model", "tflite", "onnx"}  # a new format needs a case here
    return {"keras": keras_path, "saved_model": saved_path, "tflite": tflite_path, "onnx": onnx_path}


@pytest.mark.parametrize("kind", ["keras", "saved_model", "tflite", "onnx"])
def test_threads_get_the_sequential_results(model_paths, kind):
    predictor = predictors.load_predictor(model_paths[kind])
    assert predictor.format == kind
    batches = [images(batch=1 + i % 3, seed=i) for i in range(CALLS)]  # 1 to 3 images: varied batch sizes
    expected = [predictor(batch) for batch in batches]
    assert len({tuple(np.round(e[0], 4)) for e in expected}) > CALLS // 2  # the images are told apart
    start = threading.Barrier(THREADS)

    def worker(offset):
        start.wait()  # all threads call at once
        results = []
        for j in range(CALLS):
            i = (j + offset * 13) % CALLS  # each thread in its own order
            results.append((i, predictor(batches[i])))
        return results

    errors, mismatches = [], []
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(worker, t) for t in range(THREADS)]
        for future in futures:
            try:
                for i, got in future.result():
                    # the same runtime on the same input: equal up to float reordering between threads
                    if got.shape != expected[i].shape or not np.allclose(got, expected[i], rtol=0, atol=1e-6):
                        mismatches.append(i)
            except Exception as error:  # noqa: BLE001 - every failure is counted, not just the first
                errors.append(repr(error))
    assert errors == [] and mismatches == [], (kind, errors[:3], mismatches[:10])
