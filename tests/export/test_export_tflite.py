"""TFLite: builtin ops only in every mode, tolerances vs Keras on real digits, int8 calibration, labels, and each
mode's file taken whole by LiteRT's GPU delegate (the other models' files: tests/export/test_gpu_delegate.py)."""

import json
import os

import numpy as np
import pytest

from export_helpers import LABELS, assert_taken_whole, decided_images, real_images, trained_model
from keras_vit.export import ExportVerificationError, export_model, tflite, verify

# the bar each mode is held to by these tests: the export's own defaults (verify.TOLERANCES), on decided images
BARS = {
    "float32": {"max_abs_diff": 1e-4},
    "float16": {"max_abs_diff": 1e-2},
    "dynamic": {"top1_agreement": 0.95},
    "int8": {"top1_agreement": 0.90},
}


@pytest.fixture(scope="module")
def model():
    return trained_model()


@pytest.fixture(scope="module")
def data(model):
    # held-out evaluation digits the model decides by a margin (export_helpers.DECIDED_MARGIN): where a quantized
    # file's top-1 class differs from Keras' there, the export is at fault, not the CPU's int8 rounding of a near-tie
    x = decided_images(model, real_images(1000)[0], 200)
    calibration, _ = real_images(100, offset=3000, split="train")  # calibration digits, not used in training
    return x, calibration


@pytest.fixture(scope="module")
def exported(model, data, tmp_path_factory):
    """``exported(mode, float_ops=())``: the model's .tflite file of that mode, exported and verified on ``data``
    once for the module (several tests read the same file; none writes to it)."""
    x, calibration = data
    folder = tmp_path_factory.mktemp("tflite")
    done = {}

    def export(mode, float_ops=()):
        key = (mode, tuple(float_ops))
        if key not in done:
            path = str(folder / f"model_{mode}{'_selective' if float_ops else ''}.tflite")
            done[key] = export_model(model, "tflite", path, quantize=mode, labels=LABELS, eval_data=x,
                                     representative_data=calibration, num_images=200, float_ops=float_ops)
        return done[key]

    return export


def _litert_ops(path):
    return {op["op_name"] for op in tflite.interpreter(path)._get_ops_details()}


@pytest.mark.parametrize("mode", ["float32", "float16", "dynamic", "int8"])
def test_modes_builtin_only_and_within_tolerance(model, data, exported, mode):
    x, _ = data
    report = exported(mode)
    path = report.path
    assert report.passed and path.endswith(f"model_{mode}.tflite") and report.size_bytes == os.path.getsize(path)
    # the op set, read from the flatbuffer and as the LiteRT interpreter sees it: builtins only
    assert report.ops == tflite.flatbuffer_ops(open(path, "rb").read())
    assert not [op for op in report.ops if op.startswith("Flex")]
    assert not [op for op in _litert_ops(path) if op.startswith("Flex")]
    assert "GELU" in report.ops  # exact GELU maps to the builtin
    # independent check through ai_edge_litert, batch 1
    it = tflite.interpreter(path)
    detail = it.get_input_details()[0]
    assert list(detail["shape"]) == [1, 32, 32, 3] and detail["dtype"] == np.float32
    actual = tflite.run(path, x)
    expected = np.asarray(model.predict(x, verbose=0))
    diff = np.abs(actual - expected).max()
    agreement = np.mean(actual.argmax(-1) == expected.argmax(-1))
    # the same file on the same images as the export's own check: the same floats, bar the order of the
    # interpreter's threaded sums (a few float32 ulp of probabilities <= 1)
    assert diff == pytest.approx(report.max_abs_diff, abs=1e-7)
    assert diff <= BARS[mode].get("max_abs_diff", np.inf)
    assert agreement >= BARS[mode].get("top1_agreement", 0.0)
    # labels travel with the file and beside it
    assert tflite.read_labels(path) == LABELS
    assert open(path[: -len(".tflite")] + ".labels.txt").read().split() == LABELS
    if mode == "int8":
        assert {"QUANTIZE", "DEQUANTIZE"} <= set(report.ops)
    sizes = {"float32": 1.0, "float16": 0.75, "dynamic": 0.6, "int8": 0.7}
    assert report.size_bytes < sizes[mode] * 2e5
    assert_taken_whole(report)  # LiteRT's GPU delegate takes every op of it


def test_selective_int8_keeps_fragile_ops_in_float(exported):
    full, kept = exported("int8"), exported("int8", tflite.FRAGILE_OPS)
    assert kept.details["float_ops"] == list(tflite.FRAGILE_OPS)

    def input_dtypes(path, op_name):
        it = tflite.interpreter(path)
        tensors = {t["index"]: t["dtype"] for t in it.get_tensor_details()}
        return {np.dtype(tensors[i]).name for op in it._get_ops_details() if op["op_name"] == op_name for i in op["inputs"] if i >= 0}

    assert input_dtypes(full.path, "SOFTMAX") == {"int8"}
    assert input_dtypes(kept.path, "SOFTMAX") == {"float32"}
    assert input_dtypes(kept.path, "GELU") == {"float32"}
    assert input_dtypes(kept.path, "FULLY_CONNECTED") >= {"int8"}  # the matmuls stay int8
    bar = BARS["int8"]["top1_agreement"]
    assert kept.top1_agreement >= bar and full.top1_agreement >= bar


def test_auto_falls_back_to_float_fragile_ops(model, data, tmp_path):
    x, calibration = data
    # a bar full int8 cannot meet on these digits forces the selective retry
    with pytest.raises(ExportVerificationError) as info:
        export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="int8", eval_data=x[:50],
                     representative_data=calibration, num_images=50, max_abs_diff=1e-6)
    report = info.value.report
    assert report.details["float_ops"] == list(tflite.FRAGILE_OPS)
    assert "float_ops=[]" in report.details["earlier_attempts"][0]
    assert not os.path.exists(tmp_path / "m.tflite") and os.listdir(tmp_path) == []


def test_wrong_shaped_representative_data(model, tmp_path):
    digits = np.zeros((10, 28, 28, 1), "float32")
    with pytest.raises(ValueError, match=r"representative_data.*\(32, 32, 3\).*\(10, 28, 28, 1\)"):
        export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="int8", representative_data=digits)
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(np.zeros((4, 32, 32, 1), "float32")).batch(2)
    with pytest.raises(ValueError, match=r"\(2, 32, 32, 1\)"):
        export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="int8", representative_data=dataset)
    assert os.listdir(tmp_path) == []


def test_unknown_float_op_name(model, tmp_path):
    with pytest.raises(ValueError, match=r"Received unknown: \['SOFTMAXX'\]"):
        export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="int8", float_ops=["SOFTMAXX"], num_images=4)
    assert os.listdir(tmp_path) == []


def test_representative_tf_data_with_labels(model, data, tmp_path):
    import tensorflow as tf

    x, calibration = data
    dataset = tf.data.Dataset.from_tensor_slices((calibration, np.zeros(len(calibration)))).batch(16)
    report = export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="int8", eval_data=x,
                          representative_data=dataset, num_images=64)
    assert report.passed and report.num_images == 64


def test_unsupported_quantize_mode(model, tmp_path):
    with pytest.raises(ValueError, match=r"expected one of \('float32', 'float16', 'dynamic', 'int8'\).*quantize='int4'"):
        export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="int4")
    with pytest.raises(ValueError, match=r"format='onnx'.*quantize='int8'"):
        export_model(model, "onnx", str(tmp_path / "m.onnx"), quantize="int8")


def test_failed_tolerance_writes_report_and_no_model(model, data, tmp_path, monkeypatch):
    x, _ = data
    report_path = tmp_path / "report.json"
    # a bar no export meets (an override must be in [0, 1]: keras_vit.domains, so the table itself)
    monkeypatch.setitem(verify.TOLERANCES, ("tflite", "dynamic"), {"top1_agreement": 1.01})
    with pytest.raises(ExportVerificationError, match="FAILED"):
        export_model(model, "tflite", str(tmp_path / "m.tflite"), quantize="dynamic", eval_data=x,
                     num_images=50, report=str(report_path))
    saved = json.loads(report_path.read_text())
    assert saved["passed"] is False and saved["quantize"] == "dynamic"
    assert sorted(os.listdir(tmp_path)) == ["report.json"]
