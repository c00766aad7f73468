"""keras-hub ViT presets in: folders written in keras-hub's own layout (tests/reference_keras_hub.py), read
through a folder, sharded weights, hf:// from an offline cache and kaggle://, with keras-hub's logits."""

import json
import sys
import types

import numpy as np
import pytest

import reference_keras_hub as khub
from helpers import hf_snapshot, images, offline_hf

import keras_vit
from keras_vit.errors import CheckpointError

CONFIG = dict(image_shape=[32, 32, 3], patch_size=[8, 8], num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64)
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SCALE, OFFSET = [1 / (255 * s) for s in STD], [-m / s for m, s in zip(MEAN, STD)]


def preset(folder, config=None, task_config=None, shards=False, seed=0):
    config = dict(CONFIG, **(config or {}))
    task_config = {"pooling": "token"} if task_config is None else task_config
    backbone, task = khub.random_preset_weights(config, intermediate_dim=task_config.get("intermediate_dim"), seed=seed)
    khub.write_preset(str(folder), config, backbone, task, task_config, scale=SCALE, offset=OFFSET, shards=shards)
    return config, backbone, task, task_config


@pytest.mark.parametrize("config, task_config", [
    ({}, {"pooling": "token"}),
    ({"use_class_token": False, "layer_norm_epsilon": 1e-5}, {"pooling": "gap", "intermediate_dim": 24}),
    ({"use_mha_bias": False, "use_mlp_bias": False, "use_patch_bias": False}, {"pooling": "token"}),
])
def test_a_keras_hub_classifier_preset_gives_keras_hubs_logits(tmp_path, config, task_config):
    config, backbone, task, task_config = preset(tmp_path / "p", config, task_config)
    model = keras_vit.from_pretrained(str(tmp_path / "p"), classifier_activation=None)
    x = images()
    expected = khub.logits(x, config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=5e-5)
    assert model.load_report.format == "keras-hub"
    np.testing.assert_allclose(model.vit_config.input_std, STD, rtol=1e-6)  # image_converter.json's scale and offset
    np.testing.assert_allclose(model.vit_config.input_mean, MEAN, rtol=1e-6)


def test_sharded_backbone_weights_and_a_builders_weights_argument(tmp_path):
    config, backbone, task, task_config = preset(tmp_path / "p", shards=True)
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          num_classes=5, classifier_activation=None, input_mean=MEAN, input_std=STD,
                          weights=str(tmp_path / "p"))
    expected = khub.logits(images(), config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(images())), expected, atol=5e-5)


def test_a_keras_vit_model_at_its_own_input_scaling_gets_the_scaling_folded_in(tmp_path):
    config, backbone, task, task_config = preset(tmp_path / "p")
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          num_classes=5, classifier_activation=None, weights=str(tmp_path / "p"))  # [-1, 1] inputs
    expected = khub.logits(images(), config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(images())), expected, atol=1e-4)


def test_a_declared_architecture_the_model_lacks_is_refused_by_field(tmp_path):
    preset(tmp_path / "p", {"layer_norm_epsilon": 1e-5})
    with pytest.raises(CheckpointError, match=r"config.json: config.num_heads=4 but the model has num_heads=2.*"
                       r"config.layer_norm_epsilon=1e-05 but the model has layer_norm_epsilon=1e-06"):
        keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                      num_classes=5, layer_norm_epsilon=1e-6, weights=str(tmp_path / "p"))


def converted_as_keras_hub(folder, **fields):
    """The preset of ``folder`` with its image converter's config updated by ``fields`` (another spelling of the
    ImageNet scaling): from_pretrained gives the ImageNet mean and std, and keras-hub's logits. Returns the
    converter and its path."""
    config, backbone, task, task_config = preset(folder)
    path = folder / "image_converter.json"
    converter = json.loads(path.read_text())
    converter["config"].update(fields)
    path.write_text(json.dumps(converter))
    model = keras_vit.from_pretrained(str(folder), classifier_activation=None)
    np.testing.assert_allclose(model.vit_config.input_mean, MEAN, rtol=1e-6)
    np.testing.assert_allclose(model.vit_config.input_std, STD, rtol=1e-6)
    expected = khub.logits(images(), config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(images())), expected, atol=5e-5)
    return converter, path


def test_a_converter_saved_with_keras_hubs_old_mean_and_variance_scales_as_keras_hub_does(tmp_path):
    converter, path = converted_as_keras_hub(tmp_path / "p", scale=1 / 255, offset=[9.0, 9.0, 9.0], mean=MEAN,
                                             variance=[s * s for s in STD])
    del converter["config"]["variance"]
    path.write_text(json.dumps(converter))
    with pytest.raises(CheckpointError, match=r"image_converter.json': config has mean=\[0.485, 0.456, 0.406\]; keras-hub's "
                                              r"ImageConverter reads its old arguments mean and variance together"):
        keras_vit.from_pretrained(str(tmp_path / "p"))


def test_a_converter_of_keras_hubs_earlier_norm_mean_and_norm_std_scales_as_keras_hub_did(tmp_path):
    """keras-hub's earlier ViTImageConverter took (x * scale + offset - norm_mean) / norm_std; the preset loaded
    with x / 255 (1.46 relative off keras-hub's logits), silently."""
    converted_as_keras_hub(tmp_path / "p", scale=1 / 255, offset=None, norm_mean=MEAN, norm_std=STD)


def test_a_gap_classifier_with_a_class_token_averages_it_too_as_keras_hub_does(tmp_path):
    """It was refused: ViTImageClassifier's 'gap' averages every token, keras_vit's the patches (pool_include_prefix)."""
    config, backbone, task, task_config = preset(tmp_path / "gap", task_config={"pooling": "gap"})
    model = keras_vit.from_pretrained(str(tmp_path / "gap"), classifier_activation=None)
    assert model.vit_config.pool_include_prefix and model.vit_config.class_token
    expected = khub.logits(images(), config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(images())), expected, atol=5e-5)


def test_what_keras_vit_cannot_compute_the_same_way_is_refused(tmp_path):
    preset(tmp_path / "mit")  # DINOv2, SigLIP, CLIP and DeiT are read: tests/weights/test_keras_hub_family.py
    (tmp_path / "mit" / "config.json").write_text('{"class_name": "MiTBackbone", "registered_name": "keras_hub>MiTBackbone", "config": {}}')
    with pytest.raises(CheckpointError, match=r"config.json' is a keras-hub 'MiTBackbone' where keras_vit reads a ViTBackbone"):
        keras_vit.from_pretrained(str(tmp_path / "mit"))


def test_a_weight_missing_from_the_h5_file_is_named(tmp_path):
    import h5py

    preset(tmp_path / "p")
    with h5py.File(tmp_path / "p" / "model.weights.h5", "a") as f:
        del f["layers/vi_t_encoder/encoder_layers/vi_t_encoder_block_1/mha/key_dense/vars/0"]
    with pytest.raises(CheckpointError, match=r"model.weights.h5 has no 'layers/vi_t_encoder/encoder_layers/"
                       r"vi_t_encoder_block_1/mha/key_dense/vars/0' \(Transformer/encoderblock_1/"
                       r"MultiHeadDotProductAttention_1/key/kernel"):
        keras_vit.from_pretrained(str(tmp_path / "p"))


def test_image_shape_disagreeing_with_the_position_embeddings_is_refused(tmp_path):
    preset(tmp_path / "p")
    path = tmp_path / "p" / "config.json"
    path.write_text(path.read_text().replace('"image_shape": [\n            32,\n            32', '"image_shape": [\n            64,\n            64'))
    with pytest.raises(CheckpointError, match=r"config.json says config.image_shape=\[64, 64, 3\] \(8 x 8 patches of 8\)"):
        keras_vit.from_pretrained(str(tmp_path / "p"))


def test_kaggle_handles_need_kagglehub_and_go_through_its_cache(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "kagglehub", None)  # not installed
    with pytest.raises(CheckpointError, match=r"kaggle://keras/vit/keras/tiny/1: reading kaggle:// handles needs the "
                       r"kagglehub package, which is not installed: `pip install kagglehub`"):
        keras_vit.from_pretrained("kaggle://keras/vit/keras/tiny/1")
    config, backbone, task, task_config = preset(tmp_path / "cache" / "keras" / "vit" / "keras" / "tiny" / "1")
    asked = []
    fake = types.SimpleNamespace(model_download=lambda handle: asked.append(handle) or str(tmp_path / "cache" / handle))
    monkeypatch.setitem(sys.modules, "kagglehub", fake)
    model = keras_vit.from_pretrained("kaggle://keras/vit/keras/tiny/1", classifier_activation=None)
    assert asked == ["keras/vit/keras/tiny/1"]
    expected = khub.logits(images(), config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(images())), expected, atol=5e-5)


def test_hf_handle_of_a_keras_hub_preset_from_an_offline_cache(tmp_path, monkeypatch):
    config, backbone, task, task_config = preset(hf_snapshot(tmp_path, "someone/vit-keras-hub-tiny"))
    offline_hf(monkeypatch, tmp_path)
    model = keras_vit.from_pretrained("hf://someone/vit-keras-hub-tiny", classifier_activation=None)
    assert model.load_report.format == "keras-hub"
    expected = khub.logits(images(), config, backbone, task, task_config, scale=SCALE, offset=OFFSET)
    np.testing.assert_allclose(np.asarray(model(images())), expected, atol=5e-5)
