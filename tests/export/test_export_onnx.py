"""ONNX: exact GELU's Erfc converted, loaded and run in onnxruntime within RUNTIME_ATOL of Keras."""

import os

import numpy as np
import pytest

from export_helpers import LABELS, decided_images, real_images, trained_model
from keras_vit.export import ExportError, export_model, onnx

# the export's own bar (keras_vit.export.verify.TOLERANCES): onnxruntime's float32 kernels sum in another order
RUNTIME_ATOL = 1e-4


@pytest.fixture(scope="module")
def model():
    return trained_model()


def test_onnx_runs_in_onnxruntime_within_runtime_atol(model, tmp_path):
    import onnx as onnx_lib
    import onnxruntime as ort

    x = decided_images(model, real_images(1000)[0], 100)  # decided by a margin: the top-1 classes are the export's to keep
    path = str(tmp_path / "model.onnx")
    report = export_model(model, "onnx", path, labels=LABELS, eval_data=x, num_images=100)
    assert report.passed and report.runtime == "onnxruntime" and report.size_bytes == os.path.getsize(path)
    assert "Erf" in report.ops and "Erfc" not in report.ops
    proto = onnx_lib.load(path)
    onnx_lib.checker.check_model(proto)
    assert {p.key: p.value for p in proto.metadata_props}["labels"].split("\n") == LABELS
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == "images" and inp.shape[1:] == [32, 32, 3] and inp.type == "tensor(float)"
    assert [o.name for o in session.get_outputs()] == ["probabilities"]
    # dynamic batch; independent comparison with Keras
    actual = session.run(None, {"images": x[:7]})[0]
    np.testing.assert_allclose(actual, np.asarray(model(x[:7])), atol=RUNTIME_ATOL, rtol=0)
    # a count ratio (argmax ids): exact, on digits decided far beyond RUNTIME_ATOL
    assert report.max_abs_diff <= RUNTIME_ATOL and report.top1_agreement == 1.0


def test_erfc_is_rewritten_exactly():
    """tf2onnx alone leaves Erfc (unloadable); the handler's Sub(1, Erf) matches tf.math.erfc."""
    import onnxruntime as ort
    import tensorflow as tf
    import tf2onnx

    spec = [tf.TensorSpec((None,), tf.float32, name="x")]
    fn = tf.function(lambda x: tf.math.erfc(x), input_signature=spec)
    x = np.linspace(-4, 4, 101).astype("float32")
    plain, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
    with pytest.raises(ExportError, match="onnxruntime cannot load"):
        onnx.session(plain.SerializeToString())
    fixed, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17, custom_op_handlers=onnx.CUSTOM_OP_HANDLERS)
    out = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(out, tf.math.erfc(x).numpy(), atol=1e-6)  # erfc <= 2 in float32: a few ulp
