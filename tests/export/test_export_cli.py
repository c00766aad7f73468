"""`keras-vit export` and `keras-vit quantization-report` on a trained .keras file; bad input."""

import json
import os
import re
import time

import pytest

from export_helpers import trained_model_path
from keras_vit import cli

# the exports' own float32 bars (keras_vit.export.verify.TOLERANCES): a SavedModel runs Keras' graph (round-off
# only); TFLite (XNNPACK) and onnxruntime run other float32 kernels, which sum in another order
ROUND_OFF = 1e-5
RUNTIME_ATOL = 1e-4


@pytest.fixture(scope="module")
def model_path():
    return trained_model_path()


@pytest.fixture(scope="module")
def decided_folder(tmp_path_factory):
    """40 held-out digits the model decides by a margin (export_helpers.DECIDED_MARGIN), as PNG files: the top-1
    agreement bar of a quantized export (0.95 for dynamic) then judges the export, not how another CPU's int8
    kernels round a near-tie (issue 32)."""
    import tensorflow as tf

    from export_helpers import decided_images, real_images, trained_model

    folder = tmp_path_factory.mktemp("decided")
    for i, image in enumerate(decided_images(trained_model(), real_images()[0], 40)):
        (folder / f"{i:02d}.png").write_bytes(tf.io.encode_png(tf.cast(tf.round(image), tf.uint8)).numpy())
    return str(folder)


def test_export_tflite_writes_json_report(model_path, decided_folder, tmp_path, capsys):
    out, report = tmp_path / "m.tflite", tmp_path / "report.json"
    code = cli.main(["export", model_path, "--format", "tflite", "--quantize", "dynamic", "--output", str(out),
                     "--report", str(report), "--num-images", "40", "--eval-data", decided_folder])
    assert code == 0
    saved = json.loads(report.read_text())
    assert {"format", "quantize", "path", "size_bytes", "max_abs_diff", "top1_agreement", "ops"} <= set(saved)
    assert (saved["format"], saved["quantize"], saved["path"]) == ("tflite", "dynamic", str(out))
    assert saved["size_bytes"] == os.path.getsize(out) and saved["num_images"] == 40
    assert "FULLY_CONNECTED" in saved["ops"] and not any(op.startswith("Flex") for op in saved["ops"])
    out = capsys.readouterr().out
    assert "PASSED" in out
    assert re.search(r"^  GPU delegate: all \d+ ops$", out, re.M), out  # LiteRT's GPU delegate takes it whole
    assert saved["details"]["gpu_delegate"].startswith("GPU delegate: all ")


def test_export_saved_model_twice_refuses_the_version(model_path, tmp_path, capsys):
    """A version folder already there (a first export: tests/export/test_export_saved_model.py writes real ones) is
    refused before any work, and left as it was."""
    (tmp_path / "vit" / "7").mkdir(parents=True)
    (tmp_path / "vit" / "7" / "saved_model.pb").write_bytes(b"the first export")
    args = ["export", model_path, "--format", "saved_model", "--output", str(tmp_path), "--name", "vit",
            "--version", "7", "--num-images", "8", "--no-warmup"]
    started = time.monotonic()
    assert cli.main(args) == 2
    assert "already exists" in capsys.readouterr().err
    assert time.monotonic() - started < 5, "the existing version must be refused before the export's work"
    assert sorted(os.listdir(tmp_path / "vit")) == ["7"]
    assert (tmp_path / "vit" / "7" / "saved_model.pb").read_bytes() == b"the first export"


def test_unreadable_model_file(tmp_path, capsys):
    bad = tmp_path / "broken.keras"
    bad.write_bytes(b"not a zip archive")
    assert cli.main(["export", str(bad), "--format", "onnx", "--output", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert "Corrupt model file" in err and "broken.keras" in err and "not found" not in err
    assert cli.main(["export", str(tmp_path / "missing.keras"), "--format", "onnx", "--output", "x.onnx"]) == 2
    assert "Model file not found" in capsys.readouterr().err


def test_an_export_to_another_formats_extension_is_refused_before_any_work(model_path, tmp_path, capsys):
    """A TFLite file named x.onnx used to pass verification and then fail in keras-vit predict (onnxruntime)."""
    output = tmp_path / "x.onnx"
    assert cli.main(["export", model_path, "--format", "tflite", "--output", str(output)]) == 2
    assert re.search(r"A tflite export's output \(predict and load_predictor tell its runtime by the extension\) must "
                     r"name a \.tflite file\. Received: '.*x\.onnx'", capsys.readouterr().err)
    assert not output.exists() and os.listdir(tmp_path) == []


def test_save_model_refuses_a_path_that_is_not_a_keras_file(tmp_path):
    """'.h5' wrote legacy HDF5 with a zip appended, which nothing loads; a path without '.keras' was refused by Keras
    under the temporary's hidden name."""
    import keras_vit
    from helpers import tiny_vit

    model = tiny_vit()
    for name in ("model.h5", "model", "model.KERAS"):
        with pytest.raises(ValueError, match=rf"save_model's path must name a \.keras file\. Received: '.*{re.escape(name)}'"):
            keras_vit.save_model(model, str(tmp_path / name))
    assert os.listdir(tmp_path) == []


def test_unsupported_quantize_mode_is_rejected(model_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["export", model_path, "--format", "tflite", "--quantize", "int4", "--output", "m.tflite"])
    assert info.value.code == 2
    assert "invalid choice: 'int4'" in capsys.readouterr().err


# the SavedModel row (~20 s of export and serving) in test-slow; every TFLite precision and ONNX in the fast suite
@pytest.mark.parametrize("saved_model", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_quantization_report_table(model_path, tmp_path, capsys, saved_model):
    out = tmp_path / "rows.json"
    code = cli.main(["quantization-report", model_path, "--num-images", "30", "--runs", "3", "--json", str(out),
                     "--throughput-batch", "4", "--workdir", str(tmp_path / "work")] + (["--saved-model"] if saved_model else []))
    assert code == 0
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [(r["format"], r["quantize"]) for r in rows] == [
        ("keras", "float32"), ("tflite", "float32"), ("tflite", "float16"), ("tflite", "dynamic"),
        ("tflite", "int8"), ("tflite", "int8-selective"), ("onnx", "float32")] + [("saved_model", "float32")] * saved_model
    for row in rows:
        assert row["latency_ms"] > 0 and row["throughput_ips"] > 0 and row["size_bytes"] > 0
        assert 0 <= row["accuracy"] <= 1
        assert f"{row['format']:11} {row['quantize']:14}" in table
    sizes = {r["quantize"]: r["size_bytes"] for r in rows if r["format"] == "tflite"}
    assert sizes["dynamic"] < sizes["float16"] < sizes["float32"]
    onnx = next(r for r in rows if r["format"] == "onnx")
    assert rows[1]["max_abs_diff"] <= RUNTIME_ATOL and onnx["max_abs_diff"] <= RUNTIME_ATOL
    if saved_model:
        assert rows[-1]["max_abs_diff"] <= ROUND_OFF


def test_quantization_report_judges_no_accuracy_or_top1_it_cannot_measure(tmp_path):
    """A classifier that records no dataset got an accuracy measured against MNIST digit labels (5 % for a 3-class
    model); an embedding got a top-1 agreement of its argmax and 'ok' against the classifiers' bars."""
    from helpers import images, tiny_vit
    from keras_vit.export.quantization import format_table, quantization_report

    for model, embedding in ((tiny_vit(num_classes=3), False), (tiny_vit(include_top=False), True)):
        pixels = images(6) if embedding else None  # None: MNIST digits, not the 3-class model's classes
        rows = quantization_report(model, eval_data=pixels, num_images=6, modes=("float32", "dynamic"), runs=1,
                                   selective_int8=False, include_onnx=False, workdir=str(tmp_path / str(embedding)))
        assert [r["accuracy"] for r in rows] == [None] * 3  # no labels of the model's classes: no accuracy
        if embedding:
            assert [r["top1_agreement"] for r in rows] == [None] * 3
            assert [r["passed"] for r in rows] == [True, rows[1]["max_abs_diff"] <= 1e-4, None]  # dynamic: no bar
            assert format_table(rows).splitlines()[-1].endswith(" -  -")
        else:
            assert all(0 <= r["top1_agreement"] <= 1 for r in rows)


def test_quantization_report_removes_its_default_folder(tmp_path, monkeypatch):
    """Without `workdir` every export was left in a `keras_vit_quant_*` folder of the temporary directory (a B/16
    report: about a gigabyte a run); the default folder is removed and the rows carry no path to it."""
    import tempfile

    from helpers import images, tiny_vit
    from keras_vit.export.quantization import quantization_report

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    model = tiny_vit(num_classes=3)
    rows = quantization_report(model, eval_data=images(4), num_images=4, modes=("float32",), runs=1,
                               selective_int8=False, include_onnx=False)
    # only the report's folder: TensorFlow's AutoGraph writes its own files there when it first traces in a process
    assert [r["path"] for r in rows] == [None, None]
    assert not [name for name in os.listdir(tmp_path) if name.startswith("keras_vit_quant_")]
    kept = tmp_path / "kept"
    rows = quantization_report(model, eval_data=images(4), num_images=4, modes=("float32",), runs=1,
                               selective_int8=False, include_onnx=False, workdir=str(kept))
    assert os.path.isfile(rows[1]["path"]) and os.path.dirname(rows[1]["path"]) == str(kept)


def test_class_names_saved_by_training_travel_with_the_export(tmp_path):
    """A model saved by keras_vit.saving.save_model (as `keras-vit train` does) keeps its class names."""
    from keras_vit import saving
    from export_helpers import trained_model
    from keras_vit.export import tflite

    names = [f"digit {i}" for i in range(10)]
    path = str(tmp_path / "model.keras")
    saving.save_model(trained_model(), path, metadata={"class_names": names})
    out = tmp_path / "m.tflite"
    assert cli.main(["export", path, "--format", "tflite", "--output", str(out), "--num-images", "10"]) == 0
    assert tflite.read_labels(str(out)) == names
    assert (tmp_path / "m.labels.txt").read_text().splitlines() == names


def test_export_verifies_on_an_image_folder(model_path, tmp_path, capsys):
    """--eval-data takes a folder of image files (here 28x28 grayscale PNGs, decoded to RGB and resized)."""
    import tensorflow as tf

    from export_helpers import real_images

    x, _ = real_images(12)
    folder = tmp_path / "images"
    folder.mkdir()
    for i, image in enumerate(tf.image.resize(x[..., :1], (28, 28)).numpy()):
        (folder / f"{i:02d}.png").write_bytes(tf.io.encode_png(tf.cast(tf.round(image), tf.uint8)).numpy())
    report = tmp_path / "r.json"
    code = cli.main(["export", model_path, "--format", "onnx", "--output", str(tmp_path / "m.onnx"),
                     "--eval-data", str(folder), "--report", str(report)])
    assert code == 0
    saved = json.loads(report.read_text())
    assert saved["num_images"] == 12 and saved["max_abs_diff"] <= RUNTIME_ATOL
