"""Exports of a model that returns an embedding name the output ``embedding``: no softmax, no labels, no top-k.

A classifier's exports keep their names (SavedModel ``probabilities`` and ``top_k_*``, ONNX ``probabilities`` or
``logits``); its TFLite output tensor, ``Identity`` before, is named ``probabilities`` like the others.
"""

import json
import os
import zipfile

import numpy as np
import pytest

from helpers import clip_like_vit, images, tiny_vit
from keras_vit import predict
from keras_vit.export import export_model, saved_model
from keras_vit.inference import tflite_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

@pytest.fixture(scope="module")
def clip_like():
    return clip_like_vit()


def _output_names(path):
    return [d["name"] for d in tflite_files.tflite_interpreter(path).get_output_details()]


def test_tflite_embedding_is_named_and_unlabelled(clip_like, tmp_path):
    x = np.round(images(4, 32, seed=1))  # whole pixels: the PNG that predict reads holds the same
    path = tmp_path / "clip_like.tflite"
    path.write_bytes(b"a classifier's export")  # replaced (overwrite), with the label file beside it, which went stale
    (tmp_path / "clip_like.labels.txt").write_text("cat\ndog\n")
    report = export_model(clip_like, "tflite", str(path), eval_data=x, num_images=4, overwrite=True)
    assert report.passed and report.details["output"] == "embedding" and "labels" not in report.details
    assert _output_names(path) == ["embedding"]
    assert not zipfile.is_zipfile(path)  # no class names zipped on
    assert not os.path.exists(tmp_path / "clip_like.labels.txt")
    assert "argmax agree" in report.summary() and "top-1 agree" not in report.summary()
    expected = np.asarray(clip_like.predict(x, verbose=0))
    np.testing.assert_allclose(tflite_files.run_tflite(tflite_files.tflite_interpreter(path), x), expected, atol=1e-4)
    folder = tmp_path / "images"
    folder.mkdir()
    from PIL import Image

    Image.fromarray(x[0].round().astype("uint8")).save(folder / "a.png")
    (result,) = predict(str(path), [str(folder)])
    assert "predictions" not in result
    # the same whole pixels through the same float32 file: TFLite's own bar against Keras (measured 2e-6)
    np.testing.assert_allclose(result["embedding"], expected[0], atol=1e-4)


def test_tflite_classifier_output_is_named_probabilities(tmp_path):
    path = tmp_path / "vit.tflite"
    report = export_model(tiny_vit(num_classes=3), "tflite", str(path), eval_data=images(4, 32), num_images=4)
    assert report.passed and report.details["output"] == "probabilities"
    assert _output_names(path) == ["probabilities"]
    assert "labels.txt" in zipfile.ZipFile(path).namelist()


@pytest.mark.parametrize("quantize", ["dynamic", "int8"])
def test_quantized_embedding_needs_a_bar_on_its_scale(clip_like, tmp_path, quantize):
    """A top-1 agreement says nothing of an embedding: refused before any work, naming the way out."""
    with pytest.raises(ValueError, match=r"returns an embedding, not class scores.*Pass max_abs_diff="):
        export_model(clip_like, "tflite", str(tmp_path / "q.tflite"), quantize=quantize, representative_data=images(2, 32))
    assert os.listdir(tmp_path) == []


def test_labels_for_an_embedding_export_are_refused(clip_like, tmp_path):
    with pytest.raises(ValueError, match=r"returns a 8-value embedding .*no classes to label"):
        export_model(clip_like, "tflite", str(tmp_path / "e.tflite"), labels=[str(i) for i in range(8)])


def test_saved_model_metadata_records_the_output(clip_like, tmp_path):
    saved_model.write_metadata(str(tmp_path), clip_like)
    with open(tmp_path / saved_model.METADATA_FILE) as f:
        assert json.load(f)["output"] == "embedding"


@pytest.mark.slow
def test_saved_model_serves_the_embedding_only(clip_like, tmp_path):
    import tensorflow as tf

    x = images(4, 32, seed=2)
    report = export_model(clip_like, "saved_model", str(tmp_path), eval_data=x, num_images=4, warmup=False)
    assert report.passed and report.details["output"] == "embedding"
    loaded = tf.saved_model.load(report.path)
    expected = np.asarray(clip_like.predict(x, verbose=0))
    for signature in (saved_model.SERVING_SIGNATURE, saved_model.BYTES_SIGNATURE):
        assert sorted(loaded.signatures[signature].structured_outputs) == ["embedding"]
    out = loaded.signatures[saved_model.SERVING_SIGNATURE](images=tf.constant(x))["embedding"].numpy()
    np.testing.assert_allclose(out, expected, atol=1e-5)  # not softmax(embedding)
    assert not os.path.exists(os.path.join(report.path, "assets", "labels.txt"))
    from keras_vit.inference.predictors import load_predictor

    predictor = load_predictor(report.path)
    assert predictor.embedding and predictor.class_names is None
    np.testing.assert_allclose(predictor(x), expected, atol=1e-5)
    # as TF Serving answers one output (REST: unnamed values), and the kit's clients print it (they raised KeyError
    # 'top_k_labels' and a DType TypeError)
    import importlib.util

    from keras_vit.export import rest

    status, answer = rest.predict(loaded, {"instances": x[:2].tolist()})
    assert status == 200 and np.asarray(answer["predictions"]).shape == (2, expected.shape[1])
    np.testing.assert_allclose(answer["predictions"], expected[:2], atol=1e-5)
    clients = {}
    for name in ("rest_client", "grpc_client"):
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "export", f"{name}.py"))
        clients[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(clients[name])
    line = clients["rest_client"].describe(answer["predictions"][0])
    assert line.startswith(f"embedding of {expected.shape[1]}: {expected[0][0]:.4f}")
    proto = {"embedding": tf.make_tensor_proto(expected[:2])}
    assert clients["grpc_client"].describe(proto)[1].startswith(f"embedding of {expected.shape[1]}: {expected[1][0]:.4f}")


@pytest.mark.slow
def test_onnx_embedding_is_named(clip_like, tmp_path):
    import onnx

    path = tmp_path / "clip_like.onnx"
    report = export_model(clip_like, "onnx", str(path), eval_data=images(4, 32), num_images=4)
    proto = onnx.load(str(path))
    assert report.passed and [o.name for o in proto.graph.output] == ["embedding"]
    assert "labels" not in {p.key for p in proto.metadata_props}
