"""Attention weights, rollout, attention distance, position-embedding similarity, PNGs, CLI."""

import math
import os

import numpy as np
import pytest

import keras
import reference
import toy_quadrants
from helpers import TINY, images, save_npz, tiny_vit, vit_checkpoint

import keras_vit
from keras_vit import cli
from keras_vit.inspect import attention
from keras_vit.inspect import figures as visualize


def is_png(path, size=None):
    """The file is a valid PNG (and of ``size`` = (w, h) if given)."""
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.format == "PNG"
        if size is not None:
            assert image.size == tuple(size)
    return True


@pytest.mark.parametrize(
    "overrides, tokens",
    [
        ({}, 17),  # 32x32, patch 8: 4x4 patches + class token
        ({"image_size": (32, 48), "patch_size": 4}, 97),  # 8x12 patches + class token
        ({"image_size": (24, 40), "patch_size": (8, 4), "pooling": "gap"}, 30),  # 3x10 patches, no class token
    ],
)
def test_attention_weights_shape_and_rows(overrides, tokens):
    model = tiny_vit(**overrides)
    h, w = model.input_shape[1:3]
    weights = keras_vit.attention_weights(model, images(2, (h, w)))
    assert weights.shape == (2, TINY["num_layers"], TINY["num_heads"], tokens, tokens)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert np.all(weights >= 0)
    single = keras_vit.attention_weights(model, images(2, (h, w))[1])
    assert single.shape == (TINY["num_layers"], TINY["num_heads"], tokens, tokens)
    np.testing.assert_allclose(single, weights[1], atol=1e-6)
    heatmap = keras_vit.rollout_map(model, images(1, (h, w))[0])
    assert heatmap.shape == (h, w) and np.all(np.isfinite(heatmap))


def test_attention_weights_match_numpy_reference(tmp_path):
    """The weights are softmax(q k^T / sqrt(d)) of each block's input, per an independent NumPy ViT."""
    arrays = vit_checkpoint(seed=3)
    model = keras_vit.ViT(weights=save_npz(tmp_path / "vit.npz", arrays), num_classes=5, **TINY)
    x = images(2, seed=4)
    got = keras_vit.attention_weights(model, x)
    for b, image in enumerate(x.astype("float64")):
        z = reference.embed_patches(image / 127.5 - 1.0, arrays)
        z = np.concatenate([arrays["cls"][0], z]) + arrays["Transformer/posembed_input/pos_embedding"][0]
        for layer in range(TINY["num_layers"]):
            p = reference.sub(arrays, f"Transformer/encoderblock_{layer}")
            y = reference.layer_norm(z, p["LayerNorm_0/scale"], p["LayerNorm_0/bias"])
            att = reference.sub(p, "MultiHeadDotProductAttention_1")
            for head in range(TINY["num_heads"]):
                q = y @ att["query/kernel"][:, head] + att["query/bias"][head]
                k = y @ att["key/kernel"][:, head] + att["key/bias"][head]
                want = reference.softmax(q @ k.T / math.sqrt(q.shape[-1]))
                np.testing.assert_allclose(got[b, layer, head], want, atol=2e-5)
            z = reference.msa(y, att) + z
            y = reference.layer_norm(z, p["LayerNorm_2/scale"], p["LayerNorm_2/bias"])
            y = reference.gelu(y @ p["MlpBlock_3/Dense_0/kernel"] + p["MlpBlock_3/Dense_0/bias"])
            z = y @ p["MlpBlock_3/Dense_1/kernel"] + p["MlpBlock_3/Dense_1/bias"] + z


def test_attention_rollout_math():
    rng = np.random.default_rng(0)
    raw = rng.uniform(size=(3, 2, 5, 5))
    weights = raw / raw.sum(-1, keepdims=True)
    rollout = keras_vit.attention_rollout(weights)
    assert rollout.shape == (5, 5)
    np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-12)
    # by hand: A_l = (mean_heads W_l + I) / 2 (rows of W sum to 1), R = A_3 A_2 A_1
    a = [(w.mean(0) + np.eye(5)) / 2 for w in weights]
    np.testing.assert_allclose(rollout, a[2] @ a[1] @ a[0], atol=1e-12)
    np.testing.assert_allclose(keras_vit.attention_rollout(weights, "max").sum(-1), 1.0, atol=1e-12)
    dropped = keras_vit.attention_rollout(weights, discard_ratio=0.4)
    np.testing.assert_allclose(dropped.sum(-1), 1.0, atol=1e-12)
    assert not np.allclose(dropped, rollout)
    # identity attention leaves every token with itself; exact on purpose: float64 sums and products of 0s
    # and 1s, halved ((I + I) / 2 = I), are exact in any order on any CPU
    np.testing.assert_array_equal(keras_vit.attention_rollout(np.broadcast_to(np.eye(5), (3, 2, 5, 5))), np.eye(5))
    with pytest.raises(ValueError, match="head_fusion"):
        keras_vit.attention_rollout(weights, head_fusion="median")
    with pytest.raises(ValueError, match="shape"):
        keras_vit.attention_rollout(weights[0])


def identity_attention_checkpoint(scale=30.0, seed=0):
    """Weights in the original layout whose attention is exactly the identity, in every block.

    Patch embeddings are zero, so token i is its position embedding; each
    position embedding is zero-mean with unit variance in every head's slice
    of the width, so the LayerNorm leaves it as it is, and the query and key
    kernels both copy (times ``scale``) the head's slice. Within a head all
    queries then have the same norm, the diagonal logit q_i.q_i is the largest
    of its row by more than 100 and the softmax underflows to a one-hot: every
    off-diagonal weight is below e^-100 (about 4e-44, or flushed to 0) and the
    diagonal is 1 up to the float32 rounding of exp and the division.
    The attention output, value and MLP projections are zero, so each block is
    the identity map and the next block sees the same tokens.
    """
    d, heads, hd = TINY["hidden_size"], TINY["num_heads"], TINY["hidden_size"] // TINY["num_heads"]
    shape = {k: TINY[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")}
    arrays = {k: np.zeros_like(v) for k, v in vit_checkpoint(**shape).items()}
    rng = np.random.default_rng(seed)
    posemb = rng.standard_normal((17, heads, hd))
    posemb -= posemb.mean(-1, keepdims=True)
    posemb *= math.sqrt(hd) / np.linalg.norm(posemb, axis=-1, keepdims=True)
    arrays["Transformer/posembed_input/pos_embedding"] = posemb.reshape(1, 17, d).astype("float32")
    copy = np.zeros((d, heads, hd), "float32")
    for h in range(heads):
        copy[h * hd : (h + 1) * hd, h, :] = scale * np.eye(hd)
    for key in arrays:
        if key.endswith("scale"):
            arrays[key] = np.ones_like(arrays[key])
        if key.endswith(("query/kernel", "key/kernel")):
            arrays[key] = copy
    return arrays


def test_identity_attention_gives_a_uniform_map(tmp_path):
    model = keras_vit.ViT(weights=save_npz(tmp_path / "identity.npz", identity_attention_checkpoint()), num_classes=5, **TINY)
    x = images(2, seed=1)
    weights = keras_vit.attention_weights(model, x)
    # float32 softmax of a one-hot row: the diagonal is 1 within a few ulp (2^-24 each), not exactly: TF's
    # Eigen softmax (used where TF leaves oneDNN off, e.g. on AVX2-only CPUs) gives 0.99999994 = 1 - 2^-24
    # on every diagonal entry, oneDNN's gives 1.0; 4 ulp allows for exp's and the division's rounding
    np.testing.assert_allclose(weights, np.broadcast_to(np.eye(17), weights.shape), rtol=0, atol=4 * 2.0**-24)
    for image, w in zip(x, weights):
        heatmap = keras_vit.rollout_map(model, image, weights=w)
        assert heatmap.shape == (32, 32)
        # nothing flows from any patch to the class token: uniform. The flow is made of the off-diagonal
        # weights (< e^-100, about 4e-44, or 0), so any spread is far below 1e-12
        assert np.ptp(heatmap) <= 1e-12
    # a token attends only to itself: zero distance (the diagonal's distance is exactly 0; the off-diagonal
    # weights, < 4e-44 each, times distances < 34 px leave far less than 1e-12 px)
    np.testing.assert_allclose(keras_vit.mean_attention_distance(model, x, weights=weights), 0.0, rtol=0, atol=1e-12)


def test_uniform_attention_gives_a_uniform_map(tmp_path):
    """Zero query/key weights: every token attends to all tokens equally."""
    arrays = vit_checkpoint(seed=2)
    for key in arrays:
        if "query/" in key or "key/" in key:
            arrays[key] = np.zeros_like(arrays[key])
    model = keras_vit.ViT(weights=save_npz(tmp_path / "uniform.npz", arrays), num_classes=5, **TINY)
    x = images(1, seed=5)
    weights = keras_vit.attention_weights(model, x)
    np.testing.assert_allclose(weights, 1.0 / 17, atol=1e-7)
    heatmap = keras_vit.rollout_map(model, x[0], weights=weights[0])
    assert heatmap.min() > 0 and np.ptp(heatmap) <= 1e-6 * heatmap.max()
    # every query patch averages its distance to all 16 patches of the 4x4 grid (8 px apart)
    centres = np.array([(8 * r + 4, 8 * c + 4) for r in range(4) for c in range(4)], "float64")
    expected = np.linalg.norm(centres[:, None] - centres[None], axis=-1).mean()
    distances = keras_vit.mean_attention_distance(model, x, weights=weights)
    assert distances.shape == (TINY["num_layers"], TINY["num_heads"])
    np.testing.assert_allclose(distances, expected, rtol=1e-5)


def test_rollout_finds_the_object_of_a_toy_localisation_task(tmp_path):
    """A ViT trained to name the quadrant of a red square beside a green distractor (tests/toy_quadrants.py; its
    trained file is stored, the suite trains it only when the file is missing): the rollout's maximum lies in the
    red square's quadrant."""
    path = toy_quadrants.STORED if os.path.exists(toy_quadrants.STORED) else toy_quadrants.train(tmp_path / "q.keras")
    model = keras_vit.load_model(path)
    test_x, test_y = toy_quadrants.squares(32, np.random.default_rng(100))
    accuracy = np.mean(np.asarray(model(test_x)).argmax(-1) == test_y)
    assert accuracy >= 0.9, f"the toy model does not do the task (test accuracy {accuracy})"
    weights = keras_vit.attention_weights(model, test_x)
    found = []
    for image, w in zip(test_x, weights):
        heatmap = keras_vit.rollout_map(model, image, weights=w)
        r, c = np.unravel_index(np.argmax(heatmap), heatmap.shape)
        found.append(2 * int(r >= 8) + int(c >= 8))
    hits = np.mean(np.array(found) == test_y)
    assert hits >= 0.9, f"rollout maximum in the object's quadrant for {hits:.0%} of test images"


def test_position_embedding_similarity():
    model = tiny_vit(image_size=(32, 48), patch_size=8)
    similarity = keras_vit.position_embedding_similarity(model)
    assert similarity.shape == (4, 6, 4, 6)
    for i in range(4):
        for j in range(6):
            assert similarity[i, j, i, j] == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_allclose(similarity, similarity.transpose(2, 3, 0, 1), atol=1e-12)
    assert np.all(np.abs(similarity) <= 1.0 + 1e-9)


def test_pngs_are_written_valid_and_sized(tmp_path):
    model = tiny_vit(image_size=(32, 48), patch_size=8)
    rgb = images(1, (60, 90), seed=2)[0]  # an image larger than the model input, non-square
    heatmap = keras_vit.rollout_map(model, images(1, (32, 48))[0])
    overlay = visualize.save_heatmap_overlay(rgb, heatmap, tmp_path / "sub" / "overlay.png")
    assert is_png(overlay, size=(90, 60))
    from PIL import Image

    pixels = np.asarray(Image.open(overlay))[..., :3]
    assert pixels.shape == (60, 90, 3) and not np.array_equal(pixels, rgb.round().astype("uint8"))
    same = visualize.overlay_heatmap(rgb, np.zeros((60, 90)), alpha=0.0)
    # exact on purpose: alpha 0 gives (1 - 0) * rgb + 0 * colours = rgb exactly in float64, then uint8
    np.testing.assert_array_equal(same, rgb.round().astype("uint8"))
    distances = keras_vit.mean_attention_distance(model, images(2, (32, 48)))
    assert is_png(visualize.plot_attention_distance(distances, tmp_path / "distance.png"))
    similarity = keras_vit.position_embedding_similarity(model)
    assert is_png(visualize.plot_position_similarity(similarity, tmp_path / "posemb.png"))
    with pytest.raises(ValueError, match="alpha"):
        visualize.overlay_heatmap(rgb, heatmap, alpha=2)


def _axes_with_image(figure):
    return [axes for axes in figure.axes if axes.images]


def test_attention_figure_is_readable_for_a_small_image():
    from matplotlib.colorbar import Colorbar

    digit = images(1, 28, seed=3)[0]
    heatmap = np.arange(16, dtype="float32").reshape(4, 4)
    figure = visualize.attention_figure(digit, heatmap, title="predicted: 7 (0.91)")
    width, height = figure.get_size_inches() * figure.dpi
    (shown,) = [axes for axes in _axes_with_image(figure) if axes.get_title()]
    assert shown.images[0].get_array().shape[:2] == (480, 480)  # 28x28 upsampled to the long side 480
    box = shown.get_window_extent()  # pixels on the figure: one per image pixel, within rounding
    assert box.width == pytest.approx(480, abs=1) and box.height == pytest.approx(480, abs=1)
    assert width > 480 + 50 and height > 480 + 20  # room for the colour bar and the title
    bars = [axes for axes in figure.axes if isinstance(getattr(axes, "_colorbar", None), Colorbar)]
    assert len(bars) == 1 and "Attention" in bars[0].get_ylabel()
    assert shown.get_title() == "predicted: 7 (0.91)"
    big = visualize.attention_figure(images(1, (600, 512))[0], heatmap)  # large enough already: kept
    (axes,) = _axes_with_image(big)
    assert axes.images[0].get_array().shape[:2] == (600, 512) and not axes.get_title()


def test_saved_attention_figure_has_the_figures_size(tmp_path):
    from PIL import Image

    path = visualize.save_attention_figure(images(1, (20, 40))[0], np.eye(2), tmp_path / "f.png", title="t")
    figure = visualize.attention_figure(images(1, (20, 40))[0], np.eye(2), title="t")
    expected = tuple(int(round(v)) for v in figure.get_size_inches() * figure.dpi)
    assert Image.open(path).size == expected and expected[0] >= 480


def test_position_similarity_figure_summarises_a_large_grid():
    rng = np.random.default_rng(0)
    assert visualize.summary_positions(24, 12) == (list(range(0, 24, 3)), list(range(0, 12, 3)), 3)
    assert visualize.summary_positions(16, 16)[2] == 1 and visualize.summary_positions(17, 3)[2] == 3
    for rows, cols, panels, step in ((4, 6, 24, 1), (24, 24, 64, 3)):
        similarity = rng.uniform(-1, 1, (rows, cols, rows, cols))
        figure = visualize.position_similarity_figure(similarity)
        shown = _axes_with_image(figure)
        assert len(shown) == panels
        title = figure._suptitle.get_text()
        if step == 1:
            assert "summary" not in title
        else:
            assert f"every {step} positions" in title and f"{rows}x{cols}" in title and f"of {rows * cols} panels" in title
            assert shown[1].images[0].get_array().shape == (rows, cols)  # each panel is still a full map
            np.testing.assert_allclose(shown[1].images[0].get_array(), similarity[0, step], atol=1e-12)
        assert len(figure.axes) == panels + 1  # and the colour bar


def test_prediction_title_names_the_top_class_and_its_probability():
    from keras_vit.cli.attention import _prediction_title

    model = tiny_vit(image_size=32, num_classes=3)
    model.class_names = ["ant", "bee", "cat"]
    x = keras_vit.preprocess_input(images(1, 32, seed=2)[0])
    probabilities = np.asarray(model(x[None]))[0]
    best = int(np.argmax(probabilities))
    assert _prediction_title(model, x, None) == f"predicted: {model.class_names[best]} ({probabilities[best]:.2f})"
    headless = tiny_vit(image_size=32, include_top=False)
    assert _prediction_title(headless, x, None) == "attention rollout of vit (no classification head)"


@pytest.mark.slow
def test_attention_cli_titles_the_predicted_class(tmp_path, monkeypatch):
    model = tiny_vit(image_size=(32, 48), patch_size=8, num_classes=3)
    model.class_names = ["ant", "bee", "cat"]
    path = str(tmp_path / "model.keras")
    keras_vit.save_model(model, path)
    titles = []
    save = visualize.save_attention_figure
    monkeypatch.setattr(visualize, "save_attention_figure", lambda *a, **k: titles.append(k["title"]) or save(*a, **k))
    photo = images(1, (30, 45), seed=1)[0].astype("uint8")
    from PIL import Image

    Image.fromarray(photo).save(tmp_path / "photo.png")
    assert cli.main(["attention", path, str(tmp_path / "photo.png"), "--out", str(tmp_path / "a.png")]) == 0
    x = keras_vit.preprocess_input(keras_vit.load_image(str(tmp_path / "photo.png"), (32, 48)))
    probabilities = model.predict(x[None], verbose=0)[0]
    best = int(np.argmax(probabilities))
    (title,) = titles
    assert title.startswith(f"predicted: {['ant', 'bee', 'cat'][best]} (")
    assert float(title.split("(")[1].rstrip(")")) == pytest.approx(probabilities[best], abs=0.006)


def test_attention_cli(tmp_path, capsys):
    import matplotlib
    from PIL import Image

    model = tiny_vit(image_size=(32, 48), patch_size=8)
    path = str(tmp_path / "model.keras")
    model.save(path)
    photo = os.path.join(matplotlib.get_data_path(), "sample_data", "grace_hopper.jpg")  # 512 x 600 RGB
    out = tmp_path / "map.png"
    code = cli.main(
        ["attention", path, photo, "--out", str(out)]
        + ["--distance-out", str(tmp_path / "d.png"), "--position-out", str(tmp_path / "p.png")]
    )
    assert code == 0
    assert is_png(out) and min(Image.open(out).size) > max(Image.open(photo).size) * 0.8  # the photo plus a bar and a title
    assert is_png(tmp_path / "d.png") and is_png(tmp_path / "p.png")
    plain = tmp_path / "plain.png"
    assert cli.main(["attention", path, photo, "--out", str(plain), "--plain"]) == 0
    assert is_png(plain, size=Image.open(photo).size)
    Image.new("LA", (20, 30), (128, 200)).save(tmp_path / "gray_alpha.png")  # converted, not rejected
    assert cli.main(["attention", path, str(tmp_path / "gray_alpha.png"), "--out", str(tmp_path / "g.png"), "--plain"]) == 0
    assert is_png(tmp_path / "g.png", size=(20, 30))
    capsys.readouterr()
    (tmp_path / "notes.txt").write_text("hello")
    assert cli.main(["attention", path, str(tmp_path / "notes.txt"), "--out", str(tmp_path / "x.png")]) == 2
    assert "notes.txt" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "saved_model.pb").write_bytes(b"")
    assert cli.main(["attention", str(tmp_path / "served"), photo, "--out", str(tmp_path / "y.png")]) == 2
    assert ".keras" in capsys.readouterr().err


def test_hybrid_attention():
    model = keras_vit.HybridViT(
        block_units=(1, 1), width=0.5, patch_size=1, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
        image_size=(32, 64), num_classes=3,
    )
    h, w = 32, 64
    grid = attention.patch_grid(model)
    tokens = grid[0] * grid[1] + 1
    weights = keras_vit.attention_weights(model, images(2, (h, w)))
    assert weights.shape == (2, 2, 4, tokens, tokens)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert keras_vit.rollout_map(model, images(1, (h, w))[0], weights=weights[0]).shape == (h, w)
    assert keras_vit.mean_attention_distance(model, None, weights=weights).shape == (2, 4)
    features = keras_vit.forward_features(model, images(2, (h, w)), blocks=[-1])
    assert features["block_1"].shape == (2, tokens, 32)
