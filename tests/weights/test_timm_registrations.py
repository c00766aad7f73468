"""timm's registrations as generated data (keras_vit/weights/data/timm_registrations.json, tools/timm_registrations.py):
every architecture either read or refused by the switch it lacks, before anything is built."""

import json
import os

import numpy as np
import pytest

import keras_vit
from helpers import vit_checkpoint
from keras_vit.errors import CheckpointError
from keras_vit.weights import timm_config, timm_models

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from foreign_files import TINY_TIMM_ARGS, timm_file  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)


def test_the_table_is_timms_own_output():
    """Generated, not copied: it names timm's version, the module files' hashes and the script that wrote it."""
    table = timm_models.table()
    assert table["generated_by"] == "tools/timm_registrations.py"
    assert os.path.isfile(os.path.join(ROOT, table["generated_by"]))
    assert set(table["modules"]) == {"vision_transformer", "vision_transformer_hybrid", "deit", "eva", "naflexvit"}
    assert all(len(m["sha256"]) == 64 for m in table["modules"].values())
    assert len(table["architectures"]) > 250 and table["timm_version"].count(".") == 2


def test_every_registration_is_read_or_refused_by_a_named_switch():
    """No registration is both buildable and lacking, none raises, and every refusal names a switch."""
    read = refused = 0
    for name in timm_models.table()["architectures"]:
        args, lacking = timm_models.registered(name), timm_models.lacking(name)
        assert (args is None) == bool(lacking), name
        assert all(isinstance(phrase, str) and phrase for phrase in lacking), name
        if args is not None and "backbone_layers" not in args:  # a hybrid's ViTConfig is read with its weights
            fields = timm_config.config_fields(name)  # what from_pretrained builds: a valid ViTConfig's arguments
            assert fields["hidden_size"] % fields["num_heads"] == 0, name
        if args is not None:
            read += 1
        else:
            refused += 1
    # timm 1.0.31: 252 read, 20 refused (AIMv2, NaFlexVit with C-RADIO, EVA-02 B / L, PE read; the registers'
    # positions of the SBB so150m models and test_vit2 / test_vit4 read since register_positions; the post-norm
    # vit_base_patch16_rpn_224 and eva02_enormous_patch14_clip_224 since res_post_norm)
    assert read >= 253 and refused <= 19  # test_vit3 since pool_include_prefix


@pytest.mark.parametrize("name, switch", [
    ("vit_small_patch16_18x2_224", r"parallel attention and MLP blocks \(block_fn=ParallelThingsBlock\)"),
    ("vit_base_patch16_sapiens2", r"separate q / k / v projections .*\(qkv_fused=False\)"),
    ("vit_base_patch16_xp_224", r"query/key normalisation \(qk_norm=True\)"),
    ("vit_base_resnet50d_224", r"FeatureListNet backbone"),
])
def test_an_architecture_with_a_switch_keras_vit_lacks_is_refused_by_name(name, switch):
    with pytest.raises(CheckpointError, match=rf"timm's architecture '{name}' has .*{switch}.*Nothing was built"):
        timm_config.refuse_unbuildable(name + ".some_tag", "config.json")


@pytest.mark.parametrize("name, expected", [
    ("flexivit_small", dict(img_size=240, no_embed_class=True, embed_dim=384, num_heads=6)),
    ("deit3_medium_patch16_224", dict(embed_dim=512, num_heads=8, init_values=1e-6, no_embed_class=True)),
    ("vit_base_patch16_reg4_gap_256", dict(img_size=256, reg_tokens=4, global_pool="avg")),
    ("vit_giant_patch14_dinov2", dict(mlp_layer="SwiGLUPacked", act_layer="nn.SiLU")),
    ("vit_base_patch16_clip_224", dict(pre_norm=True, norm_eps=1e-5)),
    ("deit_base_distilled_patch16_384", dict(distilled=True, img_size=384)),
    ("vit_base_r50_s16_384", dict(backbone_layers=(3, 4, 9), patch_size=1, img_size=384)),
    # residual post-norm blocks: ResPostBlock's init_values are its norms' initial scales, no LayerScale
    ("vit_base_patch16_rpn_224", dict(res_post_norm=True, init_values=None, class_token=False, global_pool="avg")),
    ("eva02_enormous_patch14_clip_224", dict(res_post_norm=True, init_values=None, global_pool="token")),
    ("test_vit3", dict(pool_include_prefix=True, global_pool="map", reg_tokens=1)),  # its MAP reads the register too
])
def test_registrations_the_hand_table_lacked_are_read(name, expected):
    """The ones the issue lists as guessed or refused (flexivit, deit3 medium, the gap models, the hybrids)."""
    row = timm_models.registered(name)
    assert {k: row[k] for k in expected} == expected


def _tiny_timm(tmp_path, architecture, **model_args):
    config = {"architecture": architecture, "model_args": {**TINY_TIMM_ARGS, **model_args}, "num_classes": 5}
    return timm_file(tmp_path / "timm", vit_checkpoint(), config)


def test_a_parallel_block_registration_with_sequential_weights_is_refused_by_name(tmp_path):
    """vit_pwee's registration says its blocks run attention and MLP side by side; a paper ViT's weights (norm2, no
    fused in_proj) under its name belong to another model."""
    path = _tiny_timm(tmp_path, "vit_pwee_patch16_reg1_gap_256", class_token=True, global_pool="token", qkv_bias=True,
                      reg_tokens=0, no_embed_class=False, init_values=None)
    with pytest.raises(CheckpointError, match=r"timm registers parallel_blocks=True.*lack 'blocks.0.in_proj.weight'"):
        keras_vit.from_pretrained(path)


def test_post_norm_from_model_args_is_read_as_timm_builds_it(tmp_path):
    """The registration's own init_values restated in model_args (ResPostBlock's norms' scale) was called LayerScale
    the weights lack; block_fn='ResPostBlock' was 'no such part'; keras_vit's own res_post_norm was taken from a
    config.json timm could not build."""
    paper = dict(class_token=True, global_pool="token", qkv_bias=True)
    model = keras_vit.from_pretrained(_tiny_timm(tmp_path / "a", "vit_base_patch16_rpn_224", init_values=1e-5, **paper))
    assert model.vit_config.res_post_norm and model.vit_config.layer_scale_init is None
    model = keras_vit.from_pretrained(_tiny_timm(tmp_path / "b", "vit_base_patch16_224", block_fn="ResPostBlock"))
    assert model.vit_config.res_post_norm
    with pytest.raises(CheckpointError, match=r"model_args.res_post_norm=True is a name of keras_vit's, no timm argument"):
        keras_vit.from_pretrained(_tiny_timm(tmp_path / "c", "vit_base_patch16_224", res_post_norm=True))


def test_an_architecture_timm_does_not_register_is_refused(tmp_path):
    path = _tiny_timm(tmp_path, "vit_tiny_patch16_rope_224_custom")
    with pytest.raises(CheckpointError, match=r"registers no architecture 'vit_tiny_patch16_rope_224_custom'.*timm itself"):
        keras_vit.from_pretrained(path)


def test_a_registered_architecture_loads_with_its_registration(tmp_path):
    """deit3_medium (not in the old hand table: it ended in 'Cannot tell the number of attention heads')."""
    path = _tiny_timm(tmp_path, "deit3_medium_patch16_224", num_heads=4, init_values=None, no_embed_class=False)
    model = keras_vit.from_pretrained(path, classifier_activation=None)
    assert model.vit_config.num_heads == 4 and model.vit_config.hidden_size == 32
    assert np.isfinite(np.asarray(model(np.zeros((1, 32, 32, 3), np.float32)))).all()


def test_the_data_file_is_shipped_with_the_package():
    with open(os.path.join(ROOT, "setup.cfg")) as f:
        assert "data/*.json" in f.read()
    with open(timm_models.TABLE) as f:
        assert json.load(f)["architectures"]
