"""A model that returns an embedding (no classification head) is never reported as a classifier by predict."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from helpers import clip_like_vit, tiny_vit
from keras_vit import ViTConfig, cli, predict, saving
from keras_vit.inference import images as images_lib


@pytest.fixture(scope="module")
def clip_like():
    return clip_like_vit()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("images")
    for name, color in (("red.png", (200, 30, 30)), ("blue.png", (20, 40, 220))):
        Image.new("RGB", (40, 36), color).save(folder / name)
    return folder


def _keras_embedding(model, path):
    pixels = images_lib.load_image(str(path), (32, 32))[None]
    return np.asarray(model.predict(pixels, verbose=0))[0]


def test_config_says_what_the_model_outputs():
    base = dict(image_size=32, patch_size=16, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    assert ViTConfig(**base).output == "probabilities"
    assert ViTConfig(**base, classifier_activation=None).output == "logits"
    assert ViTConfig(**base, include_top=False, projection_dim=8).output == "embedding"
    assert ViTConfig(**base, include_top=False).output == "embedding"  # the pooled vector: no classes either
    assert ViTConfig(**base, include_top=True, projection_dim=8, num_classes=3).output == "probabilities"
    assert ViTConfig(**base, include_top=False, pooling=None).output == "tokens"
    assert ViTConfig(**base, include_top=False, pooling="feature_map").output == "feature_map"


def test_predict_returns_the_embedding_not_classes(clip_like, folder):
    results = predict(clip_like, [str(folder)], top_k=3)
    assert [os.path.basename(r["path"]) for r in results] == ["blue.png", "red.png"]
    for result in results:
        assert "predictions" not in result and len(result["embedding"]) == 8
        np.testing.assert_allclose(result["embedding"], _keras_embedding(clip_like, result["path"]), atol=1e-5)
    # the embedding as the model computes it, not a softmax over its dimensions
    assert not np.isclose(sum(results[0]["embedding"]), 1.0, atol=1e-2)


def test_labels_for_an_embedding_are_refused(clip_like, folder):
    with pytest.raises(ValueError, match=r"returns a 8-value embedding \(no classification head\), not class scores"):
        predict(clip_like, [str(folder)], labels=[f"c{i}" for i in range(8)])


def test_a_classifier_is_unchanged(folder):
    (result, _) = predict(tiny_vit(num_classes=3), [str(folder)], top_k=2, labels=["ant", "bee", "cat"])
    assert len(result["predictions"]) == 2 and "embedding" not in result
    assert sorted(result["predictions"][0]) == ["index", "label", "probability"]


def test_cli_prints_the_embedding_size_and_norm(clip_like, folder, tmp_path, capsys):
    path = str(tmp_path / "clip_like.keras")
    saving.save_model(clip_like, path)
    assert cli.main(["predict", path, str(folder / "red.png")]) == 0
    out = capsys.readouterr().out
    norm = float(np.linalg.norm(_keras_embedding(clip_like, folder / "red.png")))
    line = out.splitlines()[1]
    assert line.startswith("  embedding of 8 values, L2 norm ") and "no classification head" in line
    assert float(line.split("L2 norm ")[1].split()[0]) == pytest.approx(norm, abs=1e-3)
    assert "class_" not in out and "probability" not in out
    assert cli.main(["predict", path, str(folder / "red.png"), "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert len(result["embedding"]) == 8 and "predictions" not in result
