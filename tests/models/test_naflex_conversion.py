"""A classic ViT's weights read as the NaFlex model timm builds with ``use_naflex=True`` (keras_vit/models/naflex_conversion.py).

timm 1.0.31's conversion (naflexvit.py ``checkpoint_filter_fn``, ``_create_naflexvit_from_classic``): the class token's
position added to ``cls_token`` and the rest of ``pos_embed`` made the learned ``(rows, cols)`` table, resampled per
image bicubically with antialiasing (NaFlexVitCfg's defaults), ``global_pool`` and the norms kept, the pooling over the
valid patches. The NumPy reference (tests/reference_naflex.py) runs that model one image at a time from the ORIGINAL
arrays, converted here as timm converts them; tools/check_timm_naflex.py runs timm itself.
"""

import os
import sys

import numpy as np
import pytest

import keras_vit
from keras_vit.layers import naflex_grid
from keras_vit.models import naflex_conversion
from keras_vit.weights.mapping import layer_weights
import reference_naflex
from helpers import save_npz, vit_checkpoint

GRIDS = ((4, 4), (3, 6), (6, 2))  # 1:1 at the table's own grid, 16:9-ish and 1:3: the table resampled
BUDGET = 20


def _pixels(patch=8, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 255, (h * patch, w * patch, 3)).astype("float32") for h, w in GRIDS]


def _timm_converted(p, num_layers=2, fold=True):
    """The reference's weights of the NaFlex model timm builds from the original arrays ``p``: ``pos_embed[:, 0]``
    added to ``cls_token`` and dropped from the table (``fold=False``: the class position lost, for the can-fail check)."""
    pos = p["Transformer/posembed_input/pos_embedding"]
    w = {"patch_encoder/projection/kernel": p["embedding/kernel"].reshape(-1, p["embedding/kernel"].shape[-1]),
         "patch_encoder/projection/bias": p["embedding/bias"],
         "patch_encoder/class_token": p["cls"] + (pos[:, :1] if fold else 0), "patch_encoder/position_embedding": pos[:, 1:],
         "encoder_norm/gamma": p["Transformer/encoder_norm/scale"], "encoder_norm/beta": p["Transformer/encoder_norm/bias"],
         "head/kernel": p["head/kernel"], "head/bias": p["head/bias"]}
    for i in range(num_layers):
        b, o = f"Transformer/encoderblock_{i}/", f"transformer_block_{i}/"
        for ln, name in (("LayerNorm_0", "layer_norm_1"), ("LayerNorm_2", "layer_norm_2")):
            w[o + name + "/gamma"], w[o + name + "/beta"] = p[b + ln + "/scale"], p[b + ln + "/bias"]
        a = b + "MultiHeadDotProductAttention_1/"
        for n in ("query", "key", "value"):
            w[o + f"attention/{n}/kernel"], w[o + f"attention/{n}/bias"] = p[a + n + "/kernel"], p[a + n + "/bias"]
        w[o + "attention/attention_output/kernel"], w[o + "attention/attention_output/bias"] = p[a + "out/kernel"], p[a + "out/bias"]
        for dense, name in (("Dense_0", "mlp_dense_1"), ("Dense_1", "mlp_dense_2")):
            w[o + name + "/kernel"], w[o + name + "/bias"] = p[b + "MlpBlock_3/" + dense + "/kernel"], p[b + "MlpBlock_3/" + dense + "/bias"]
    return {k: np.asarray(v, np.float64) for k, v in w.items()}


REFERENCE_CFG = dict(patch=8, grid=(4, 4), layers=2, heads=4, class_token=True, registers=0, pooling="token",
                     aspect_preserving=False, factorized=False, kernel="bicubic_torch_antialias")


def test_an_npz_read_as_naflex_matches_timms_conversion(tmp_path):
    """Original ViT arrays (class token with a position, token pooling) with ``input_mode="naflex"``: a padded batch of
    three aspect ratios equals the NumPy NaFlex model of timm's conversion; the class position and the bicubic rule
    both change the answer, so the comparison can fail."""
    p = vit_checkpoint(scale=0.5)
    model = keras_vit.from_pretrained(save_npz(tmp_path / "vit.npz", p), input_mode="naflex", max_patches=BUDGET,
                                      classifier_activation=None)
    c = model.vit_config
    assert (c.input_mode, c.max_patches, c.position_resampling, c.grid) == ("naflex", BUDGET, "bicubic_torch_antialias", (4, 4))
    pixels = _pixels()
    got = np.asarray(model(naflex_grid.batch(pixels, 8, BUDGET)))
    weights = _timm_converted(p)
    expected = np.stack([reference_naflex.forward(image, weights, REFERENCE_CFG) for image in pixels])
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * scale)
    other_rule = reference_naflex.forward(pixels[1], weights, dict(REFERENCE_CFG, kernel="linear_aligned"))
    assert np.abs(other_rule - expected[1]).max() > 1e-3 * scale
    no_class_position = reference_naflex.forward(pixels[0], _timm_converted(p, fold=False), REFERENCE_CFG)
    assert np.abs(no_class_position - expected[0]).max() > 1e-3 * scale
    notes = "\n".join(model.load_report.notes)
    assert "use_naflex=True" in notes and "position_resampling='bicubic_torch_antialias'" in notes
    assert "folds pos_embed[:, 0] into cls_token" in notes


@pytest.mark.parametrize("layout", ["timm", "transformers"])
def test_timm_and_transformers_files_get_the_same_conversion(tmp_path, layout):
    """The same arrays in timm's and transformers' layouts, read with ``max_patches`` alone (the NaFlex sources'
    convention), equal the same reference: the conversion is made on the architecture every source is read into."""
    from foreign_files import TINY_TIMM_CONFIG, timm_file, transformers_folder

    p = vit_checkpoint(scale=0.5)
    if layout == "timm":
        path = timm_file(tmp_path / "timm", p, TINY_TIMM_CONFIG)
    else:
        path = transformers_folder(tmp_path / "hf", p, eps=1e-6)
    model = keras_vit.from_pretrained(path, max_patches=BUDGET, classifier_activation=None)
    assert (model.vit_config.input_mode, model.vit_config.position_resampling) == ("naflex", "bicubic_torch_antialias")
    pixels = _pixels()
    got = np.asarray(model(naflex_grid.batch(pixels, 8, BUDGET)))
    expected = np.stack([reference_naflex.forward(image, _timm_converted(p), REFERENCE_CFG) for image in pixels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def test_at_the_tables_own_grid_the_naflex_model_is_the_classic_one(tmp_path):
    """An image at the stored grid: no resampling, no padding in its attention, so the NaFlex model's logits are the
    classic image model's (the class position, the head, the pooling all read alike). The classic model saved as
    ``.keras`` and read with a budget is the same NaFlex model."""
    path = save_npz(tmp_path / "vit.npz", vit_checkpoint(scale=0.5))
    classic = keras_vit.from_pretrained(path, classifier_activation=None)
    naflex = keras_vit.from_pretrained(path, max_patches=BUDGET, classifier_activation=None)
    image = _pixels()[0]
    got = np.asarray(naflex(naflex_grid.batch([image], 8, BUDGET)))
    expected = np.asarray(classic(image[None]))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    keras_vit.save_model(classic, str(tmp_path / "classic.keras"))
    saved = keras_vit.from_pretrained(str(tmp_path / "classic.keras"), max_patches=BUDGET, classifier_activation=None)
    assert saved.vit_config == naflex.vit_config
    batch = naflex_grid.batch(_pixels(), 8, BUDGET)
    np.testing.assert_allclose(np.asarray(saved(batch)), np.asarray(naflex(batch)), rtol=0, atol=1e-6 * np.abs(expected).max())


def test_a_rectangular_table_converts_at_the_grid_its_config_states(tmp_path):
    """A 4 x 6 table (transformers' ``image_size: [32, 48]``), which timm's checkpoint_filter_fn cannot reshape: the
    NaFlex model's table is 4 x 6, and a 32 x 48 image gives the classic model's logits."""
    from foreign_files import transformers_folder

    folder = transformers_folder(tmp_path / "hf", vit_checkpoint(grid=(4, 6), scale=0.5), eps=1e-6, image_size=[32, 48])
    classic = keras_vit.from_pretrained(folder, classifier_activation=None)
    naflex = keras_vit.from_pretrained(folder, max_patches=30, classifier_activation=None)
    assert naflex.vit_config.grid == (4, 6)
    image = np.random.default_rng(0).uniform(0, 255, (32, 48, 3)).astype("float32")
    expected = np.asarray(classic(image[None]))
    np.testing.assert_allclose(np.asarray(naflex(naflex_grid.batch([image], 8, 30))), expected, rtol=0,
                               atol=1e-5 * np.abs(expected).max())


def test_registers_without_a_class_position_and_gap(tmp_path):
    """timm's reg4 gap layout (no class token, registers without positions, ``no_embed_class``): nothing to fold, the
    mean of the valid patches with fc_norm, the table resampled bicubically; against the reference on the model's
    weights (the weight mapping is the image model's, tested with it)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "weights"))
    from test_timm_family import write_timm  # its writer of timm's family layouts

    write_timm(str(tmp_path / "reg4"), "reg4_gap")
    model = keras_vit.from_pretrained(str(tmp_path / "reg4"), include_top=False, input_mode="naflex", max_patches=64)
    c = model.vit_config
    assert (c.class_token, c.num_register_tokens, c.prefix_positions, c.pooling, c.fc_norm) == (False, 4, False, "gap", True)
    patch = c.patch_size[0]
    pixels = _pixels(patch)
    got = np.asarray(model(naflex_grid.batch(pixels, patch, 64)))
    weights = {path: np.asarray(v, np.float64) for layer in model.layers for path, v in layer_weights(layer).items()}
    cfg = dict(REFERENCE_CFG, patch=patch, grid=c.grid, layers=c.num_layers, heads=c.num_heads, class_token=False,
               registers=4, pooling="gap")
    expected = np.stack([reference_naflex.forward(image, weights, cfg) for image in pixels])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * np.abs(expected).max())


def _no_build(monkeypatch):
    from keras_vit.models import pretrained

    def built(*args, **kwargs):
        raise AssertionError("a model was built before the refusal")

    monkeypatch.setattr(pretrained, "build_model", built)


def _npz_with(tmp_path, **extra):
    p = vit_checkpoint()
    p.update(extra)
    return save_npz(tmp_path / "vit.npz", p)


@pytest.mark.parametrize("extra, phrase", [
    ({"Transformer/encoderblock_0/MultiHeadDotProductAttention_1/rope_frequencies": np.zeros((2, 4, 2), "float32"),
      "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/rope_frequencies": np.zeros((2, 4, 2), "float32")},
     r"RoPE \(rope='mixed'\)"),
    ({"embedding_norm/scale": np.ones(32, "float32"), "embedding_norm/bias": np.zeros(32, "float32")},
     r"a norm of the patch embedding \(patch_norm=True"),
])
def test_what_the_naflex_path_lacks_is_refused_by_name_before_building(tmp_path, monkeypatch, extra, phrase):
    path = _npz_with(tmp_path, **extra)
    _no_build(monkeypatch)
    with pytest.raises(ValueError, match=r"cannot be read as a NaFlex model .*lacks " + phrase):
        keras_vit.from_pretrained(path, max_patches=BUDGET)


def test_a_distillation_token_is_refused_by_name(tmp_path, monkeypatch):
    p = vit_checkpoint()
    pos = p["Transformer/posembed_input/pos_embedding"]
    p["dist"] = p["cls"] + 1
    p["Transformer/posembed_input/pos_embedding"] = np.concatenate([pos[:, :1], pos], axis=1)  # class, distillation, 16
    path = save_npz(tmp_path / "deit.npz", p)
    _no_build(monkeypatch)
    with pytest.raises(ValueError, match=r"lacks DeiT's distillation token \(distillation_token=True\)"):
        keras_vit.from_pretrained(path, input_mode="naflex")


def test_a_hybrids_resnet_stem_is_refused_by_name(tmp_path, monkeypatch):
    from hybrid_helpers import hybrid_checkpoint

    path = save_npz(tmp_path / "r50.npz", hybrid_checkpoint())
    _no_build(monkeypatch)
    with pytest.raises(ValueError, match=r"lacks a hybrid's ResNet stem \(stem='resnet', block_units=\(2, 1, 1\)\)"):
        keras_vit.from_pretrained(path, max_patches=BUDGET)


def test_a_classic_c_radio_table_timm_cannot_load_is_refused():
    """timm builds C-RADIO's NaFlex model with a 128 x 128 table: a classic 32 x 32 one fails in timm, and here."""
    arch = dict(image_size=512, patch_size=16, rope=None, distillation_token=False, patch_norm=False, pooling="token")
    assert "128 x 128 pos_embed_grid_size" in naflex_conversion.lacking(arch, "vit_base_patch16_radio_v3")[0]
    assert naflex_conversion.lacking(dict(arch, image_size=2048), "vit_base_patch16_radio_v3") == []
    assert naflex_conversion.lacking(arch, "vit_base_patch16_224") == []


def test_image_mode_with_a_budget_is_still_refused(tmp_path):
    """``input_mode="image"`` with ``max_patches`` asks for no conversion: the config refuses the pair by name."""
    with pytest.raises(ValueError, match=r"`max_patches` is read only with input_mode='naflex'"):
        keras_vit.from_pretrained(_npz_with(tmp_path), input_mode="image", max_patches=BUDGET)


def test_convert_says_what_a_naflex_model_takes(tmp_path, capsys):
    """It printed two of the three inputs' shapes as the input size."""
    from keras_vit import cli

    config = keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                                 num_classes=3, input_mode="naflex", max_patches=16, pooling="gap", class_token=False)
    path = str(tmp_path / "naflex.keras")
    keras_vit.save_model(keras_vit.build_model(config), path)
    assert cli.main(["convert", path, "--output", str(tmp_path / "out.keras")]) == 0
    assert "NaFlex, up to 16 patches, output (3,)" in capsys.readouterr().out


def test_registers_with_positions_are_refused_by_name_as_the_distillation_token_is(tmp_path):
    """It ended in NaFlex's internal 'Impossible NaFlex ViTConfig', naming neither the source nor its switch."""
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                          num_classes=3, num_register_tokens=2, register_positions=True)
    path = str(tmp_path / "so150m_like.keras")
    keras_vit.save_model(model, path)
    with pytest.raises(ValueError, match=r"so150m_like.keras' cannot be read as a NaFlex model .*register_positions=True"):
        keras_vit.from_pretrained(path, max_patches=BUDGET)
