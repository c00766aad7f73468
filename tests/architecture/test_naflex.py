"""The NaFlex input path: a tiny model on a padded batch of three aspect ratios against an independent NumPy forward
(tests/reference_naflex.py, one image at a time without padding), the mask (padding changes no valid token), the
config's checks, and a .keras round trip."""

import keras
import numpy as np
import pytest

from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.model import VisionTransformer
from keras_vit.layers import naflex_grid
from keras_vit.weights.mapping import layer_weights
import reference_naflex

P = 4
GRIDS = ((4, 4), (3, 6), (6, 2))  # 1:1, 2:1 (wide), 1:3 (tall): 16, 18 and 12 patches, padded to 20
BUDGET = 20
CASES = {
    "learned_gap": dict(pooling="gap", class_token=False, num_register_tokens=2, fc_norm=True, final_norm=False,
                        layer_scale_init=1e-5, position_resampling="bicubic_torch_antialias"),
    "aspect_preserving_token": dict(pooling="token", prefix_positions=False, position_aspect_preserving=True,
                                    position_resampling="bicubic_torch_antialias"),
    "factorized_gap": dict(pooling="gap", class_token=False, num_register_tokens=1, factorized_positions=True,
                           position_aspect_preserving=True, fc_norm=True, final_norm=False),
    "bilinear_map": dict(pooling="map", class_token=False, position_resampling="bilinear_torch_antialias"),
    # C-RADIO (timm's naflexvit_*_radio_*): a larger table resampled bilinearly without antialiasing to the square of
    # the longer side (down for every grid here), align_corners False (v3-L / g, v4) or True (v3-B / H)
    "radio_token": dict(image_size=7 * P, pooling="token", prefix_positions=False, num_register_tokens=3,
                        final_norm=False, layer_scale_init=1e-5, position_aspect_preserving=True,
                        position_resampling="bilinear_torch"),
    "radio_v3_token": dict(image_size=7 * P, pooling="token", prefix_positions=False, num_register_tokens=3,
                           final_norm=False, position_aspect_preserving=True, position_resampling="linear_aligned"),
}


def tiny(case, **overrides):
    kwargs = dict(image_size=4 * P, patch_size=P, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5,
                  classifier_activation=None, input_mode="naflex", max_patches=BUDGET)
    kwargs.update(CASES[case], **overrides)
    model = VisionTransformer.from_vit_config(ViTConfig(**kwargs))
    rng = np.random.default_rng(1)
    for variable in model.weights:  # random weights everywhere (the zero head and near-zero LayerScale included)
        scale = 0.3 if "position" in variable.path or "token" in variable.path else 0.2
        variable.assign(rng.normal(0.0, scale, variable.shape).astype("float32"))
    return model


def images(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 255, (h * P, w * P, 3)).astype("float32") for h, w in GRIDS]


def reference_config(model):
    c = model.vit_config
    return dict(patch=P, grid=c.grid, layers=c.num_layers, heads=c.num_heads, class_token=c.class_token,
                registers=c.num_register_tokens, pooling="gap" if c.pooling == "avg" else c.pooling,
                aspect_preserving=c.position_aspect_preserving, factorized=c.factorized_positions,
                kernel=c.position_resampling)


@pytest.mark.parametrize("case", sorted(CASES))
def test_padded_batch_matches_the_numpy_reference(case):
    model = tiny(case)
    weights = {path: np.asarray(v, np.float64) for layer in model.layers for path, v in layer_weights(layer).items()}
    pixels = images()
    got = np.asarray(model(naflex_grid.batch(pixels, P, BUDGET)))
    expected = np.stack([reference_naflex.forward(image, weights, reference_config(model)) for image in pixels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_padding_changes_no_valid_token():
    # max_patches=None: one model takes any length, so the same images come with more padding too
    model = tiny("learned_gap", pooling=None, include_top=False, fc_norm=False, final_norm=True, max_patches=None)
    pixels = images()
    inputs = naflex_grid.batch(pixels, P, BUDGET)
    tokens = np.asarray(model(inputs))
    prefix = model.vit_config.num_prefix_tokens
    noisy = {k: v.copy() for k, v in inputs.items()}
    rng = np.random.default_rng(7)
    pad = ~noisy["patch_valid"]
    noisy["patches"][pad] = rng.uniform(0, 255, noisy["patches"][pad].shape)  # garbage in the padding rows
    noisy["patch_coord"][pad] = rng.integers(0, 3, noisy["patch_coord"][pad].shape)
    longer = naflex_grid.batch(pixels, P, BUDGET + 9)  # more padding
    for other in (noisy, longer):
        out = np.asarray(model(other))
        for b in range(len(pixels)):
            n = int(inputs["patch_valid"][b].sum())
            np.testing.assert_allclose(out[b, :prefix + n], tokens[b, :prefix + n], rtol=0, atol=1e-5)
    alone = np.asarray(model(naflex_grid.batch(pixels[2:], P, BUDGET)))  # the same image without the others
    np.testing.assert_allclose(alone[0, :prefix + 12], tokens[2, :prefix + 12], rtol=0, atol=1e-5)


def test_a_mask_ignored_would_be_seen():
    """The padding does change the output when the mask is not given: the comparison above can fail."""
    model = tiny("learned_gap", pooling=None, include_top=False, fc_norm=False, final_norm=True)
    inputs = naflex_grid.batch(images(), P, BUDGET)
    everything = dict(inputs, patch_valid=np.ones_like(inputs["patch_valid"]))
    assert np.abs(np.asarray(model(everything)) - np.asarray(model(inputs)))[0, :18].max() > 1e-3


def test_keras_file_round_trip(tmp_path):
    model = tiny("factorized_gap")
    inputs = naflex_grid.batch(images(), P, BUDGET)
    path = str(tmp_path / "naflex.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.vit_config == model.vit_config
    np.testing.assert_allclose(np.asarray(loaded(inputs)), np.asarray(model(inputs)), rtol=0, atol=1e-6)


@pytest.mark.parametrize("changes, match", [
    (dict(max_patches=16), "read only with input_mode='naflex'"),
    (dict(input_mode="naflex", max_patches=0), "max_patches"),
    (dict(input_mode="naflex", pooling="feature_map", include_top=False), "pooling='feature_map'"),
    (dict(input_mode="naflex", position_resampling="bicubic_torch"), "position_resampling='bicubic_torch'"),
    (dict(input_mode="flex"), "input_mode='flex'"),
    (dict(grid_rule="siglip2"), "grid_rule='siglip2'"),  # an image model has no grid rule to choose
    (dict(input_mode="naflex", grid_rule="clip"), r"Unknown `grid_rule`.*grid_rule='clip'"),
])
def test_impossible_configs_are_refused_by_name(changes, match):
    with pytest.raises(ValueError, match=match):
        ViTConfig(image_size=16, patch_size=4, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, **changes)


def test_a_timm_naflex_folder_loads_into_the_naflex_model(tmp_path):
    """timm's naflexvit_base_patch16_gap layout (embeds.proj (D, P*P*C), embeds.pos_embed (1, rows, cols, D), registers,
    LayerScale, fc_norm) written without torch, read by from_pretrained into the NaFlex ViT."""
    import json

    import safetensors.numpy
    from foreign_files import timm_state_dict
    from helpers import vit_checkpoint

    import keras_vit

    d, p = 32, 4
    params = vit_checkpoint(patch_size=p, hidden_size=d, num_layers=1, num_heads=4, mlp_dim=4 * d, grid=(16, 16))
    t = timm_state_dict(params, num_layers=1, d=d)
    rng = np.random.default_rng(3)
    t = {k: v for k, v in t.items() if k not in ("cls_token", "head.weight", "head.bias")}
    t["fc_norm.weight"], t["fc_norm.bias"] = t.pop("norm.weight"), t.pop("norm.bias")
    t["embeds.proj.weight"] = t.pop("patch_embed.proj.weight").transpose(0, 2, 3, 1).reshape(d, p * p * 3).copy()
    t["embeds.proj.bias"] = t.pop("patch_embed.proj.bias")
    t["embeds.pos_embed"] = t.pop("pos_embed")[:, 1:].reshape(1, 16, 16, d).copy()  # the registration's (16, 16)
    t["embeds.reg_token"] = rng.normal(size=(1, 4, d)).astype("float32")
    t["blocks.0.ls1.gamma"], t["blocks.0.ls2.gamma"] = (1 + 0.1 * rng.normal(size=(2, d))).astype("float32")
    safetensors.numpy.save_file(t, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "architecture": "naflexvit_base_patch16_gap", "num_classes": 0,
        "model_args": {"depth": 1, "embed_dim": d, "num_heads": 4, "patch_size": p}}))
    model = keras_vit.from_pretrained(str(tmp_path), include_top=False, max_patches=BUDGET)
    c = model.vit_config
    assert (c.input_mode, c.grid, c.num_register_tokens, c.pooling, c.fc_norm, c.class_token) == ("naflex", (16, 16), 4, "gap", True, False)
    encoder = model.get_layer("patch_encoder")
    np.testing.assert_array_equal(np.asarray(encoder.projection.kernel), t["embeds.proj.weight"].T)  # (ph, pw, C) rows
    np.testing.assert_array_equal(np.asarray(encoder.position_embedding)[0], t["embeds.pos_embed"].reshape(256, d))
    weights = {path: np.asarray(v, np.float64) for layer in model.layers for path, v in layer_weights(layer).items()}
    pixels = images()
    got = np.asarray(model(naflex_grid.batch(pixels, P, BUDGET)))
    expected = np.stack([reference_naflex.forward(image, weights, reference_config(model)) for image in pixels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_aimv2s_switches_meet_naflex():
    """RMSNorm reaches every norm of a NaFlex model (the pre-norm too); a patch norm, which the NaFlex patch encoder
    lacks, is refused by name."""
    import keras_vit

    small = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, num_classes=3,
                 input_mode="naflex", max_patches=16)
    model = keras_vit.ViT(**small, norm_type="rmsnorm", pre_norm=True)
    assert type(model.get_layer("pre_norm")).__name__ == "RMSNorm"
    with pytest.raises(ValueError, match=r"patch_norm=True"):
        keras_vit.ViTConfig(**small, patch_norm=True)
