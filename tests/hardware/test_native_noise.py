"""Lines TensorFlow and the TFLite converter print from C++ that tell a user nothing are left out; real ones stay."""

import os
import warnings

import pytest

from keras_vit.hardware import terminal
from keras_vit.inference import decoding

UINT8 = (b"E0000 00:00:1795707275.860168    9221 util.cc:131] oneDNN supports DT_UINT8 only on platforms with "
         b"AVX-512. Falling back to the default Eigen-based implementation if present.\n")
LOC = b'loc(fused["BatchMatMulV3:", callsite("vit_1/head_1/MatMul"("<frozen runpy>":88:1)))\n'


def test_filter_drops_onednn_uint8_notice_and_hidden_lines_and_keeps_real_errors(monkeypatch, capfd):
    monkeypatch.setenv(terminal.LEVEL_ENV, "2")
    with terminal.native_stderr_filtered(hide=r"^loc\("):
        os.write(2, UINT8 + LOC + b"E0000 00:00:1.5    1 op_kernel.cc:1] OOM when allocating tensor\n")
    err = capfd.readouterr().err
    assert "DT_UINT8" not in err and "loc(" not in err and "OOM when allocating tensor" in err


def test_everything_shows_when_the_log_level_asks_for_it(monkeypatch, capfd):
    monkeypatch.setenv(terminal.LEVEL_ENV, "0")
    with terminal.native_stderr_filtered(hide=r"^loc\("):
        os.write(2, UINT8 + LOC)
    err = capfd.readouterr().err
    assert "DT_UINT8" in err and "loc(" in err


def test_decoding_filters_the_first_run_where_the_graph_is_built(monkeypatch, capfd):
    monkeypatch.setenv(terminal.LEVEL_ENV, "2")
    run = decoding._first_run_filtered(lambda: os.write(2, UINT8))
    run()
    assert capfd.readouterr().err == ""
    run()  # later runs are not captured (TensorFlow logs it once, at the first uint8 op): one descriptor swap per process
    assert "DT_UINT8" in capfd.readouterr().err


def test_conversion_error_names_each_distinct_error_once():
    from keras_vit.export import tflite

    stack = "".join(
        f"<frozen runpy>:88:1: error: 'tfl.fully_connected' op operand #0 must be QI8, but got 'tensor<1x{n}xi8>'\n"
        "/x/cli/__main__.py:7:1: note: called from\nsys.exit(main())\n^\n" for n in (17, 17, 32)
    )
    message = str(tflite.conversion_error("float32", stack))
    assert message.count("error") == 0 and message.count("tensor<1x17xi8>") == 1 and "(3 ops)" in message
    assert "called from" not in message


@pytest.mark.slow  # a quantized model through the converter
def test_quantized_tflite_refusal_prints_its_reason_only(monkeypatch, capfd, tmp_path):
    from helpers import tiny_vit
    from keras_vit.export import ExportError, export_model, tflite

    monkeypatch.setenv(terminal.LEVEL_ENV, "2")
    model = tiny_vit(num_classes=3)
    model.quantize("int8")
    # export_model refuses it by name before the converter starts (keras_vit.export.tflite.check_state)
    path = tmp_path / "m.tflite"
    with pytest.raises(ValueError, match=r"it is quantized \(int8, \d+ layers\).*Nothing was written"):
        export_model(model, "tflite", str(path), eval_data=tiny_images(), num_images=2)
    assert not path.exists() and "loc(" not in capfd.readouterr().err
    # the converter itself, given Keras' integer kernels, stops: its reason, without MLIR's source locations
    with pytest.raises(ExportError, match="must be tensor of 32-bit float or QI8") as info:
        tflite.convert(model, "float32")
    assert "loc(" not in capfd.readouterr().err
    assert "called from" not in str(info.value)


@pytest.mark.slow  # an int8 conversion through QuantizationDebugger
def test_selective_int8_conversion_warns_nothing(monkeypatch, capfd):
    from helpers import tiny_vit
    from keras_vit.export import tflite

    monkeypatch.setenv(terminal.LEVEL_ENV, "2")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tflite.convert(tiny_vit(num_classes=3), "int8", tiny_images(), float_ops=tflite.FRAGILE_OPS)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "tf.lite.Interpreter is deprecated" in m or "Statistics for quantized" in m]
    assert "fully_quantize" not in capfd.readouterr().err


def tiny_images():
    from helpers import images

    return images(batch=4)
