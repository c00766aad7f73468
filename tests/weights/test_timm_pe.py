"""timm's Perception Encoder registrations (eva.py ``vit_pe_{core,lang,spatial}_*``) load exactly, against a NumPy
forward pass written from timm's code (tests/reference_pe.py; checked against timm itself by
tools/check_timm_rope.py): EVA-02's axial RoPE on a reference grid with PE's grid offset and ``'xy'`` indexing, the
pre-norm without a patch bias, attention pooling with its own heads and MLP width (ViTConfig ``map_num_heads``,
``map_mlp_dim``) or the mean of the patch tokens with no norm after the blocks; what keras_vit lacks stays refused."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

import keras_vit
import reference_pe
from keras_vit.architecture import params
from keras_vit.architecture.config import ViTConfig
from keras_vit.errors import CheckpointError
from keras_vit.models.build import build_model
from keras_vit.weights import timm_config, timm_eva, timm_models

D = 32
# 4 x 6 patches on a 3 x 5 reference grid; the pooling head's 4 heads and 3 x D MLP differ from the blocks' 2 and 4 x D
TINY = dict(patch_size=8, embed_dim=D, depth=2, num_heads=2, mlp_ratio=4.0, ref_feat_shape=[3, 5])
# architecture -> (its registration's arguments the reference needs, the tiny model_args beside TINY)
ARCHITECTURES = {
    "vit_pe_core_tiny_patch16_384": (dict(global_pool="map", rope_grid_offset=1.0, num_classes=16),
                                     dict(attn_pool_num_heads=4, attn_pool_mlp_ratio=3.0)),
    "vit_pe_core_gigantic_patch14_448": (dict(global_pool="map", class_token=False, rope_grid_offset=0.0, num_classes=16),
                                         dict(attn_pool_num_heads=4, attn_pool_mlp_ratio=3.0)),
    "vit_pe_lang_large_patch14_448": (dict(global_pool="avg", init_values=0.1, rope_grid_offset=1.0), {}),
    "vit_pe_spatial_gigantic_patch14_448": (dict(global_pool="avg", class_token=False, init_values=0.1,
                                                 rope_grid_offset=0.0), {}),
}


def pe_folder(folder, architecture, size=(32, 48), seed=0):
    """A Hub folder as timm's ``save_for_hf`` writes it (``model_args`` with the tiny sizes; a core model's head is
    PE's projection: ``head.bias`` all zeros). Returns (folder, state dict, the reference's args)."""
    registered, sizes = ARCHITECTURES[architecture]
    model_args = dict(TINY, **sizes, img_size=list(size))
    args = dict(registered, **model_args)
    state = reference_pe.state_dict(args, seed=seed)
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architecture": architecture, "num_classes": registered.get("num_classes", 0), "num_features": D,
                   "model_args": model_args, "pretrained_cfg": {"input_size": [3, *size], "mean": [0.5] * 3,
                                                                "std": [0.5] * 3}}, f)
    return folder, state, args


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pe")
    return {name: pe_folder(str(root / name), name) for name in ARCHITECTURES}


def images(size=(32, 48), batch=2, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (batch, *size, 3)).astype("float32")


def reference(state, args, pixels):
    return np.stack([reference_pe.forward(image, state, args) for image in pixels])


def assert_close(got, want, tol=1e-5):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= tol * np.max(np.abs(want)), np.max(np.abs(got - want))


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_from_pretrained_computes_timms_pe(architecture, folders):
    folder, state, args = folders[architecture]
    model = keras_vit.from_pretrained(folder)
    config = model.vit_config
    assert (config.rope, config.rope_reference_grid, config.rope_grid_indexing) == ("axial", (3, 5), "xy")
    assert config.rope_grid_offset == args["rope_grid_offset"] and config.pre_norm and config.position_embedding
    assert config.class_token == args.get("class_token", True) and config.layer_norm_epsilon == pytest.approx(1e-5)
    core = args["global_pool"] == "map"
    assert (config.pooling, config.final_norm, config.fc_norm) == (("map", True, False) if core else ("gap", False, False))
    assert (config.map_num_heads, config.map_mlp_dim) == ((4, 3 * D) if core else (None, None))
    assert config.projection_dim == (16 if core else None) and config.output == "embedding"
    # timm's parameters, plus the zero patch-embedding bias keras_vit keeps (exact), less the zero head bias
    # dropped with PE's bias-free projection
    assert model.count_params() == sum(v.size for v in state.values()) + D - (16 if core else 0)
    assert model.count_params() == params.count_config_params(config)
    pixels = images()
    assert_close(model(pixels), reference(state, args, pixels))


def test_the_pooling_heads_the_offset_and_the_reference_grid_each_change_the_output(folders):
    """The same weights with the blocks' heads in the pooling, no grid offset or no scaling compute other
    outputs: each switch read is one that matters (so the match above is not by accident)."""
    folder, state, args = folders["vit_pe_core_tiny_patch16_384"]
    pixels = images()
    got = np.asarray(keras_vit.from_pretrained(folder)(pixels), np.float64)
    scale = np.max(np.abs(got))
    for wrong in (dict(attn_pool_num_heads=2), dict(rope_grid_offset=0.0), dict(ref_feat_shape=[4, 6])):
        assert np.max(np.abs(got - reference(state, dict(args, **wrong), pixels))) > 1e-3 * scale, wrong


def test_a_model_built_with_the_blocks_pooling_heads_is_refused(folders):
    """The heads are merged in the weights: a model whose pooling has the blocks' 2 heads would load PE's 4-head
    pooling without an error; the file's declaration refuses it, naming timm's argument."""
    folder, _, _ = folders["vit_pe_core_tiny_patch16_384"]
    config = keras_vit.from_pretrained(folder).vit_config
    with pytest.raises(CheckpointError, match=r"attn_pool_num_heads=4 but the model has map_num_heads=2"):
        build_model(config.replace(map_num_heads=None), weights=folder)
    # Eva's attention pooling reads the class token too (pool_include_prefix): a model of the patch tokens' is another
    assert config.pool_include_prefix
    with pytest.raises(CheckpointError, match=r"pool_include_prefix=True.*but the model has pool_include_prefix=False"):
        build_model(config.replace(pool_include_prefix=False), weights=folder)


def test_tokens_without_the_pooling_head(folders):
    """include_top=False, pooling=None on a spatial model: the token sequence (dense features, timm's
    forward_features); a core model's too, its pooling head and projection (which act on the pooled vector) skipped
    and named, as timm's forward_features leaves them; 'avg' skips the pooling head only (timm's reset_classifier)."""
    folder, state, args = folders["vit_pe_spatial_gigantic_patch14_448"]
    model = keras_vit.from_pretrained(folder, include_top=False, pooling=None)
    assert model.output_shape == (None, 24, D)
    folder, _, _ = folders["vit_pe_core_tiny_patch16_384"]
    model = keras_vit.from_pretrained(folder, include_top=False, pooling=None)
    assert model.vit_config.projection_dim is None and model.output_shape[-1] == model.vit_config.hidden_size
    assert any(k.startswith("MAPHead_0/") for k in model.load_report.skipped)
    assert any(k.startswith("projection/") for k in model.load_report.skipped)
    model = keras_vit.from_pretrained(folder, include_top=False, pooling="avg")
    assert any(k.startswith("MAPHead_0/") for k in model.load_report.skipped)


@pytest.mark.parametrize("fields, named", [
    (dict(map_num_heads=4), "read only with pooling='map'"),
    (dict(map_mlp_dim=48, pooling="gap"), "read only with pooling='map'"),
    (dict(map_num_heads=3, pooling="map"), "map_num_heads=3 heads, which do not divide it"),
    (dict(map_num_heads=0, pooling="map"), "positive int or None"),
    (dict(map_mlp_dim=True, pooling="map"), "positive int or None"),
])
def test_impossible_pooling_sizes_are_refused(fields, named):
    with pytest.raises(ValueError, match=named):
        ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, **fields)


def test_pooling_sizes_round_trip_and_are_counted():
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                       pooling="map", map_num_heads=4, map_mlp_dim=48, num_classes=3)
    assert ViTConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    model = build_model(config)
    head = model.get_layer("map_head")
    assert (head.num_heads, head.mlp_dim) == (4, 48)
    assert model.count_params() == params.count_config_params(config)
    assert params.count_config_params(config) - params.count_config_params(config.replace(map_mlp_dim=None)) == 2 * 32 * (48 - 64) + (48 - 64)


def test_what_keras_vit_lacks_stays_refused_by_name():
    eva = timm_models.table()["classes"]["Eva"]
    pe = dict(timm_models.registration("vit_pe_lang_large_patch14_448")["args"])
    _, lacking = timm_eva.read(dict(pe, use_post_transformer_norm=True, use_fc_norm=True), eva)
    assert any("both a final norm and a norm after pooling" in why for why in lacking), lacking
    core = dict(timm_models.registration("vit_pe_core_base_patch16_224")["args"])
    _, lacking = timm_eva.read(dict(core, swiglu_mlp=True), eva)
    assert any("global_pool='map' with swiglu_mlp=True" in why for why in lacking), lacking
    with pytest.raises(CheckpointError, match=r"VisionTransformer, which takes no attention pooling size argument"):
        timm_config.resolve({"architecture": "vit_base_patch16_siglip_224", "model_args": {"attn_pool_num_heads": 8}},
                            "config.json")
    assert not any(timm_models.lacking(name) for name in timm_models.table()["architectures"] if name.startswith("vit_pe_"))


def test_the_pe_core_presets_count_timms_parameters():
    """pe_core_vitb16 / pe_core_vitl14 from the registration alone (nothing built), as ``keras-vit info --presets``
    counts them: timm 1.0.31's own models, counted in the peers environment (make peers) by sum(p.numel() for p in
    timm.create_model(arch).parameters()) on the meta device (93,673,984 and 317,152,256, the 1024-wide head with its
    bias included), less the head's zero bias (PE's projection has none) plus the zero patch-embedding bias keras_vit
    keeps (hidden_size: 768 and 1024)."""
    from keras_vit.weights import presets

    timm_counts = {"pe_core_vitb16": 93_673_984, "pe_core_vitl14": 317_152_256}
    for name, timm_count in timm_counts.items():
        preset = presets.hub_preset(name)
        fields = timm_config.config_fields(preset.timm_architecture, 0, preset.num_classes)
        assert (fields["map_num_heads"], fields["projection_dim"], fields["pre_norm"]) == (8, 1024, True)
        count = params.count_config_params(ViTConfig(**fields))
        assert count == timm_count - preset.num_classes + fields["hidden_size"], name


def test_a_file_that_pools_with_the_blocks_heads_is_compared_as_such():
    """keras-hub's SigLIP declares map_num_heads=None (the paper's: the blocks' heads): a model whose pooling has the
    blocks' heads agrees, whether it says None or the same number; one with other heads is refused."""
    from keras_vit.weights.declared import declare, mismatches

    record = declare({}, "map_num_heads", None, "SigLIPVisionEncoder: map_num_heads=None (the paper's)", "config.json")
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, pooling="map")
    assert mismatches(record, config) == mismatches(record, config.replace(map_num_heads=4)) == []
    assert mismatches(record, config.replace(map_num_heads=8)) == [
        "config.json: SigLIPVisionEncoder: map_num_heads=None (the paper's) but the model has map_num_heads=8"]
    assert mismatches(record, config.replace(pooling="gap")) == []  # no pooling head: nothing to compare
