"""timm's DINOv3 registrations (eva.py ``vit_*_patch16_dinov3*``) load exactly, against a NumPy forward pass written
from timm's code (tests/reference_dinov3.py; checked against timm itself by tools/check_timm_rope.py), and what
keras_vit lacks stays refused by name."""

import json
import os

import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

import keras_vit
import reference_dinov3
from keras_vit.errors import CheckpointError
from keras_vit.weights import timm_eva, timm_models

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TINY = dict(patch_size=8, embed_dim=32, depth=2, num_heads=2)
# architecture -> the Eva arguments of its registration that reference_dinov3 needs beside TINY
ARCHITECTURES = {
    "vit_small_patch16_dinov3": dict(qkv_bias=False),
    "vit_small_plus_patch16_dinov3_qkvb": dict(qkv_bias=True, swiglu_mlp=True, swiglu_align_to=8),
}


def dinov3_folder(folder, architecture, size=(32, 48), seed=0):
    """A Hub folder as timm's ``save_for_hf`` writes it (``model_args`` with the tiny sizes). Returns (folder, state
    dict, the reference's args)."""
    model_args = dict(TINY, img_size=list(size))
    args = dict(ARCHITECTURES[architecture], **model_args)
    state = reference_dinov3.state_dict(args, seed=seed)
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architecture": architecture, "num_classes": 0, "num_features": 32, "model_args": model_args,
                   "pretrained_cfg": {"input_size": [3, *size], "mean": MEAN, "std": STD}}, f)
    return folder, state, args


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("dinov3")
    return {name: dinov3_folder(str(root / name), name) for name in ARCHITECTURES}


def images(size, batch=2, seed=1):
    return np.random.default_rng(seed).uniform(0, 255, (batch, *size, 3)).astype("float32")


def assert_matches(model, state, args, pixels, tol=1e-5):
    got = np.asarray(model(pixels), np.float64)
    want = np.stack([reference_dinov3.forward(image, state, args) for image in pixels])
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= tol * np.max(np.abs(want)), np.max(np.abs(got - want))


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_from_pretrained_computes_timms_dinov3(architecture, folders):
    folder, state, args = folders[architecture]
    model = keras_vit.from_pretrained(folder)
    config = model.vit_config
    assert (config.rope, config.rope_grid_indexing, config.rope_temperature) == ("dinov3", "ij", 100.0)
    assert not config.position_embedding and config.num_register_tokens == 4 and config.pooling == "gap"
    assert config.layer_norm_epsilon == 1e-5 and config.qkv_bias == args["qkv_bias"]
    assert (config.mlp_type, config.mlp_activation) == (("glu", "silu") if args.get("swiglu_mlp") else ("mlp", "gelu"))
    # timm's parameters one for one, and EvaAttention's zero key bias (a buffer in timm) as keras_vit's weight
    assert model.count_params() == sum(a.size for a in state.values()) + (2 * 32 if args["qkv_bias"] else 0)
    assert_matches(model, state, args, images((32, 48)))


def test_dinov3_at_another_resolution_takes_the_new_grid_without_resampling(folders):
    """DINOv3's coordinates are normalised per axis: at 48 x 64 the rotation of that grid, as timm computes it."""
    folder, state, args = folders["vit_small_patch16_dinov3"]
    model = keras_vit.from_pretrained(folder, image_size=(48, 64))
    assert model.vit_config.grid == (6, 8) and not model.load_report.resized
    assert_matches(model, state, dict(args, img_size=(48, 64)), images((48, 64), batch=1))


def test_another_pooling_is_refused_naming_the_one_it_was_trained_with(folders):
    """timm's DINOv3 registrations average the patch tokens; the class token is there, reached with pooling=None."""
    import keras_vit

    folder, _, _ = folders["vit_small_patch16_dinov3"]
    with pytest.raises(ValueError, match=r"was trained with pooling='gap' \(the mean of the tokens\); .*its first is "
                                         r"the class token"):
        keras_vit.from_pretrained(folder, include_top=False, pooling="token")
    tokens = keras_vit.from_pretrained(folder, include_top=False, pooling=None)
    rows, cols = tokens.vit_config.grid
    assert tokens.output_shape[1] == 1 + 4 + rows * cols  # the class token first, 4 registers, the patches


def test_a_swiglu_width_is_rounded_up_to_its_alignment_as_timm_does():
    defaults = timm_models.table()["classes"]["Eva"]
    args = dict(timm_models.registration("vit_small_plus_patch16_dinov3")["args"], embed_dim=40, swiglu_align_to=48)
    out, lacking = timm_eva.read(args, defaults)
    assert not lacking and out["mlp_layer"] == "SwiGLUPacked" and int(40 * out["mlp_ratio"]) == 2 * 192  # 160 -> 192


def test_what_dinov3_and_eva_py_have_that_keras_vit_lacks_stays_refused_by_name(folders, tmp_path):
    registered = sorted(a for a, row in timm_models.table()["architectures"].items()
                        if row["model_class"] == "Eva" and "dinov3" in a and not timm_models.lacking(a))
    assert len(registered) == 12 and "vit_7b_patch16_dinov3" in registered  # 7B: read, too big to check here
    defaults = timm_models.table()["classes"]["Eva"]
    dinov3 = timm_models.registration("vit_small_patch16_dinov3")["args"]
    for change, named in ((dict(rope_rotate_half=False), "interleaved rotation with rope_type='dinov3'"),
                          (dict(use_abs_pos_emb=True), "dynamic image size with an absolute position table"),
                          (dict(rope_rescale_coords=2.0), "RoPE coordinate augmentation"),
                          (dict(norm_layer="RmsNorm"), "a norm other than timm's LayerNorm"),
                          (dict(qk_norm=True), "query/key normalisation")):
        out, lacking = timm_eva.read({**dinov3, **change}, defaults)
        assert out is None and any(named in why for why in lacking), (change, lacking)
    # EVA's attention stays refused outside DINOv3's RoPE and axial RoPE on a reference grid (EVA-02's)
    rope_vit = dict(timm_models.registration("vit_small_patch16_rope_224")["args"], attn_type="eva")
    assert any("(attn_type='eva')" in why for why in timm_eva.read(rope_vit, defaults)[1])
    folder, _, _ = folders["vit_small_patch16_dinov3"]
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config["architecture"] = "vit_small_patch16_rope_224"  # the weights have registers, the architecture none
    other = tmp_path / "other"
    other.mkdir()
    with open(other / "config.json", "w") as f:
        json.dump(config, f)
    os.symlink(os.path.join(folder, "model.safetensors"), other / "model.safetensors")
    with pytest.raises(CheckpointError, match="reg"):
        keras_vit.from_pretrained(str(other))


@pytest.mark.parametrize("fields, named", [
    (dict(rope="dinov3", num_heads=4, hidden_size=24), "multiple of 4"),
    (dict(rope="dinov3", image_size=None), "image_size=None"),
])
def test_impossible_dinov3_configs_are_refused(fields, named):
    sizes = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64)
    with pytest.raises(ValueError, match=named):
        keras_vit.ViTConfig(**{**sizes, **fields})


def transformers_folder(folder, timm_state, gated, size=(32, 48)):
    """The same weights as transformers' ``DINOv3ViTModel.save_pretrained`` names them (``modeling_dinov3_vit.py``:
    ``q/k/v/o_proj`` with no key bias, ``layer_scale{1,2}.lambda1``, ``up/down_proj`` or ``gate/up/down_proj``)."""
    rename = {"cls_token": "embeddings.cls_token", "reg_token": "embeddings.register_tokens",
              "patch_embed.proj.weight": "embeddings.patch_embeddings.weight",
              "patch_embed.proj.bias": "embeddings.patch_embeddings.bias", "norm.weight": "norm.weight", "norm.bias": "norm.bias"}
    parts = {"norm1": "norm1", "norm2": "norm2", "attn.proj": "attention.o_proj", "gamma_1": "layer_scale1.lambda1",
             "gamma_2": "layer_scale2.lambda1", "mlp.fc1_g": "mlp.gate_proj", "mlp.fc1_x": "mlp.up_proj",
             "mlp.fc1": "mlp.up_proj", "mlp.fc2": "mlp.down_proj", "attn.q_bias": "attention.q_proj.bias",
             "attn.v_bias": "attention.v_proj.bias"}
    state = {}
    for key, array in timm_state.items():
        if key in rename:
            state[rename[key]] = array
            continue
        _, i, rest = key.split(".", 2)
        if rest == "attn.qkv.weight":
            for name, third in zip("qkv", np.split(array, 3)):
                state[f"layer.{i}.attention.{name}_proj.weight"] = third
            continue
        stem = next(p for p in sorted(parts, key=len, reverse=True) if rest.startswith(p))
        state[f"layer.{i}.{parts[stem]}{rest[len(stem):]}"] = array
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    hidden = timm_state["blocks.0.mlp.fc2.weight"].shape[1]
    bias = "blocks.0.attn.q_bias" in timm_state
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "dinov3_vit", "architectures": ["DINOv3ViTModel"], "hidden_size": 32, "num_hidden_layers": 2,
                   "num_attention_heads": 2, "intermediate_size": hidden, "patch_size": 8, "image_size": list(size),
                   "num_register_tokens": 4, "use_gated_mlp": gated, "hidden_act": "silu" if gated else "gelu",
                   "query_bias": bias, "value_bias": bias, "key_bias": False, "layerscale_value": 1e-5}, f)
    return folder


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_transformers_dinov3_vit_reads_into_the_same_config(architecture, folders, tmp_path):
    """transformers' DINOv3ViTModel (its pooler_output: the final-normed class token) of the same weights."""
    _, state, args = folders[architecture]
    gated = bool(args.get("swiglu_mlp"))
    model = keras_vit.from_pretrained(transformers_folder(str(tmp_path / "hf"), state, gated))
    config = model.vit_config
    assert (config.rope, config.rope_grid_indexing, config.rope_temperature, config.pooling) == ("dinov3", "ij", 100.0, "token")
    assert config.mlp_type == ("glu" if gated else "mlp") and config.num_register_tokens == 4
    assert_matches(model, state, dict(args, global_pool="token"), images((32, 48), batch=1))


def test_transformers_dinov3_vit_without_output_and_mlp_biases(folders, tmp_path):
    """``proj_bias=False`` / ``mlp_bias=False`` (no ``o_proj`` / ``up_proj`` / ``down_proj`` biases) are ViTConfig's
    ``proj_bias`` / ``mlp_bias``, as AIMv2's; they were refused as "keras_vit's attention output and MLP layers have
    biases" (the reference: the same weights with those biases at zero)."""
    _, state, args = folders["vit_small_patch16_dinov3"]
    state = {k: (np.zeros_like(v) if k.endswith(("attn.proj.bias", "mlp.fc1.bias", "mlp.fc2.bias")) else v)
             for k, v in state.items()}
    folder = transformers_folder(str(tmp_path / "hf"), state, False)
    written = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
    safetensors_numpy.save_file({k: v for k, v in written.items()
                                 if not k.endswith(("o_proj.bias", "up_proj.bias", "down_proj.bias"))},
                                os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(dict(config, proj_bias=False, mlp_bias=False), f)
    model = keras_vit.from_pretrained(folder)
    assert (model.vit_config.proj_bias, model.vit_config.mlp_bias) == (False, False)
    assert_matches(model, state, dict(args, global_pool="token"), images((32, 48), batch=1))


def test_transformers_dinov3_vit_with_a_query_bias_and_no_value_bias(folders, tmp_path):
    """``query_bias=True, value_bias=False`` (or any other mix) is the attention with a zero bias where a projection
    has none (the same output); it was refused as 'query, key and value biases all together or none'."""
    _, state, args = folders["vit_small_plus_patch16_dinov3_qkvb"]
    state = {k: (np.zeros_like(v) if k.endswith("attn.v_bias") else v) for k, v in state.items()}
    folder = transformers_folder(str(tmp_path / "hf"), state, True)
    written = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
    safetensors_numpy.save_file({k: v for k, v in written.items() if not k.endswith("v_proj.bias")},
                                os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(dict(config, value_bias=False), f)
    model = keras_vit.from_pretrained(folder)
    assert model.vit_config.qkv_bias is True
    assert_matches(model, state, dict(args, global_pool="token"), images((32, 48), batch=1))
