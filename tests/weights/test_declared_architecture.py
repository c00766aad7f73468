"""What a checkpoint declares about its architecture is compared with the model's, field by field, in every layout.

Heads stored merged (timm, transformers), an epsilon, an activation or a query/key/value bias have no shape of
their own: a file declaring 4 heads loaded into a 2-head model without a word, and its logits moved. Each source
layout's declared fields are refused when they differ from the model's ViTConfig, naming the file's field and
the model's; the sizes a file states about its own weights (patch, image size) are checked against them.
"""

import json
import os
import tempfile

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import keras_vit
from helpers import TINY, save_npz, vit_checkpoint
from keras_vit.weights import CheckpointError, describe

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from foreign_files import TINY_TIMM_CONFIG, timm_file, transformers_folder  # noqa: E402

TIMM_CONFIG = dict(TINY_TIMM_CONFIG, num_classes=5)


def tiny(**changes):
    return dict(TINY, num_classes=5, **changes)


def _transformers(tmp_path, **kwargs):
    return transformers_folder(tmp_path / "vit", vit_checkpoint(), **kwargs)


def _timm(tmp_path, bias_tensors=True, **model_args):
    config = dict(TIMM_CONFIG, model_args={**TINY_TIMM_CONFIG["model_args"], **model_args})
    return timm_file(tmp_path / "timm", vit_checkpoint(), config, qkv_bias=bias_tensors)


def _npz(tmp_path, **kwargs):
    return save_npz(tmp_path / "c.npz", vit_checkpoint(**kwargs))


def _keras(tmp_path, **changes):
    path = str(tmp_path / "m.keras")
    keras_vit.save_model(keras_vit.ViT(**tiny(**changes)), path)
    return path


# (source writer, its arguments, the model's arguments, the message): one row per declared field and layout
REFUSED = {
    "transformers-heads": (_transformers, {}, tiny(num_heads=2), r"config\.json: num_attention_heads=4 but the model has num_heads=2"),
    "transformers-epsilon": (_transformers, {"eps": 1e-5}, tiny(layer_norm_epsilon=1e-12),
                             r"config\.json: layer_norm_eps=1e-05 but the model has layer_norm_epsilon=1e-12"),
    "transformers-activation": (_transformers, {"hidden_act": "relu"}, tiny(),
                                r"config\.json: hidden_act='relu' but the model has mlp_activation='gelu' "
                                r"\(keras_vit's MLP activations: gelu, gelu_tanh, quick_gelu, silu"),
    "transformers-qkv-bias": (_transformers, {"qkv_bias": False}, tiny(),
                              r"config\.json: qkv_bias=False but the model has qkv_bias=True \(build the model "
                              r"with the file's qkv_bias\)"),
    "transformers-depth": (_transformers, {}, tiny(num_layers=1), r"config\.json: num_hidden_layers=2 but the model has num_layers=1"),
    "transformers-width": (_transformers, {}, tiny(hidden_size=64), r"config\.json: hidden_size=32 but the model has hidden_size=64"),
    "transformers-mlp": (_transformers, {}, tiny(mlp_dim=128), r"config\.json: intermediate_size=64 but the model has mlp_dim=128"),
    "timm-heads": (_timm, {}, tiny(num_heads=2), r"config\.json: model_args\.num_heads=4 but the model has num_heads=2"),
    "timm-epsilon": (_timm, {}, tiny(layer_norm_epsilon=1e-12),
                     r"config\.json: architecture='vit_base_patch16_224' \(timm registers no norm_eps: LayerNorm eps=1e-06\) "
                     r"but the model has layer_norm_epsilon=1e-12"),
    "timm-activation": (_timm, {"act_layer": "quick_gelu"}, tiny(mlp_activation="gelu"),  # set: not taken from the file
                        r"config\.json: model_args\.act_layer='quick_gelu' but the model has mlp_activation='gelu'"),
    "timm-qkv-bias": (_timm, {"qkv_bias": False, "bias_tensors": False}, tiny(),
                      r"config\.json: model_args\.qkv_bias=False but the model has qkv_bias=True"),
    "timm-depth": (_timm, {"depth": 2}, tiny(num_layers=1), r"config\.json: model_args\.depth=2 but the model has num_layers=1"),
    "timm-width": (_timm, {"embed_dim": 32}, tiny(hidden_size=64), r"config\.json: model_args\.embed_dim=32 but the model has hidden_size=64"),
    "timm-mlp": (_timm, {"embed_dim": 32, "mlp_ratio": 2.0}, tiny(mlp_dim=128),
                 r"config\.json: model_args\.mlp_ratio=2\.0 \(x width 32\) but the model has mlp_dim=128"),
    "timm-class-token": (_timm, {"class_token": True}, tiny(pooling="gap"),
                         r"config\.json: model_args\.class_token=True but the model has class_token=False"),
    "timm-pooling": (_timm, {"global_pool": "token"}, tiny(pooling="gap"),
                     r"config\.json: model_args\.global_pool='token' but the model has pooling='gap'"),
    "npz-heads": (_npz, {}, tiny(num_heads=2),
                  r"c\.npz: 'Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel' of shape \(32, 4, 8\) "
                  r"\(D, heads=4, head_dim\) but the model has num_heads=2"),
    "npz-epsilon": (_npz, {}, tiny(layer_norm_epsilon=1e-12),
                    r"c\.npz: original layout \(LayerNorm epsilon 1e-06\) but the model has layer_norm_epsilon=1e-12"),
    "keras-heads": (_keras, {}, tiny(num_heads=2), r"m\.keras: vit_config\.num_heads=4 but the model has num_heads=2"),
    "keras-epsilon": (_keras, {"layer_norm_epsilon": 1e-12}, tiny(layer_norm_epsilon=1e-6),
                      r"m\.keras: vit_config\.layer_norm_epsilon=1e-12 but the model has layer_norm_epsilon=1e-06"),
    "keras-depth": (_keras, {}, tiny(num_layers=1), r"m\.keras: vit_config\.num_layers=2 but the model has num_layers=1"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_declared_field_that_differs_from_the_models_is_refused_by_name(tmp_path, case):
    """The builder refuses before building; load_checkpoint into a built model refuses before writing a weight."""
    writer, kwargs, model_args, message = REFUSED[case]
    path = writer(tmp_path, **kwargs)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.ViT(**model_args, weights=path)
    model = keras_vit.ViT(**model_args)
    before = [np.array(w) for w in model.get_weights()]
    with pytest.raises(CheckpointError, match=r"declares an architecture that model 'vit' does not have.*" + message):
        keras_vit.load_checkpoint(model, path)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))


def test_every_difference_is_named_at_once(tmp_path):
    folder = _transformers(tmp_path, eps=1e-6, hidden_act="quick_gelu")
    with pytest.raises(CheckpointError, match=r"\(3 difference\(s\)\): config\.json: num_attention_heads=4 but the model "
                                              r"has num_heads=2; config\.json: num_hidden_layers=2 but the model has "
                                              r"num_layers=1; config\.json: hidden_act='quick_gelu'"):
        keras_vit.load_checkpoint(keras_vit.ViT(**tiny(num_heads=2, num_layers=1)), folder)


def test_a_timm_file_without_qkv_bias_tensors_is_refused_without_a_config(tmp_path):
    """Zeros used to stand in for the biases of a qkv_bias=False model without a word."""
    path = timm_file(tmp_path / "timm", vit_checkpoint(), qkv_bias=False)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: no query/key/value bias tensors \(qkv_bias=False\) "
                                              r"but the model has qkv_bias=True"):
        keras_vit.ViT(**tiny(), weights=path)


@pytest.mark.parametrize("source, change, message", [
    ("transformers", {"patch_size": 16}, r"config\.json says patch_size=16 but the weights have 8"),
    ("transformers", {"image_size": 64}, r"config\.json says image_size=64 \(8 x 8 patches of 8\) but the weights' "
                                         r"position embeddings cover 16 patches"),
    ("timm", {"patch_size": 16}, r"config\.json says model_args\.patch_size=16 but the weights have 8"),
    ("timm", {"img_size": 64}, r"config\.json says model_args\.img_size=64 \(8 x 8 patches of 8\)"),
])
def test_a_declared_patch_or_image_size_is_checked_against_the_weights(tmp_path, source, change, message):
    """A model of another size gets the weights resampled (reported); a file contradicting its own weights is refused."""
    path = _transformers(tmp_path, **change) if source == "transformers" else _timm(tmp_path, **change)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.ViT(**tiny(), weights=path)


@pytest.mark.parametrize("source", ["transformers", "keras"])
def test_a_declared_non_square_grid_is_resampled_not_read_transposed(tmp_path, source):
    """4 x 6 position embeddings into a 6 x 4 model have the same shape: they were loaded as they were, transposed."""
    if source == "transformers":
        path = transformers_folder(tmp_path / "vit", vit_checkpoint(grid=(4, 6)), image_size=[32, 48])
    else:
        path = _keras(tmp_path, image_size=(32, 48))
    assert describe(path).grid == (4, 6)
    model = keras_vit.ViT(**tiny(image_size=(48, 32)), weights=path)
    assert model.load_report.resized["Transformer/posembed_input/pos_embedding"] == ((1, 25, 32), (1, 25, 32))
    same = keras_vit.ViT(**tiny(image_size=(32, 48)), weights=path)
    assert "Transformer/posembed_input/pos_embedding" not in same.load_report.resized


def test_the_builder_takes_the_files_epsilon_unless_given_and_keeps_its_heads(tmp_path):
    folder = _transformers(tmp_path, eps=1e-5)
    assert keras_vit.ViT(**tiny(), weights=folder).vit_config.layer_norm_epsilon == 1e-5
    with pytest.raises(CheckpointError, match=r"layer_norm_eps=1e-05 but the model has layer_norm_epsilon=1e-06"):
        keras_vit.ViT(**tiny(layer_norm_epsilon=1e-6), weights=folder)
    model = keras_vit.from_pretrained(folder)
    assert (model.vit_config.num_heads, model.vit_config.layer_norm_epsilon) == (4, 1e-5)


@pytest.mark.parametrize("weight_map, message", [
    ({"x": 3}, r"index\.json': weight_map\['x'\]=3, expected the name of a shard file"),
    ({"x": None}, r"weight_map\['x'\]=None, expected the name of a shard file"),
    ({"x": "../outside.safetensors"}, r"weight_map\['x'\]='\.\./outside\.safetensors' is not a file inside the folder"),
    ({"x": "a/../../outside.safetensors"}, r"weight_map\['x'\]='a/\.\./\.\./outside\.safetensors' is not a file inside"),
    ({"x": "/etc/passwd"}, r"weight_map\['x'\]='/etc/passwd' is not a file inside the folder"),
    ([1], r"index\.json': weight_map=\[1\], expected a JSON object"),
    (None, r"index\.json' has no weight_map"),
])
def test_a_malformed_sharded_index_is_named_with_its_key(tmp_path, weight_map, message):
    """``{"weight_map": {"x": 3}}`` raised a bare TypeError; an index naming a file outside its folder was opened."""
    folder = tmp_path / "sharded"
    folder.mkdir()
    with open(folder / "model.safetensors.index.json", "w") as f:
        json.dump({} if weight_map is None else {"weight_map": weight_map}, f)
    with pytest.raises(CheckpointError, match=message):
        describe(folder)


# ------------------------------------------------------------------ property: one differing field is named

_DIFFERS = {  # field -> (the config.json field named, how the model's arguments change)
    "num_heads": ("num_attention_heads", lambda a: dict(a, num_heads=a["num_heads"] * 2 if a["num_heads"] < 4 else 1)),
    "layer_norm_epsilon": ("layer_norm_eps", lambda a: dict(a, layer_norm_epsilon=1e-3 if a["layer_norm_epsilon"] < 1e-3 else 1e-6)),
    "num_layers": ("num_hidden_layers", lambda a: dict(a, num_layers=3 - a["num_layers"])),
    "mlp_dim": ("intermediate_size", lambda a: dict(a, mlp_dim=a["mlp_dim"] * 2)),
    "hidden_size": ("hidden_size", lambda a: dict(a, hidden_size=a["hidden_size"] * 2)),
    "mlp_activation": ("hidden_act", None),  # the file's is one keras_vit has no layer for (relu)
}


@settings(max_examples=20, deadline=None, derandomize=True)
@given(heads=st.sampled_from([1, 2, 4]), layers=st.sampled_from([1, 2]), mlp=st.sampled_from([16, 48]),
       eps=st.sampled_from([1e-12, 1e-6, 1e-5]), differs=st.sampled_from([None, *_DIFFERS]))
@example(heads=2, layers=1, mlp=16, eps=1e-6, differs=None)
@example(heads=4, layers=2, mlp=48, eps=1e-12, differs="num_heads")
def test_property_one_differing_declared_field_is_refused_by_name(heads, layers, mlp, eps, differs):
    """A random tiny transformers config; the model agrees with it except (maybe) in one declared field."""
    args = dict(image_size=16, patch_size=8, hidden_size=8, num_layers=layers, num_heads=heads, mlp_dim=mlp,
                num_classes=3, layer_norm_epsilon=eps)
    params = vit_checkpoint(hidden_size=8, num_layers=layers, num_heads=heads, mlp_dim=mlp, num_classes=3, grid=(2, 2))
    with tempfile.TemporaryDirectory() as tmp:
        act = "relu" if differs == "mlp_activation" else "gelu"
        folder = transformers_folder(os.path.join(tmp, "vit"), params, num_layers=layers, d=8, heads=heads, mlp=mlp,
                                     num_classes=3, eps=eps, hidden_act=act, image_size=16)
        if differs is None:
            model = keras_vit.ViT(**args, weights=folder)
            assert len(model.load_report.loaded) == len(params)
            return
        name, change = _DIFFERS[differs]
        with pytest.raises(CheckpointError) as error:
            keras_vit.ViT(**(change(args) if change else args), weights=folder)
    message = str(error.value)
    assert f"config.json: {name}=" in message and f"but the model has {differs}=" in message
    assert "(1 difference(s))" in message
