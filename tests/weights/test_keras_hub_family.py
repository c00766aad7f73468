"""keras-hub's ViT-family presets in (DINOv2 with and without registers, DeiT, SigLIP's and CLIP's image towers): folders
written in keras-hub's own layout (tests/reference_keras_hub.py), read through a folder and an offline hf:// cache,
against an independent NumPy forward of keras-hub's layers; what keras_vit cannot compute the same way refused by name."""


import h5py
import keras
import numpy as np
import pytest

import reference_keras_hub as khub
from helpers import hf_snapshot, images, offline_hf

import keras_vit
from keras_vit.errors import CheckpointError

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SCALE, OFFSET = [1 / (255 * s) for s in STD], [-m / s for m, s in zip(MEAN, STD)]


def preset(folder, kind, seed=0, task=None, **vision):
    config = khub.family_config(kind, **vision)
    weights = khub.family_weights(kind, config, seed)
    khub.write_family_preset(str(folder), kind, config, weights, scale=SCALE, offset=OFFSET, task=task)
    return config, weights


def keras_hub_positions(config, weights):
    """DINOv2's table for image_shape as keras-hub computes it on load: keras.ops.image.resize, bicubic."""
    last = max(int(k.rsplit("/", 1)[1]) for k in weights if k.startswith(f"{khub.DINO_EMBED}/vars/"))
    p, table = config["patch_size"], weights[f"{khub.DINO_EMBED}/vars/{last}"][0]
    old = [s // p for s in config["position_embedding_shape"][:2]]
    new = [s // p for s in config["image_shape"][:2]]
    grid = table[1:].reshape(1, old[0], old[1], -1)
    resized = np.asarray(keras.ops.image.resize(grid, new, interpolation="bicubic", antialias=config["antialias_in_interpolation"]))
    return np.concatenate([table[:1], resized.reshape(-1, table.shape[-1])])


def close(got, want, rtol=5e-5):
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= rtol * np.max(np.abs(want)), np.max(np.abs(got - want)) / np.max(np.abs(want))


@pytest.mark.parametrize("vision", [
    {},
    {"num_register_tokens": 2, "use_swiglu_ffn": True, "layer_scale_init_value": 0.5, "position_embedding_shape": [48, 48, 3]},
    {"num_register_tokens": 4, "use_mask_token": False, "antialias_in_interpolation": True, "position_embedding_shape": [56, 56, 3]},
])
def test_a_dinov2_preset_gives_keras_hubs_tokens(tmp_path, vision):
    config, weights = preset(tmp_path / "d", "DINOV2Backbone", **vision)
    resized = keras_hub_positions(config, weights) if config["position_embedding_shape"] != config["image_shape"] else None
    want = khub.family_forward(images(), "DINOV2Backbone", config, weights, SCALE, OFFSET, resized)
    tokens = keras_vit.from_pretrained(str(tmp_path / "d"), pooling=None)
    close(np.asarray(tokens(images())), want)
    model = keras_vit.from_pretrained(str(tmp_path / "d"))  # the normed class token
    close(np.asarray(model(images())), want[:, 0])
    c = model.vit_config
    assert (c.num_register_tokens, c.mlp_type, c.layer_scale_init is not None) == (
        config["num_register_tokens"], "glu" if config["use_swiglu_ffn"] else "mlp", True)
    assert c.position_resampling == ("bicubic_torch_antialias" if config["antialias_in_interpolation"] else "bicubic_tf")
    np.testing.assert_allclose(c.input_std, STD, rtol=1e-6)
    report = str(model.load_report)
    assert "keras-hub" in report and "interpolated_position_embeddings" in report


@pytest.mark.parametrize("kind", ["SigLIPBackbone", "CLIPBackbone"])
def test_the_image_tower_of_a_siglip_or_clip_preset_gives_keras_hubs_embedding(tmp_path, kind):
    config, weights = preset(tmp_path / "p", kind)
    model = keras_vit.from_pretrained(str(tmp_path / "p"))
    close(np.asarray(model(images())), khub.family_forward(images(), kind, config, weights, SCALE, OFFSET))
    report = str(model.load_report)
    assert f"the text tower (keras_vit loads the image tower of a keras-hub {kind[:-8]} preset)" in report
    assert ("projection_dim", 16) == ("projection_dim", model.vit_config.projection_dim) or kind == "SigLIPBackbone"


@pytest.mark.parametrize("vision", [{}, {"use_mha_bias": False, "layer_norm_epsilon": 1e-5, "num_layers": 1}])
def test_a_deit_preset_gives_the_mean_of_keras_hubs_class_and_distillation_tokens(tmp_path, vision):
    config, weights = preset(tmp_path / "d", "DeiTBackbone", **vision)
    want = khub.family_forward(images(), "DeiTBackbone", config, weights, SCALE, OFFSET)  # every token after the final norm
    model = keras_vit.from_pretrained(str(tmp_path / "d"))
    close(np.asarray(model(images())), (want[:, 0] + want[:, 1]) / 2, rtol=1e-4)
    c = model.vit_config
    assert (c.distillation_token, c.include_top, c.qkv_bias, c.layer_norm_epsilon) == (
        True, False, config["use_mha_bias"], pytest.approx(config["layer_norm_epsilon"]))
    np.testing.assert_allclose(c.input_mean, MEAN, rtol=1e-6)
    np.testing.assert_allclose(c.input_std, STD, rtol=1e-6)
    assert model.load_report.format == "keras-hub"


def test_a_deit_classifier_preset_loads_its_backbone_and_names_the_head_keras_vit_cannot_compute(tmp_path):
    config, weights = preset(tmp_path / "c", "DeiTBackbone", task={"pooling": "token", "num_classes": 5})
    model = keras_vit.from_pretrained(str(tmp_path / "c"))
    want = khub.family_forward(images(), "DeiTBackbone", config, weights, SCALE, OFFSET)
    close(np.asarray(model(images())), (want[:, 0] + want[:, 1]) / 2, rtol=1e-4)
    assert "head (task.weights.h5, 2 tensors): DeiTImageClassifier's head (5 classes) reads the class token only" in str(model.load_report)
    with pytest.raises(ValueError, match=r"has no classification head keras_vit can load \(head \(task.weights.h5, 2 tensors\): "
                                         r"DeiTImageClassifier's head \(5 classes\) reads the class token only \(task.json "
                                         r"pooling='token'\), past a distillation token; keras_vit's DeiT averages"):
        keras_vit.from_pretrained(str(tmp_path / "c"), include_top=True)
    preset(tmp_path / "g", "DeiTBackbone", task={"pooling": "gap"})
    with pytest.raises(ValueError, match=r"reads the mean of every token \(the class and distillation tokens too\)"):
        keras_vit.from_pretrained(str(tmp_path / "g"), include_top=True)
    preset(tmp_path / "m", "DeiTBackbone", task={"pooling": "max"})
    with pytest.raises(CheckpointError, match=r"task.json': config.pooling='max'; DeiTImageClassifier pools with 'token' or 'gap'"):
        keras_vit.from_pretrained(str(tmp_path / "m"))


def test_a_deit_preset_is_refused_by_a_model_without_its_tokens_and_nothing_half_loaded(tmp_path):
    preset(tmp_path / "d", "DeiTBackbone")
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, include_top=False)
    before = [np.array(w) for w in model.weights]
    with pytest.raises(CheckpointError, match=r"config.json: DeiTEmbeddings: a distillation token after the class token but the "
                                              r"model has distillation_token=False"):
        keras_vit.load_checkpoint(model, str(tmp_path / "d"))
    assert all(np.array_equal(a, np.array(w)) for a, w in zip(before, model.weights))
    with h5py.File(tmp_path / "d" / "model.weights.h5", "a") as f:
        f["layers/dei_t_encoder/encoder_layers/dei_t_encoder_block_1/mlp/extra/vars/0"] = np.zeros(3, "float32")
    with pytest.raises(CheckpointError, match=r"has 1 weight\(s\) a DeiTBackbone of its config.json does not have: "
                                              r"layers/dei_t_encoder/encoder_layers/dei_t_encoder_block_1/mlp/extra/vars/0"):
        keras_vit.from_pretrained(str(tmp_path / "d"))


def test_position_ids_are_honoured_as_keras_hub_reads_its_embedding_table(tmp_path):
    config = khub.family_config("CLIPBackbone")
    weights = khub.family_weights("CLIPBackbone", config)
    weights[f"{khub.CLIPV}/clip_vision_embedding/vars/1"] = np.zeros((1, 17), "int64")  # a CLIP built by keras-hub, not converted
    khub.write_family_preset(str(tmp_path / "p"), "CLIPBackbone", config, weights, SCALE, OFFSET)
    model = keras_vit.from_pretrained(str(tmp_path / "p"))
    close(np.asarray(model(images())), khub.family_forward(images(), "CLIPBackbone", config, weights, SCALE, OFFSET))
    assert "position_ids are not 0..16" in str(model.load_report)


def test_a_declared_switch_the_model_lacks_is_refused_by_the_presets_field(tmp_path):
    preset(tmp_path / "d", "DINOV2Backbone", num_register_tokens=2, layer_scale_init_value=0.5)
    with pytest.raises(CheckpointError, match=r"config.json: config.num_register_tokens=2 but the model has num_register_tokens=0.*"
                                              r"config.layer_scale_init_value=0.5 but the model has layer_scale_init=None"):
        keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, include_top=False,
                      weights=str(tmp_path / "d"))


def test_unknown_and_missing_weights_are_named_and_nothing_is_loaded(tmp_path):
    preset(tmp_path / "s", "SigLIPBackbone")
    with h5py.File(tmp_path / "s" / "model.weights.h5", "a") as f:
        f["layers/sig_lip_vision_encoder/layers/sig_lip_encoder_layer_1/extra/vars/0"] = np.zeros(3, "float32")
    with pytest.raises(CheckpointError, match=r"has 1 weight\(s\) a SigLIPBackbone of its config.json does not have: "
                                              r"layers/sig_lip_vision_encoder/layers/sig_lip_encoder_layer_1/extra/vars/0"):
        keras_vit.from_pretrained(str(tmp_path / "s"))
    preset(tmp_path / "d", "DINOV2Backbone")
    with h5py.File(tmp_path / "d" / "model.weights.h5", "a") as f:
        del f["layers/dinov2_encoder/layers/dinov2_layer_1/layer_scale2/vars/0"]
    with pytest.raises(CheckpointError, match=r"model.weights.h5 has no 'layers/dinov2_encoder/layers/dinov2_layer_1/layer_scale2/"
                                              r"vars/0' \(Transformer/encoderblock_1/LayerScale_3/gamma in the original layout\)"):
        keras_vit.from_pretrained(str(tmp_path / "d"))


def test_what_keras_vit_cannot_compute_the_same_way_is_refused(tmp_path):
    preset(tmp_path / "s", "SigLIPBackbone", layer_norm_epsilon=1e-5)  # post_layer_norm keeps 1e-6
    with pytest.raises(CheckpointError, match=r"config.vision_encoder.config.layer_norm_epsilon=1e-05: keras-hub's "
                                              r"SigLIPVisionEncoder keeps 1e-6 in its post_layer_norm"):
        keras_vit.from_pretrained(str(tmp_path / "s"))
    preset(tmp_path / "mit", "DINOV2Backbone")
    (tmp_path / "mit" / "config.json").write_text('{"class_name": "MiTBackbone", "registered_name": "keras_hub>MiTBackbone", "config": {}}')
    with pytest.raises(CheckpointError, match=r"config.json' is a keras-hub 'MiTBackbone' where keras_vit reads a ViTBackbone or "
                                              r"DINOV2Backbone or SigLIPBackbone or CLIPBackbone or DeiTBackbone.*hf://"):
        keras_vit.from_pretrained(str(tmp_path / "mit"))
    preset(tmp_path / "d", "DINOV2Backbone", position_embedding_shape=[48, 48, 3])
    with h5py.File(tmp_path / "d" / "model.weights.h5", "a") as f:
        del f["layers/dinov2_embedding/vars/3"]
        f["layers/dinov2_embedding/vars/3"] = np.zeros((1, 17, 32), "float32")
    with pytest.raises(CheckpointError, match=r"config.json says config.position_embedding_shape=\[48, 48, 3\] \(6 x 6 patches\) "
                                              r"but the weights' position_embeddings have shape \(1, 17, 32\)"):
        keras_vit.from_pretrained(str(tmp_path / "d"))


def test_hf_handle_of_a_keras_hub_dinov2_preset_from_an_offline_cache(tmp_path, monkeypatch):
    config, weights = preset(hf_snapshot(tmp_path, "someone/dinov2-keras-hub-tiny"), "DINOV2Backbone", num_register_tokens=4)
    offline_hf(monkeypatch, tmp_path)
    model = keras_vit.from_pretrained("hf://someone/dinov2-keras-hub-tiny", pooling=None)
    close(np.asarray(model(images())), khub.family_forward(images(), "DINOV2Backbone", config, weights, SCALE, OFFSET))


def test_a_task_keras_vit_has_no_reader_for_is_named_not_dropped(tmp_path):
    """A task.json beside a DINOv2 backbone (a classifier keras_vit does not read): the backbone loads, the report
    names the task, and a model with a head is refused with the same reason (it was once ignored without a word)."""
    import json

    preset(tmp_path / "d", "DINOV2Backbone")
    (tmp_path / "d" / "task.json").write_text(json.dumps({"class_name": "DINOV2ImageClassifier", "config": {"num_classes": 3}}))
    model = keras_vit.from_pretrained(str(tmp_path / "d"))
    assert "task.json's 'DINOV2ImageClassifier' is no task keras_vit reads for a DINOV2Backbone" in str(model.load_report)
    with pytest.raises(ValueError, match=r"DINOV2ImageClassifier"):
        keras_vit.from_pretrained(str(tmp_path / "d"), include_top=True)


def test_two_loaded_layers_that_swap_names_keep_their_own_weights():
    """Keras names a second Dense ``dense_1``: when two loaded groups stored each other's default paths, each key
    goes where its own layer name is, not both to the last one renamed (renaming one group at a time did that)."""
    from keras_vit.weights.keras_hub.family import Keys, resolve

    keys = Keys({"layers/dense/vars/0": "a/kernel", "layers/dense_1/vars/0": "b/kernel"},
                named={"layers/dense/vars": ("a_projection", None), "layers/dense_1/vars": ("b_projection", None)})
    table, _ = resolve(keys, {"layers/dense/vars": "b_projection", "layers/dense_1/vars": "a_projection"})
    assert table == {"layers/dense_1/vars/0": "a/kernel", "layers/dense/vars/0": "b/kernel"}


def test_a_damaged_weights_file_of_a_preset_with_named_layers_is_named(tmp_path):
    """CLIP's projections are found by the layer names Keras stored: reading those names once let h5py's bare OSError out."""
    preset(tmp_path / "p", "CLIPBackbone")
    (tmp_path / "p" / "model.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(CheckpointError, match=r"Cannot read '.*model.weights.h5' as HDF5 \(.weights.h5\)"):
        keras_vit.from_pretrained(str(tmp_path / "p"))
