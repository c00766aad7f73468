"""``include_top=False`` with ``pooling=None`` / ``"feature_map"`` / ``"avg"`` / ``"max"`` on a timm file whose
pooling has weights of its own: attention pooling (SigLIP, Perception Encoder core) or a norm after pooling
(``fc_norm``: EVA-02, timm's ``global_pool='avg'`` models).

``from_pretrained`` says these poolings "may replace" the file's, and timm's ``forward_features`` gives those tokens
(``fc_norm`` comes after pooling, so the tokens have no final norm). keras_vit refused them: the attention-pooling
head's weights had no place ("a different architecture?"), and ``fc_norm`` was an "Impossible ViTConfig" with
``pooling=None``. They load now, those weights skipped and named in the load report.
"""

import json
import os

import numpy as np
import pytest

import keras_vit
import reference_timm

safetensors_numpy = pytest.importorskip("safetensors.numpy")

SIZES = dict(patch_size=8, embed_dim=32, depth=2, num_heads=4, img_size=32, num_classes=0)
FILES = {  # timm architecture, the switches of its registration (for the reference)
    "siglip": ("vit_base_patch16_siglip_224", dict(class_token=False, global_pool="map")),
    "avg_fc_norm": ("vit_small_patch14_dinov2", dict(init_values=1e-5, global_pool="avg")),
}


def _write(folder, family):
    architecture, switches = FILES[family]
    args = dict(SIZES, **switches)
    state = reference_timm.state_dict(args, seed=5)
    os.makedirs(folder)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    stated = {k: v for k, v in args.items() if k in SIZES and k != "num_classes"}
    stated.update({k: v for k, v in switches.items() if k == "global_pool"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architecture": architecture, "num_classes": 0, "model_args": stated,
                   "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.5] * 3, "std": [0.5] * 3}}, f)
    return state, args


def _tokens(state, args, x):
    """timm's forward_features: every token, the final norm where there is no fc_norm."""
    args = dict(args, global_pool="", fc_norm=reference_timm.full_args(args)["fc_norm"])
    return np.stack([reference_timm.forward(image, state, args) for image in x])


def _close(y, ref):
    y = np.asarray(y, np.float64)
    assert y.shape == ref.shape
    assert np.max(np.abs(y - ref)) <= 1e-4 * np.max(np.abs(ref))


@pytest.mark.parametrize("family", sorted(FILES))
def test_the_tokens_of_a_file_whose_pooling_has_weights(tmp_path, family):
    state, args = _write(str(tmp_path / family), family)
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    tokens = _tokens(state, args, x)
    patches = tokens[:, 1:] if args.get("class_token", True) else tokens
    model = keras_vit.from_pretrained(str(tmp_path / family), include_top=False, pooling=None)
    _close(model(x), tokens)
    skipped = " ".join(model.load_report.skipped)
    assert ("MAPHead_0" in skipped) if family == "siglip" else ("fc_norm" in skipped)
    feature_map = keras_vit.from_pretrained(str(tmp_path / family), include_top=False, pooling="feature_map")
    _close(feature_map(x), patches.reshape(2, 4, 4, -1))


def test_avg_and_max_of_an_attention_pooled_file_are_those_of_its_patch_tokens(tmp_path):
    state, args = _write(str(tmp_path / "siglip"), "siglip")
    x = np.random.default_rng(1).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    tokens = _tokens(state, args, x)
    for pooling, reduce in (("avg", np.mean), ("max", np.max)):
        model = keras_vit.from_pretrained(str(tmp_path / "siglip"), include_top=False, pooling=pooling)
        _close(model(x), reduce(tokens, axis=1))


def test_the_file_own_pooling_still_reads_its_weights(tmp_path):
    _write(str(tmp_path / "siglip"), "siglip")
    model = keras_vit.from_pretrained(str(tmp_path / "siglip"), include_top=False)
    assert model.vit_config.pooling == "map" and not any(k.startswith("MAPHead_0") for k in model.load_report.skipped)
