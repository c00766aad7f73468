"""Inference's inputs and names: preprocess_input, decode_predictions, class-name sources, image files read and resized."""

import os

import numpy as np
import pytest

from helpers import tiny_vit
from image_files import awkward_images

import keras_vit
from keras_vit.inference import images as image_io
from keras_vit.inference import labels
from keras_vit.inference import predictors as inference
from keras_vit.weights import imagenet


def test_preprocess_input_and_decode_predictions():
    x = np.array([[0.0, 127.5, 255.0]])
    np.testing.assert_array_equal(inference.preprocess_input(x), x.astype("float32"))  # a cast only: exact
    # NumPy's float32 x / 127.5 - 1 is two correctly rounded IEEE operations (no FMA, no reduction), and
    # 0, 127.5, 255 map to exactly -1, 0, 1 on every CPU: the default tolerance (rtol 1e-7, none at 0) holds
    np.testing.assert_allclose(inference.preprocess_input(x, include_preprocessing=False), [[-1.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="data_format"):
        inference.preprocess_input(x, data_format="nhwc")

    preds = np.zeros((2, 1000), "float32")
    preds[0, 0], preds[0, 999], preds[1, 1] = 0.7, 0.2, 0.9
    decoded = inference.decode_predictions(preds, top=2)
    # the scores are copied, but as float32: float32(0.7) is 0.7 within 2e-8 relative (half a float32 ulp is
    # 6e-8 relative), hence rel=1e-7
    assert decoded[0] == [("n01440764", "tench", pytest.approx(0.7, rel=1e-7)),
                          ("n15075141", "toilet tissue", pytest.approx(0.2, rel=1e-7))]
    assert decoded[1][0][:2] == ("n01443537", "goldfish")
    assert inference.decode_predictions(np.array([[0.1, 0.9]]), top=1) == [[("1", "class_1", pytest.approx(0.9, rel=1e-7))]]
    assert inference.decode_predictions(np.array([[0.1, 0.9]]), class_names=["cat", "dog"])[0][0][1] == "dog"
    with pytest.raises(ValueError, match="2 names"):
        inference.decode_predictions(np.array([[0.1, 0.2, 0.7]]), class_names=["cat", "dog"])
    with pytest.raises(ValueError, match="2-D"):
        inference.decode_predictions(np.array([0.1, 0.9]))


def test_decode_predictions_uses_the_models_class_names(tmp_path):
    model = tiny_vit(num_classes=3)
    model.class_names = ["ant", "bee", "cat"]
    path = str(tmp_path / "m.keras")
    keras_vit.save_model(model, path)
    loaded = keras_vit.load_model(path)  # the names come back with the model
    preds = np.array([[0.1, 0.2, 0.7], [0.6, 0.3, 0.1]])
    decoded = inference.decode_predictions(preds, top=2, model=loaded)
    assert [[name for _, name, _ in row] for row in decoded] == [["cat", "bee"], ["ant", "bee"]]
    assert decoded[0][0][2] == pytest.approx(0.7, rel=1e-7)
    predictor = keras_vit.load_predictor(path)  # a Predictor holds them too
    assert inference.decode_predictions(preds, top=1, model=predictor)[0][0][1] == "cat"
    # explicit names win over the model's; a model with the wrong number of names is named in the error
    assert inference.decode_predictions(preds, top=1, model=loaded, class_names=["x", "y", "z"])[0][0][1] == "z"
    loaded.class_names = ["ant", "bee"]
    with pytest.raises(ValueError, match=r"model .vit. \(its class_names\) holds 2 names"):
        inference.decode_predictions(preds, model=loaded)


def test_imagenet_label_lists():
    in1k = imagenet.imagenet_classes("imagenet1k")
    in21k = imagenet.imagenet_classes("imagenet21k")
    assert len(in1k) == 1000 and len(in21k) == 21843
    assert len({wnid for wnid, _ in in1k}) == 1000 and len({wnid for wnid, _ in in21k}) == 21843
    assert in1k[0] == ("n01440764", "tench, Tinca tinca")
    assert imagenet.imagenet_labels()[207] == "golden retriever"
    assert labels.class_names(21843)[0] == imagenet.imagenet_labels("imagenet21k")[0]
    assert labels.class_names(3) == ["class_0", "class_1", "class_2"]
    with pytest.raises(ValueError, match="imagenet5k"):
        imagenet.imagenet_classes("imagenet5k")


def test_label_sources(tmp_path):
    label_file = tmp_path / "names.txt"
    label_file.write_text("cat\ndog\n\nbird\n")
    assert labels.class_names(3, labels=str(label_file)) == ["cat", "dog", "bird"]
    with pytest.raises(ValueError, match="names.txt"):
        labels.class_names(4, labels=str(label_file))
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        labels.class_names(3, labels=str(tmp_path / "nope.txt"))
    # a .keras saved by `keras-vit train` carries its class names in keras_vit.json
    from keras_vit import saving

    model = tiny_vit(num_classes=3)
    path = tmp_path / "model.keras"
    saving.save_model(model, str(path), metadata={"class_names": ["red", "green", "blue"]})
    assert inference.load_predictor(str(path)).class_names == ["red", "green", "blue"]
    assert inference.load_predictor(str(path), labels=["a", "b", "c"]).class_names == ["a", "b", "c"]
    # a reader plugged in by another format wins over the built-in ones
    reader = labels.register_label_reader(lambda path, loaded: ["x", "y", "z"] if path and "special" in str(path) else None)
    try:
        assert labels.class_names(3, model_path="special.keras") == ["x", "y", "z"]
    finally:
        labels._LABEL_READERS.remove(reader)


def test_load_image_converts_modes(tmp_path):
    from PIL import Image

    Image.new("L", (10, 6), 100).save(tmp_path / "gray.png")
    rgba = Image.new("RGBA", (10, 6), (255, 0, 0, 0))  # fully transparent red -> white
    rgba.putpixel((0, 0), (0, 0, 255, 255))
    rgba.save(tmp_path / "rgba.png")
    gray = image_io.load_image(tmp_path / "gray.png")
    # exact on purpose, here and below: PIL converts and composites in 8-bit integers, then a cast to float32
    assert gray.shape == (6, 10, 3) and gray.dtype == np.float32 and np.all(gray == 100)
    image = image_io.load_image(tmp_path / "rgba.png", image_size=(6, 10))
    np.testing.assert_array_equal(image[0, 0], [0, 0, 255])
    np.testing.assert_array_equal(image[5, 9], [255, 255, 255])
    assert image_io.load_image(tmp_path / "rgba.png", image_size=(32, 16)).shape == (32, 16, 3)


def test_read_image_of_awkward_files(tmp_path):
    from PIL import Image

    expected, truncated = awkward_images(tmp_path)
    assert expected["exif.jpg"].shape == (20, 12, 3)
    assert expected["exif.jpg"][0, 0, 0] > 200 and expected["exif.jpg"][-1, 0, 2] > 200  # red on top, blue below
    for name, want in expected.items():
        # exact: every conversion is integer arithmetic, or one float rounding that the expectation repeats
        np.testing.assert_array_equal(image_io.read_image(tmp_path / name), want, err_msg=name)
    assert np.ptp(image_io.read_image(tmp_path / "gray16.png")) == 255  # scaled, not clipped to white
    with Image.open(truncated) as image:
        image.verify()  # a header check lets it through ...
    with pytest.raises(ValueError, match=r"Corrupt.*truncated\.jpg' \((?!Graph execution)[^)]"):  # ... a full decode does not,
        image_io.read_image(truncated)  # and says why (the decoder's words, not the graph's wrapping)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.png").write_text("not an image")
    with pytest.raises(ValueError, match=r"notes\.png' \(not an image TensorFlow or Pillow can identify"):
        image_io.read_image(tmp_path / "other" / "notes.png")
    Image.fromarray(np.full((4, 4), 200.0, "float32")).save(tmp_path / "float255.tif")
    with pytest.raises(ValueError, match=r"float255\.tif.*outside \[0, 1\]: 200 to 200"):
        image_io.read_image(tmp_path / "float255.tif")
    with pytest.raises(FileNotFoundError, match="missing.png"):
        image_io.read_image(tmp_path / "missing.png")
    with pytest.raises(IsADirectoryError):
        image_io.read_image(tmp_path)
    with pytest.raises(ValueError, match="image_size=0"):
        image_io.load_image(tmp_path / "gray16.png", image_size=0)
    # folders: sorted, extensions of every format Pillow reads, hidden files (macOS "._x.jpg") skipped
    (tmp_path / "._exif.jpg").write_bytes(b"AppleDouble")
    (tmp_path / "notes.txt").write_text("not an image")
    names = [os.path.basename(p) for p in image_io.list_images(tmp_path)]
    assert names == ["exif.jpg", "float.tif", "float255.tif", "gray16.png", "truncated.jpg"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="No image files.*empty"):
        image_io.list_images(tmp_path / "empty")


def test_resize_is_half_pixel_bilinear_when_enlarging():
    """The one resize (images and rollout maps) against a NumPy bilinear with half-pixel centres."""

    def bilinear(n_in, n_out):
        pos = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n_in - 1)
        m = np.zeros((n_out, n_in))
        m[np.arange(n_out), lo] += 1 - (pos - lo)
        m[np.arange(n_out), hi] += pos - lo
        return m

    grid = np.random.default_rng(0).uniform(0, 1, (4, 6))
    for size in [(32, 48), (9, 7), (4, 6)]:
        want = bilinear(4, size[0]) @ grid @ bilinear(6, size[1]).T
        got = image_io.resize(grid, size)
        assert got.dtype == np.float32 and got.shape == size
        # Pillow works on float32 pixels: a few float32 ulp of values <= 1
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    # uint8 images stay uint8 and, shrunk, match Pillow's own antialiased bilinear resize within one level:
    # the same triangle filter, Pillow's weights in 8-bit fixed point, TensorFlow's in float32
    from PIL import Image

    rgb = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    pillow = np.asarray(Image.fromarray(rgb).resize((20, 30), Image.BILINEAR))
    got = image_io.resize(rgb, (30, 20))
    assert got.dtype == np.uint8
    np.testing.assert_allclose(got.astype(int), pillow.astype(int), rtol=0, atol=1)

