"""Sources that used to load silently wrong: a head on features the model does not give it, a switch the config states
that was dropped or misread. Each is now refused by name, or read as the source's framework reads it."""

import os

import numpy as np
import pytest

import keras_vit
from helpers import vit_checkpoint
from keras_vit.weights import CheckpointError, describe

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from foreign_files import TINY_TIMM_CONFIG, timm_file, transformers_folder  # noqa: E402
from test_malformed_sources import TIMM_CONFIG, edit_config, tiny_args, write_json  # noqa: E402


def test_a_head_of_the_same_classes_on_other_features_is_refused_not_zeroed():
    """A head of the model's classes that reads other features (a classifier on the class token and the patches'
    mean, loaded into a class-token model) is not fine-tuning: it used to be zeroed while its bias loaded, so every
    image got the same logits under the file's class names."""
    from keras_vit.weights.mapping import targets_of

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, num_classes=5)
    arrays = {key: np.full(target.shape, 0.5, np.float32) for key, target in targets_of(model).items()}
    arrays["head/kernel"] = np.ones((64, 5), np.float32)
    with pytest.raises(CheckpointError, match=r"head/kernel \(64, 5\) classifies 5 classes from 64 features, but model "
                                              r"'vit' gives its head 32 \(pooling='token'"):
        keras_vit.load_checkpoint(model, arrays)
    arrays["head/kernel"] = np.ones((32, 1000), np.float32)  # another number of classes: the paper's new head
    assert "new head zero-initialised" in str(keras_vit.load_checkpoint(model, arrays))


def test_a_head_that_reads_pre_logits_the_model_lacks_is_refused():
    """An in21k-style file (pre-logits as wide as the blocks) into a model without pre-logits and of its classes:
    the head loaded and ran on raw features instead of tanh(pre_logits), pre_logits/* listed as unused."""
    from keras_vit.weights.mapping import targets_of

    kw = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)
    source = keras_vit.ViT(**kw, representation_size=32, num_classes=5)
    arrays = {key: np.full(target.shape, 0.1, np.float32) for key, target in targets_of(source).items()}
    with pytest.raises(CheckpointError, match=r"its head reads its pre-logits layer \(pre_logits/bias, pre_logits/kernel"):
        keras_vit.load_checkpoint(keras_vit.ViT(**kw, num_classes=5), arrays)
    assert keras_vit.load_checkpoint(keras_vit.ViT(**kw, num_classes=3), arrays).unused == ["pre_logits/bias",
                                                                                          "pre_logits/kernel"]


def test_a_vit_pooler_followed_by_another_activation_than_tanh_is_refused(tmp_path):
    """transformers' ViTPooler applies ACT2FN[pooler_act]; keras_vit's pre-logits is the paper's tanh."""
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint(), pooler_act="relu")
    with_pooler = os.path.join(folder, "model.safetensors")
    state = safetensors_numpy.load_file(with_pooler)
    state["vit.pooler.dense.weight"], state["vit.pooler.dense.bias"] = np.eye(32, dtype=np.float32), np.zeros(32, np.float32)
    safetensors_numpy.save_file(state, with_pooler)
    with pytest.raises(CheckpointError, match=r"config\.json'?: pooler_act='relu': the pooler of its weights"):
        describe(folder)
    edit_config(folder, pooler_act="tanh")
    assert describe(folder).format == "transformers"


def test_a_declared_activation_keras_vit_lacks_names_the_file_and_field(tmp_path):
    """It used to be ViTConfig's ValueError about mlp_activation, naming neither the file nor hidden_act."""
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint(), hidden_act="relu")
    with pytest.raises(CheckpointError, match=r"declares what keras_vit cannot build: config\.json: hidden_act='relu' "
                                              r"\(Unknown `mlp_activation`"):
        keras_vit.from_pretrained(folder)


def test_timm_settings_without_their_architecture_are_refused_not_dropped(tmp_path):
    """model_args (an act_layer) and pretrained_cfg (mean, std) without 'architecture' used to be ignored whole."""
    config = {"model_args": dict(TINY_TIMM_CONFIG["model_args"], act_layer="quick_gelu")}
    path = timm_file(tmp_path / "timm", vit_checkpoint(), config)
    with pytest.raises(CheckpointError, match=r"config\.json'? has model_args but no 'architecture'"):
        describe(path)
    write_json(os.path.join(tmp_path / "timm", "config.json"), {"hidden_size": 32})  # another tool's: keys read alone
    assert describe(path).format == "timm"


def test_timm_global_pool_empty_is_every_token_not_the_class_token(tmp_path):
    """timm's global_pool='' returns every token (its head, if any, on each); it used to build class-token pooling."""
    path = timm_file(tmp_path / "timm", vit_checkpoint(), dict(TIMM_CONFIG, model_args=tiny_args(global_pool="")))
    with pytest.raises(CheckpointError, match=r"config\.json: model_args\.global_pool='' \(pooling=None returns tokens"):
        keras_vit.from_pretrained(path)
    model = keras_vit.from_pretrained(path, include_top=False)
    assert model.vit_config.pooling is None and model.output_shape == (None, 17, 32)


def test_a_distilled_checkpoint_gets_two_new_heads_for_other_classes():
    """A distilled DeiT's head_dist of another number of classes failed as a shape mismatch; it is a new head as
    the main one is."""
    kw = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, distillation_token=True)
    source = keras_vit.ViT(**kw, num_classes=5)
    from keras_vit.weights.mapping import targets_of

    arrays = {key: np.full(target.shape, 0.3, np.float32) for key, target in targets_of(source).items()}
    model = keras_vit.ViT(**kw, num_classes=3)
    report = keras_vit.load_checkpoint(model, arrays)
    assert {"head/kernel", "head/bias", "head_dist/kernel", "head_dist/bias"} <= set(report.skipped)
    assert not any(np.any(np.asarray(v)) for name in ("head", "head_distillation") for v in model.get_layer(name).weights)


def _timm_registers(folder, **args):
    """A timm state dict of tiny sizes (patch 8 at 32 x 32: a 4 x 4 grid) with the switches ``args``, no config.json."""
    import reference_timm

    state = reference_timm.state_dict(dict(patch_size=8, embed_dim=32, depth=1, num_heads=4, img_size=32, num_classes=0,
                                           **args))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.safetensors")
    safetensors_numpy.save_file(state, path)
    return path


def test_a_position_table_of_two_readings_is_refused_not_guessed(tmp_path):
    """Without a config.json, pos_embed (1, 16, D) with 7 registers is a 3 x 3 grid with the registers' positions or a
    4 x 4 one without: the first was taken (a 24 x 24 model, 13.5 % off timm's at 32 x 32)."""
    path = _timm_registers(tmp_path / "r7", class_token=False, reg_tokens=7, no_embed_class=True, global_pool="avg")
    with pytest.raises(CheckpointError, match=r"'pos_embed' \(1, 16, 32\) is a grid of 9 or 16 patches, with or without "
                                              r"the positions of the 7 register tokens, and nothing states the image size"):
        describe(path)
    path = _timm_registers(tmp_path / "r4", reg_tokens=4)  # 4 x 4 + 5: one reading only, the registers' positions in it
    assert describe(path).declared["register_positions"].value is True


def test_a_stated_no_embed_class_against_the_table_names_the_tokens(tmp_path):
    """The message said 'the class tokens' (a possessive stripped), and never the distillation token."""
    path = _timm_registers(tmp_path / "plain")
    write_json(tmp_path / "plain" / "config.json", {"architecture": "vit_base_patch16_224",
                                                    "model_args": dict(tiny_args(), no_embed_class=True)})
    with pytest.raises(CheckpointError, match=r"says model_args\.no_embed_class=True, but 'pos_embed' \(1, 17, 32\) has "
                                              r"the positions of the class token\.$"):
        describe(path)


def test_a_folder_another_source_reads_is_not_refused_by_the_timm_source(tmp_path):
    """A config.json naming an 'architecture' that is no timm registration, beside keys no layout keras_vit knows: the
    timm source refused it ('timm registers no architecture'), before a source a user registered could claim it."""
    from keras_vit.weights import formats
    from keras_vit.weights.source import Source

    folder = tmp_path / "mine"
    folder.mkdir()
    safetensors_numpy.save_file({"encoder.w": np.zeros((2, 2), np.float32)}, str(folder / "model.safetensors"))
    write_json(folder / "config.json", {"architecture": "my_net"})

    class Mine(Source):
        name = "mine"

        def claims(self, opened):
            return "encoder.w" in opened.keys()

    source = formats.register(Mine())
    try:
        assert formats.source_of(str(folder))[0] is source
    finally:
        formats.SOURCES.remove(source)
