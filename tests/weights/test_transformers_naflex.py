"""transformers' SigLIP 2 NaFlex read as keras_vit's NaFlex model at any grid: a folder in transformers' layout
(written offline by tests/reference_hf_family.py) loaded with ``max_patches``, one padded batch of three aspect ratios
at several budgets against transformers' forward pass in NumPy, one image at a time at its own grid (the table
resampled by torch's antialiased bilinear weights, tests/reference_naflex.py). ``tools/check_transformers_naflex.py``
runs transformers itself."""

import json
import os

import numpy as np
import pytest

import reference_hf_family as ref
import reference_naflex
from keras_vit.layers import naflex_grid

safetensors_numpy = pytest.importorskip("safetensors.numpy")

P, TABLE = 4, 4  # patches of 4 pixels; a 4 x 4 position table (num_patches=16)
SHAPES = ((48, 48), (36, 64), (60, 20))  # 1:1, 16:9, 1:3 before the budget's resize
_VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, patch_size=P, num_channels=3,
               intermediate_size=64, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, num_patches=TABLE * TABLE)
CONFIGS = {
    "Siglip2VisionModel": dict(_VISION, model_type="siglip2_vision_model", architectures=["Siglip2VisionModel"]),
    "Siglip2ForImageClassification": dict(
        model_type="siglip2", architectures=["Siglip2ForImageClassification"], id2label={str(i): f"c{i}" for i in range(3)},
        vision_config=dict(_VISION, model_type="siglip2_vision_model"), text_config={"hidden_size": 16}),
}


def write_folder(folder, name):
    config = CONFIGS[name]
    model_type = config["model_type"]
    sd = ref.state_dict(model_type, config, seed=3)
    sd["vision_model.embeddings.position_embedding.weight"] *= 4.0  # positions that move the output
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(sd, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Siglip2ImageProcessor", "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                   "patch_size": P, "max_num_patches": 16}, f)
    return str(folder), sd, config.get("vision_config", config)


def transformers_forward(pixels, sd, vision):
    """Siglip2's output for one image ``(h * P, w * P, 3)`` in [0, 255], its own patches only: the table resampled to
    ``(h, w)`` (resize_positional_embeddings: antialiased bilinear weights per axis), then the SigLIP forward."""
    h, w = pixels.shape[0] // P, pixels.shape[1] // P
    key = "vision_model.embeddings.position_embedding.weight"
    table = sd[key].astype(np.float64).reshape(TABLE, TABLE, -1)
    resized = np.einsum("ir,rcd->icd", reference_naflex.antialiased(h, TABLE, "bilinear"), table)
    resized = np.einsum("jc,icd->ijd", reference_naflex.antialiased(w, TABLE, "bilinear"), resized)
    x = ((pixels.astype(np.float64) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)
    return ref._siglip(x, {**sd, key: resized.reshape(h * w, -1)}, vision, linear_patch=True)


def budget_images(budget, seed=0):
    """The three images at SigLIP 2's grid under ``budget`` (random pixels at the resized size)."""
    rng = np.random.default_rng(seed)
    sizes = [naflex_grid.target_size(shape, P, budget, rule="siglip2") for shape in SHAPES]
    return [rng.uniform(0, 255, (h, w, 3)).astype("float32") for h, w in sizes]


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("budget", [9, 24, 40])  # grids smaller and larger than the 4 x 4 table
def test_siglip2_at_any_grid_matches_transformers(tmp_path, name, budget):
    import keras_vit

    folder, sd, vision = write_folder(tmp_path / name, name)
    model = keras_vit.from_pretrained(folder, max_patches=budget, classifier_activation=None)
    c = model.vit_config
    assert (c.input_mode, c.grid_rule, c.position_resampling, c.grid) == ("naflex", "siglip2", "bilinear_torch_antialias", (4, 4))
    assert c.pooling == ("gap" if name.endswith("Classification") else "map")
    pixels = budget_images(budget)
    grids = {(p.shape[0] // P, p.shape[1] // P) for p in pixels}
    assert len(grids) == 3 and any(h > TABLE or w > TABLE for h, w in grids) == (budget > TABLE * TABLE)
    got = np.asarray(model(naflex_grid.batch(pixels, P, budget)))
    expected = np.stack([transformers_forward(image, sd, vision) for image in pixels])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    assert "SigLIP 2 NaFlex" in str(model.load_report)


def test_siglip2_reads_as_the_image_model_unless_a_budget_is_asked_for(tmp_path):
    import keras_vit

    folder, sd, vision = write_folder(tmp_path / "s2", "Siglip2VisionModel")
    image_model = keras_vit.from_pretrained(folder)
    assert image_model.vit_config.input_mode == "image" and image_model.vit_config.image_size == (16, 16)
    any_length = keras_vit.from_pretrained(folder, input_mode="naflex")  # no budget: any sequence length
    assert any_length.vit_config.max_patches is None and any_length.vit_config.grid_rule == "siglip2"
    pixels = budget_images(24)
    for budget in (24, 31):  # one model, two padded lengths
        got = np.asarray(any_length(naflex_grid.batch(pixels, P, budget)))
        expected = np.stack([transformers_forward(image, sd, vision) for image in pixels])
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    path = str(tmp_path / "s2.keras")  # the grid rule is saved with the model
    any_length.save(path)
    assert keras_vit.load_model(path).vit_config == any_length.vit_config
    # the square image at the table's grid: the image model and the NaFlex model agree (the resampling is the identity)
    square = np.random.default_rng(1).uniform(0, 255, (1, 16, 16, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(any_length(naflex_grid.batch(list(square), P, 16))), np.asarray(image_model(square)),
                               rtol=1e-4, atol=1e-5)


def test_a_budget_for_a_source_without_a_naflex_form_reads_it_as_timms_conversion(tmp_path):
    """SigLIP (1), whose model takes one image size: ``max_patches`` reads it as the NaFlex model timm builds from a
    classic ViT with ``use_naflex=True`` (keras_vit/models/naflex_conversion.py; tests/models/test_naflex_conversion.py
    checks its outputs): timm's grid rule and bicubic resampling, not SigLIP 2's."""
    import keras_vit

    config = dict({k: v for k, v in _VISION.items() if k != "num_patches"}, image_size=16,
                  model_type="siglip_vision_model", architectures=["SiglipVisionModel"])
    folder = tmp_path / "siglip"
    os.makedirs(folder)
    safetensors_numpy.save_file(ref.state_dict("siglip_vision_model", config), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    c = keras_vit.from_pretrained(str(folder), max_patches=16).vit_config
    assert (c.input_mode, c.max_patches, c.grid_rule, c.position_resampling, c.pooling) == (
        "naflex", 16, "timm", "bicubic_torch_antialias", "map")
    assert keras_vit.from_pretrained(str(folder), input_mode="naflex").vit_config.max_patches is None


@pytest.mark.parametrize("change, named", [({"grid_rule": "timm"}, r"grid_rule='timm'"),
                                           ({"position_resampling": "bicubic_torch_antialias"}, r"bilinear_torch_antialias")])
def test_siglip2_into_a_naflex_model_built_by_hand_checks_its_rule_and_resampling(tmp_path, change, named):
    """weights= into a NaFlex model built by hand: SigLIP 2's grid rule and per-image resampling leave no trace in the
    weights, so a model with another of either is refused naming it; the model from_pretrained builds loads."""
    import keras_vit

    folder, _, _ = write_folder(tmp_path / "siglip2", "Siglip2VisionModel")
    config = keras_vit.from_pretrained(folder, max_patches=24).vit_config
    keras_vit.ViT(**config.to_dict(), weights=folder)
    with pytest.raises(ValueError, match=named):
        keras_vit.ViT(**{**config.to_dict(), **change}, weights=folder)
