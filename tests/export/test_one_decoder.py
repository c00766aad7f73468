"""``keras-vit predict`` and the SavedModel's ``serving_bytes`` read a file the same way (one decoder, one resize),
and the SavedModel of a model of any size is usable by predict.
"""

import os
import shutil
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras
import keras_vit
from keras_vit import cli
from keras_vit.export import saved_model, verify
from keras_vit.inference import predictors

TINY = dict(patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=6)
# the SavedModel export's own bar (keras_vit.export.verify.TOLERANCES): the same float32 graph, round-off only
ROUND_OFF = 1e-5
# keras-vit predict against serving_bytes: the same pixels through the same weights, but each decodes and resizes
# in its own graph (eager or traced, batched differently), so the float32 round-off of the resize enters too
PREDICT_ATOL = 1e-4


def _model(image_size):
    keras.utils.set_random_seed(0)
    model = keras_vit.ViT(image_size=image_size, **TINY) if image_size else keras_vit.build_model(
        keras_vit.ViTConfig(image_size=None, native_image_size=32, **TINY))
    head = model.get_layer("head")  # a random head: the probabilities depend on the pixels
    head.kernel.assign(np.random.default_rng(0).normal(0, 2.0, head.kernel.shape).astype("float32"))
    return model


def _export(model, base):
    eval_data = np.random.default_rng(1).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
    report = keras_vit.export.export_model(model, "saved_model", str(base), eval_data=eval_data, num_images=4,
                                           warmup=False)
    return report


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """A 32x32 model and its SavedModel, exported once for the module."""
    model = _model(32)
    return model, _export(model, tmp_path_factory.mktemp("fixed"))


@pytest.fixture(scope="module")
def any_size(tmp_path_factory):
    """A model of any size (native 32x32), its .keras file and its SavedModel, exported once for the module."""
    model = _model(None)
    folder = tmp_path_factory.mktemp("any")
    model.save(str(folder / "model.keras"))
    return model, str(folder / "model.keras"), _export(model, folder)


def _files(folder):
    """Files of every kind a client sends: alpha, gray, palette, 16 bits, EXIF, 1x1, very wide, GIF, BMP, WebP."""
    rng = np.random.default_rng(0)
    folder.mkdir(exist_ok=True)

    def rgb(h, w):
        return rng.integers(0, 256, (h, w, 3), dtype=np.uint8)

    rgba = np.concatenate([rgb(40, 36), rng.integers(0, 256, (40, 36, 1), dtype=np.uint8)], -1)
    rgba[:10, :, 3] = 0  # fully transparent rows: white
    Image.fromarray(rgba, "RGBA").save(folder / "rgba.png")
    Image.fromarray(rng.integers(0, 256, (30, 50), dtype=np.uint8), "L").save(folder / "gray.png")
    gray_alpha = Image.fromarray(rng.integers(0, 256, (24, 24), dtype=np.uint8), "L").convert("LA")
    gray_alpha.putalpha(Image.fromarray(rng.integers(0, 256, (24, 24), dtype=np.uint8), "L"))
    gray_alpha.save(folder / "gray_alpha.png")
    Image.fromarray(rgb(33, 47)).quantize(16).save(folder / "palette.png")
    ramp = rng.integers(0, 65536, (20, 28)).astype(np.uint16)
    Image.fromarray(ramp).save(folder / "gray16.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise
    Image.fromarray(rgb(24, 40)).save(folder / "exif6.jpg", exif=exif, quality=90)
    Image.fromarray(rgb(1, 1)).save(folder / "tiny.png")
    Image.fromarray(rgb(6, 300)).save(folder / "wide.png")
    Image.fromarray(rgb(120, 90)).save(folder / "large.jpg", quality=85)
    Image.fromarray(rgb(16, 12)).save(folder / "small.png")
    Image.fromarray(rgb(40, 40)).save(folder / "image.gif")
    Image.fromarray(rgb(37, 29)).save(folder / "image.bmp")
    Image.fromarray(rgb(35, 45)).save(folder / "image.webp", quality=90)
    return sorted(str(folder / name) for name in os.listdir(folder))


def _probabilities(results, num_classes):
    rows = []
    for result in results:
        assert "error" not in result, result
        row = np.zeros(num_classes)
        for p in result["predictions"]:
            row[p["index"]] = p["probability"]
        rows.append(row)
    return np.stack(rows)


def _serving_bytes(path, files):
    loaded = tf.saved_model.load(path)
    return saved_model.run_bytes_signature(loaded, [open(f, "rb").read() for f in files])


def test_predict_and_serving_bytes_give_the_same_probabilities_for_every_kind_of_file(fixed, tmp_path):
    model, report = fixed
    files = _files(tmp_path / "files")
    assert len(files) == 13
    served = _serving_bytes(report.path, files)
    for source in (report.path, model):  # keras-vit predict with the SavedModel, and with the Keras model
        predicted = _probabilities(keras_vit.predict(source, files, top_k=6), 6)
        for name, got, want in zip(files, predicted, served):
            # the same pixels (one decoder, one resize) through the same weights: float32 round-off only
            np.testing.assert_allclose(got, want, rtol=0, atol=PREDICT_ATOL, err_msg=os.path.basename(name))
    assert len({row.argmax() for row in served}) > 1  # the files are told apart: the check means something


def _png_header(width, height):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


@pytest.mark.parametrize("size", [(0, 16), (16, 0), (0, 0)])
def test_predict_refuses_a_file_of_no_pixels(fixed, tmp_path, size):
    model, _ = fixed
    path = tmp_path / "empty.png"
    path.write_bytes(_png_header(*size))
    (result,) = keras_vit.predict(model, [str(path)])
    h, w = size[1], size[0]
    assert "predictions" not in result
    assert f"'{path}' has no pixels: its header declares {h}x{w} (height x width)" in result["error"]


def test_the_export_verifies_serving_bytes(fixed):
    _, report = fixed
    checked = report.details["serving_bytes"]
    # top-1 is judged by the check itself, on the images Keras decides (random images of a random head may tie)
    assert checked["passed"] and checked["files"] == "4 PNG, 1 JPEG"
    assert checked["max_abs_diff"] <= ROUND_OFF
    # a signature that answers with another class than Keras fails the check (and so the export)
    from keras_vit.inference import decoding

    model = fixed[0]

    def reference(pixels):
        return np.asarray(model.predict(pixels, verbose=0))

    def wrong(files):  # the right pixels, the classes shifted by one
        return np.roll(reference(np.stack([decoding.decode_and_resize(f, (32, 32)).numpy() for f in files])), 1, axis=-1)

    images = np.random.default_rng(2).uniform(0, 255, (3, 32, 32, 3)).astype("float32")
    shuffled = verify.check_serving_bytes(wrong, reference, images, (32, 32), {"max_abs_diff": ROUND_OFF})
    assert not shuffled["passed"]


def test_the_saved_model_of_a_model_of_any_size_predicts(any_size, tmp_path, capsys):
    model, keras_path, report = any_size
    files = _files(tmp_path / "files")
    # at the size the export recorded (the native size, what serving_bytes resizes to): as serving_bytes answers
    predictor = predictors.load_predictor(report.path)
    assert predictor.image_size == (32, 32)
    got = _probabilities(keras_vit.predict(report.path, files, top_k=6), 6)
    np.testing.assert_allclose(got, _serving_bytes(report.path, files), rtol=0, atol=PREDICT_ATOL)
    # the .keras file at its native size says the same
    np.testing.assert_allclose(_probabilities(keras_vit.predict(keras_path, files, top_k=6), 6), got, rtol=0, atol=PREDICT_ATOL)
    # at a size the user names, for the SavedModel and the Keras model alike
    other = [_probabilities(keras_vit.predict(source, files, top_k=6, image_size=(16, 24)), 6) for source in (report.path, model)]
    np.testing.assert_allclose(other[0], other[1], rtol=0, atol=PREDICT_ATOL)
    assert predictors.load_predictor(report.path, image_size=(16, 24)).image_size == (16, 24)
    assert cli.main(["predict", report.path, files[0], "--image-size", "40", "24", "--json"]) == 0
    assert '"probability"' in capsys.readouterr().out
    # a size that makes no patch grid, named with the patch size
    with pytest.raises(ValueError, match=r"image_size=\(12, 12\), patch_size=\(8, 8\)"):
        predictors.load_predictor(report.path, image_size=12)
    assert cli.main(["predict", report.path, files[0], "--image-size", "12", "12"]) == 2
    assert "image_size=(12, 12)" in capsys.readouterr().err
    # a SavedModel of any size that records no size (not exported by keras_vit): the size must be named
    bare = str(tmp_path / "bare")
    shutil.copytree(report.path, bare)
    os.remove(os.path.join(bare, "assets", "keras_vit.json"))
    with pytest.raises(ValueError, match=r"takes images of any size and records no size.*--image-size H W"):
        predictors.load_predictor(bare)
    assert predictors.load_predictor(bare, image_size=(24, 24)).image_size == (24, 24)


def test_a_fixed_size_model_refuses_another_size(fixed):
    model, report = fixed
    for source in (model, report.path):
        with pytest.raises(ValueError, match=r"takes images of size \(32, 32\) only. Received: image_size=\(64, 64\)"):
            predictors.load_predictor(source, image_size=64)


def test_serving_bytes_judges_top1_where_keras_decides_it():
    """Within the max_abs_diff bar, a near-tied image's top-1 may swap on another CPU's rounding: counted, not a
    failure; a decided image answered with another class fails, as does any difference over the bar."""
    images = np.random.default_rng(3).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    keras_probabilities = np.array([[0.5, 0.5 - 1e-6, 1e-6], [0.7, 0.2, 0.1], [0.1, 0.2, 0.7]])  # 2 PNG, 1 JPEG

    def reference(pixels):
        return keras_probabilities

    def check(answer):
        return verify.check_serving_bytes(lambda files: answer, reference, images, (32, 32),
                                          {"max_abs_diff": ROUND_OFF})

    swapped_tie = keras_probabilities + [[-1e-6, 1e-6, 0.0], [0.0] * 3, [0.0] * 3]
    checked = check(swapped_tie)
    assert checked["passed"] and checked["near_tied"] == 1 and checked["top1_agreement"] < 1.0
    decided_wrong = np.concatenate([keras_probabilities[:2], [[0.2, 0.7, 0.1]]])
    assert not check(decided_wrong)["passed"]
    assert not check(keras_probabilities + [[0.0] * 3, [-2 * ROUND_OFF, 2 * ROUND_OFF, 0.0], [0.0] * 3])["passed"]
