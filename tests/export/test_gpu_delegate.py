"""TFLite exports that LiteRT's GPU delegate takes whole, checked by its own rules (keras_vit.export.gpu_delegate).

Every precision of a small hybrid, a family model (registers, MAP head, GLU, LayerScale) and the DINOv3-like and
EVA-02-like RoPE models (all trained on digits) has no tensor of rank >= 5, no TRANSPOSE of more than 4 axes, only ops
the delegate parses and no dynamic dimension, and agrees with Keras as the export's bars require
(export_helpers.assert_taken_whole; the small ViT's four files are checked so in tests/export/test_export_tflite.py,
which exports them anyway); the checker names what the Keras graph (traced without the TFLite formulation) leaves
to the CPU, and TensorFlow's analyzer is compared with it.
"""

import contextlib
import io
import re

import pytest

import keras_vit
from helpers import images
from export_helpers import (LABELS, assert_taken_whole, decided_images, family_model, hybrid_model, litert_facts,
                            real_images, rope_model)
from keras_vit.export import export_model, gpu_delegate, gpu_delegate_report, tflite

MODES = ("float32", "float16", "dynamic", "int8")
SMALL = dict(image_size=32, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=10)


@pytest.fixture(scope="module")
def models():
    """Each model with verification images it decides by a margin (export_helpers.DECIDED_MARGIN), and calibration
    images: the top-1 classes of a quantized file are compared only where a flip would be the export's fault."""
    import keras

    keras.utils.set_random_seed(0)  # the initial weights must not depend on the tests that ran before in the process
    pool, _ = real_images(200)
    calibration, _ = real_images(32, offset=3000, split="train")
    hybrid, family = hybrid_model(), family_model()
    found = {"hybrid": (hybrid, decided_images(hybrid, pool, 8), calibration),
             "family": (family, decided_images(family, pool, 32), calibration)}
    for name in ROPE:
        model = rope_model(name)
        found[name] = (model, decided_images(model, pool, 32), calibration)
    return found


ROPE = ("dinov3", "eva02")  # tests/export/test_rope_export.py: float32 of each RoPE kind on random weights
# a RoPE model's float32 and int8 files in make test; float16 and dynamic (the same rotation, its weights
# quantized otherwise) in make test-slow
_CASES = [(name, mode) for name in ("hybrid", "family") for mode in MODES] + [
    pytest.param(name, mode, marks=[pytest.mark.slow] if mode in ("float16", "dynamic") else [])
    for name in ROPE for mode in MODES]


@pytest.mark.parametrize("name, mode", _CASES)
def test_every_precision_is_taken_whole(models, tmp_path, name, mode):
    model, x, calibration = models[name]
    path = str(tmp_path / f"{name}_{mode}.tflite")
    report = export_model(model, "tflite", path, quantize=mode, labels=LABELS, eval_data=x,
                          representative_data=calibration, num_images=len(x))
    assert report.passed  # the export's own bars against Keras (max abs diff, top-1 agreement)
    assert_taken_whole(report)


def _keras_graph(model, quantize="float32"):
    """The flatbuffer of the model traced as Keras runs it (the CPU-tuned graph), not the TFLite formulation."""
    import tensorflow as tf

    spec = tf.TensorSpec((1,) + tuple(model.input_shape[1:]), tf.float32)
    fn = tf.function(lambda images: model(images, training=False), input_signature=[spec]).get_concrete_function()
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    converter = tf.lite.TFLiteConverter.from_concrete_functions([convert_variables_to_constants_v2(fn)])
    if quantize == "float16":
        converter.optimizations, converter.target_spec.supported_types = [tf.lite.Optimize.DEFAULT], [tf.float16]
    return converter.convert()


@pytest.mark.parametrize("quantize", ["float32", "float16"])
def test_checker_names_what_the_keras_graph_leaves_to_the_cpu(quantize):
    model = keras_vit.ViT(**dict(SMALL, patch_size=8))
    report = gpu_delegate_report(_keras_graph(model, quantize))
    assert not report.whole
    # per attention layer: the fused QKV (B, N, 3, heads, head_dim) and its 5-D transpose
    assert len(report.rank5_tensors) == 4 and report.count("transpose") == 2
    line = report.line()
    assert re.match(r"GPU delegate: \d+ of \d+ ops left to the CPU: #\d+ RESHAPE: tensor '.*' of rank 5 "
                    r"\(1, 17, 3, 4, 8\) \[model_builder.cc IsAllAllowedTensors: a tensor of rank >= 5\]", line), line
    every = "; ".join(str(f) for f in report.findings)
    assert re.search(r"#\d+ TRANSPOSE: permutes 5 axes \(1, 17, 3, 4, 8\) \[model_builder.cc TransposeOperationParser", every)


def _convert(fn, *specs):
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions([tf.function(fn).get_concrete_function(*specs)])
    return converter.convert()


def test_checker_rules_on_small_graphs():
    import tensorflow as tf

    spec = tf.TensorSpec((1, 5, 8), tf.float32)
    token = gpu_delegate_report(_convert(lambda x: x[:, 0] * 2.0, spec))
    assert token.count("options") == 1 and "shrink_axis_mask=2" in token.line()
    dynamic = gpu_delegate_report(_convert(lambda x: tf.nn.relu(x), tf.TensorSpec((None, 5, 8), tf.float32)))
    assert "shape signature (-1, 5, 8)" in dynamic.line() and dynamic.count("dynamic") >= 1
    adjoint = gpu_delegate_report(_convert(lambda a, b: tf.matmul(a, b, transpose_b=True), spec, spec))
    assert "adj_y=True: the parser reads neither" in adjoint.line()
    outer = gpu_delegate_report(_convert(lambda a, b: a * b, tf.TensorSpec((1, 5, 1)), tf.TensorSpec((1, 1, 8))))
    assert "neither input (1, 5, 1), (1, 1, 8) is at least the other" in outer.line()
    whole = gpu_delegate_report(_convert(lambda a, b: tf.nn.softmax(tf.matmul(a, b)), spec, tf.TensorSpec((1, 8, 5))))
    assert whole.whole and whole.line() == f"GPU delegate: all {whole.num_ops} ops"


def test_not_a_flatbuffer_names_the_file(tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ValueError, match=r"Not a TFLite flatbuffer .*model\.tflite"):
        gpu_delegate_report(path)
    assert keras_vit.gpu_delegate_report is gpu_delegate_report


def _analyzer(path):
    import tensorflow as tf

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tf.lite.experimental.Analyzer.analyze(model_path=str(path), gpu_compatibility=True)
    return out.getvalue()


def test_tensorflow_analyzer_agrees_on_exports_and_misses_the_rank_rule(tmp_path):
    """TensorFlow's analyzer checks gpu_compatibility.cc only: it agrees on the exports, and passes the Keras
    graph that model_builder.cc's rank and transpose rules refuse (the disagreement the docs report)."""
    model = keras_vit.ViT(**dict(SMALL, patch_size=8))
    exported, keras_graph = tmp_path / "export.tflite", tmp_path / "keras.tflite"
    exported.write_bytes(tflite.convert(model, "float32"))
    keras_graph.write_bytes(_keras_graph(model))
    assert gpu_delegate_report(exported).whole
    assert "looks compatible with GPU delegate" in _analyzer(exported)
    assert not gpu_delegate_report(keras_graph).whole
    assert "looks compatible with GPU delegate" in _analyzer(keras_graph)  # the analyzer's blind spot


@pytest.mark.slow
@pytest.mark.parametrize("image_size", [224, 384])
def test_vit_b16_every_precision_is_taken_whole(tmp_path, image_size):
    model = keras_vit.ViTB16(image_size=image_size, num_classes=10)
    x = images(4, image_size)
    for mode in MODES:
        path = str(tmp_path / f"b16_{mode}.tflite")
        report = export_model(model, "tflite", path, quantize=mode, eval_data=x, representative_data=x,
                              num_images=4, labels=LABELS)
        rank5, transposes, ops, dynamic = litert_facts(path)
        assert rank5 == [] and transposes == [] and dynamic == [] and ops <= gpu_delegate.PARSED_OPS
        assert report.details["gpu_delegate"] == f"GPU delegate: all {gpu_delegate_report(path).num_ops} ops"
