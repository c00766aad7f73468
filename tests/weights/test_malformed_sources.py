"""Malformed pretrained sources a timm / transformers user meets: each refused by name, or handled, never guessed.

Every source is written by the test (tiny sizes, the writers of :mod:`test_hub_formats`); most checks stop at
``keras_vit.weights.describe`` (shapes and settings, no model built).
"""

import json
import os
import re

import numpy as np
import pytest

import keras_vit
from helpers import images, vit_checkpoint
from keras_vit import saving
from keras_vit.weights import CheckpointError, describe

safetensors_numpy = pytest.importorskip("safetensors.numpy")
from foreign_files import TINY_TIMM_CONFIG, timm_file, timm_state_dict, transformers_folder  # noqa: E402

TIMM_CONFIG = dict(TINY_TIMM_CONFIG, num_classes=5)


def tiny_args(**changes):
    """The tiny model's timm model_args with ``changes`` (None: left out, so the registration's value holds)."""
    merged = {**TINY_TIMM_CONFIG["model_args"], **changes}
    return {k: v for k, v in merged.items() if v is not None}


def edit_config(folder, name="config.json", **changes):
    """Set (or, with None, remove) fields of a folder's JSON file; returns the folder."""
    path = os.path.join(folder, name)
    with open(path) as f:
        config = json.load(f)
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    with open(path, "w") as f:
        json.dump(config, f)
    return str(folder)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def write_shards(folder, state):
    """``state`` in two shards (``model-1``, ``model-2``: alternate keys) and the index that maps them."""
    keys = sorted(state)
    for n, part in ((1, keys[::2]), (2, keys[1::2])):
        safetensors_numpy.save_file({k: state[k] for k in part}, str(folder / f"model-{n}.safetensors"))
    write_json(folder / "model.safetensors.index.json", {"weight_map": {k: f"model-{1 + i % 2}.safetensors" for i, k in enumerate(keys)}})
    return keys


def test_transformers_image_size_is_checked_as_a_grid(tmp_path):
    """A non-square ``image_size`` beside a 4 x 4 grid of position embeddings is refused (its height alone matched)."""
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())
    assert describe(edit_config(folder, image_size=[32, 32])).format == "transformers"
    with pytest.raises(CheckpointError, match=r"config\.json says image_size=\[32, 48\] \(4 x 6 patches of 8\) "
                                              r"but the weights' position embeddings cover 16 patches"):
        describe(edit_config(folder, image_size=[32, 48]))


@pytest.mark.parametrize("field, value", [
    ("layer_norm_eps", "abc"), ("layer_norm_eps", None), ("num_attention_heads", "4"), ("hidden_size", 32.5),
])
def test_transformers_config_fields_of_the_wrong_type_are_named(tmp_path, field, value):
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())
    config = json.loads((tmp_path / "vit" / "config.json").read_text())
    config[field] = value  # None: JSON null, not removed
    write_json(tmp_path / "vit" / "config.json", config)
    with pytest.raises(CheckpointError, match=rf"config\.json'.*{field}={value!r}.*expected a"):
        describe(folder)


def test_a_config_that_is_not_a_json_object_is_named(tmp_path):
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())
    write_json(tmp_path / "vit" / "config.json", [1])
    with pytest.raises(CheckpointError, match=r"config\.json': expected a JSON object.*Received: list"):
        describe(folder)
    path = timm_file(tmp_path / "timm", vit_checkpoint(), {"architecture": "vit_base_patch16_224", "model_args": [4]})
    with pytest.raises(CheckpointError, match=r"config\.json'.*model_args=\[4\].*expected a JSON object"):
        describe(path)
    folder = transformers_folder(tmp_path / "vit2", vit_checkpoint())
    write_json(tmp_path / "vit2" / "preprocessor_config.json", [1])
    with pytest.raises(CheckpointError, match=r"preprocessor_config\.json': expected a JSON object"):
        describe(folder)


@pytest.mark.parametrize("labels, problem", [
    ({"0": "a", "1": "b", "2": "c", "3": "d", "5": "f"}, r"lacks index 4.*has 5 outside 0\.\.4"),
    ({"0": "a", "1": "b", "01": "x", "2": "c", "3": "d"}, r"index 1 twice"),
    ({"a": "x"}, r"key 'a' is not an index"),
    ("cats", r"is 'cats', expected a JSON object"),
])
def test_id2label_that_does_not_name_each_index_is_not_used(tmp_path, labels, problem):
    """A gap or a stray key used to shift the names (index 4 named after key 5); the weights still load."""
    folder = edit_config(transformers_folder(tmp_path / "vit", vit_checkpoint()), id2label=labels)
    with pytest.warns(UserWarning, match=rf"config\.json'.*id2label.*{problem}.*no class names"):
        info = describe(folder)
    assert info.class_names is None


def test_label_names_out_of_order_are_put_in_index_order(tmp_path):
    folder = edit_config(transformers_folder(tmp_path / "vit", vit_checkpoint()),
                         id2label={"3": "d", "0": "a", "4": "e", "1": "b", "2": "c"})
    assert describe(folder).class_names == ["a", "b", "c", "d", "e"]
    assert describe(edit_config(folder, id2label=["a", "b", "c", "d", "e"])).class_names == ["a", "b", "c", "d", "e"]
    config = dict(TIMM_CONFIG, label_names={"0": "a", "1": "b", "2": "c", "3": "d", "7": "h"})
    with pytest.warns(UserWarning, match=r"label_names.*lacks index 4"):
        assert describe(timm_file(tmp_path / "timm", vit_checkpoint(), config)).class_names is None


@pytest.mark.parametrize("change, message", [
    ({"architecture": "vit_small_patch16_224", "model_args": tiny_args(embed_dim=None)},
     r"architecture='vit_small_patch16_224' \(timm registers embed_dim=384\) but the weights have 32"),
    ({"model_args": tiny_args(embed_dim=64)}, r"model_args\.embed_dim=64 but the weights have 32"),
    ({"num_features": 48}, r"num_features=48 but the weights have 32"),
    ({"model_args": tiny_args(depth=3)}, r"model_args\.depth=3 but the weights have 2"),
    ({"model_args": tiny_args(patch_size=None)},
     r"architecture='vit_base_patch16_224' \(timm registers patch_size=16\) but the weights have 8"),
    ({"num_classes": 1000}, r"num_classes=1000 but the weights have 5"),
    ({"model_args": tiny_args(qkv_bias=False)}, r"model_args\.qkv_bias=False but the weights have True"),
    ({"model_args": tiny_args(class_token=False)}, r"model_args\.class_token=False but the weights have True"),
    ({"pretrained_cfg": {"input_size": [3, 64, 64]}, "model_args": tiny_args(img_size=None)}, r"pretrained_cfg\.input_size=\[3, 64, 64\] \(8 x 8 patches"),
])
def test_timm_config_that_disagrees_with_the_weights_is_refused(tmp_path, change, message):
    """A config.json of another model beside a state dict would give it that model's heads: refused by field."""
    path = timm_file(tmp_path / "timm", vit_checkpoint(), dict(TIMM_CONFIG, **change))
    with pytest.raises(CheckpointError, match=r"config\.json'?: config\.json says " + message):
        describe(path)


def test_timm_config_that_agrees_is_read(tmp_path):
    """Every field checked above, agreeing with the weights, passes; the real names give the paper's sizes."""
    from keras_vit.weights import timm

    config = dict(TIMM_CONFIG, num_features=32, pretrained_cfg={"input_size": [3, 32, 32]},
                  model_args={"num_heads": 4, "embed_dim": 32, "depth": 2, "patch_size": 8, "img_size": 32,
                              "qkv_bias": True, "class_token": True, "num_classes": 5})
    assert describe(timm_file(tmp_path / "timm", vit_checkpoint(), config)).num_heads == 4
    expected = timm.settings({"architecture": "vit_tiny_patch16_224", "num_classes": 1000, "num_features": 192,
                              "pretrained_cfg": {"input_size": [3, 224, 224]}}).expected
    assert [(q, v) for q, _, v in expected] == [
        ("hidden_size", 192), ("num_features", 192), ("num_layers", 12), ("patch_size", 16), ("num_classes", 1000),
        ("image_size", (224, 224)),
    ]


def _timm_file_without(tmp_path, key):
    state = timm_state_dict(vit_checkpoint())
    del state[key]
    path = str(tmp_path / "timm.safetensors")
    safetensors_numpy.save_file(state, path)
    return path


def test_a_block_missing_part_of_its_qkv_bias_is_refused(tmp_path):
    """Zeros stand in for q/k/v biases only when the file has none (qkv_bias=False), not for one lost tensor."""
    path = _timm_file_without(tmp_path, "blocks.1.attn.qkv.bias")
    with pytest.raises(CheckpointError, match=r"lacks 3 key\(s\).*encoderblock_1/MultiHeadDotProductAttention_1/query/bias"):
        keras_vit.from_pretrained(path, num_heads=4)

    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())
    file = os.path.join(folder, "model.safetensors")
    state = safetensors_numpy.load_file(file)
    del state["vit.encoder.layer.0.attention.attention.value.bias"]
    safetensors_numpy.save_file(state, file)
    with pytest.raises(CheckpointError, match=r"lacks 1 key\(s\).*encoderblock_0/MultiHeadDotProductAttention_1/value/bias"):
        keras_vit.from_pretrained(folder)


def test_half_a_head_is_refused(tmp_path):
    """A head kernel without its bias is a damaged file, not a headless one: the bias is not silently zero."""
    path = _timm_file_without(tmp_path, "head.bias")
    with pytest.raises(CheckpointError, match=r"lacks 1 key\(s\).*head/bias \(model expects \(5,\)\)"):
        keras_vit.from_pretrained(path, num_heads=4)


def test_the_same_tensor_twice_is_refused(tmp_path):
    """Two files (or two names) holding one weight: which one wins was the order of a dict."""
    state = timm_state_dict(vit_checkpoint())
    folder = tmp_path / "two"
    folder.mkdir()
    safetensors_numpy.save_file(state, str(folder / "a.safetensors"))
    safetensors_numpy.save_file({**state, "norm.weight": state["norm.weight"] * 2}, str(folder / "b.safetensors"))
    with pytest.raises(CheckpointError, match=r"Tensor '[^']+' is in both .*a\.safetensors' and .*b\.safetensors'"):
        describe(folder)

    vit = transformers_folder(tmp_path / "vit", vit_checkpoint())
    file = os.path.join(vit, "model.safetensors")
    state = safetensors_numpy.load_file(file)
    state["layernorm.weight"] = state["vit.layernorm.weight"] * 3
    safetensors_numpy.save_file(state, file)
    with pytest.raises(CheckpointError, match=r"'layernorm\.weight' and 'vit\.layernorm\.weight' are both "
                                              r"'Transformer/encoder_norm/scale'"):
        describe(vit)


def test_a_sharded_index_that_does_not_match_its_shards_is_named(tmp_path):
    """An index mapping tensors to a shard that does not hold them (shards of two downloads) was called 'not a ViT'."""
    folder = tmp_path / "sharded"
    folder.mkdir()
    keys = write_shards(folder, timm_state_dict(vit_checkpoint()))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    write_json(folder / "model.safetensors.index.json", {"weight_map": {k: "model-1.safetensors" for k in keys}})
    message = (rf"index\.json' does not match its shards \({len(keys[1::2])} tensor\(s\): "
               r"'.+': index says 'model-1\.safetensors', found in no shard")
    with pytest.raises(CheckpointError, match=message):
        describe(folder)
    write_json(folder / "model.safetensors.index.json", index)
    assert describe(folder).format == "timm" and describe(folder).num_heads is None


def test_a_folder_with_model_safetensors_and_an_index_reads_model_safetensors_as_transformers_does(tmp_path):
    """The shards were read (transformers loads model.safetensors first), and a stale index beside a whole file
    was refused for its missing shards."""
    state = timm_state_dict(vit_checkpoint())
    write_shards(tmp_path, state)
    whole = dict(state, **{"head.bias": state["head.bias"] + 100})
    safetensors_numpy.save_file(whole, str(tmp_path / "model.safetensors"))
    model = keras_vit.from_pretrained(str(tmp_path), num_heads=4)
    np.testing.assert_array_equal(np.asarray(model.get_layer("head").bias), whole["head.bias"])
    for shard in ("model-1.safetensors", "model-2.safetensors"):  # the index stale: its shards gone
        os.remove(tmp_path / shard)
    assert describe(str(tmp_path)).format == "timm"


def test_an_npz_with_one_weight_under_two_names_is_refused_naming_both(tmp_path):
    """`head/bias` beside `params/head/bias` (or a block's MlpBlock_3 and MlpBlock_0) loaded whichever came last."""
    checkpoint = {k: np.asarray(v) for k, v in vit_checkpoint().items()}
    for other, key in (("params/head/bias", "head/bias"),
                       ("Transformer/encoderblock_0/MlpBlock_0/Dense_0/bias", "Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias")):
        path = str(tmp_path / "two.npz")
        np.savez(path, **checkpoint, **{other: checkpoint[key] + 100})
        with pytest.raises(CheckpointError, match=rf"two\.npz' holds .*{re.escape(other)!s}.*two names of the one weight '{re.escape(key)}'"):
            keras_vit.from_pretrained(path)


@pytest.mark.parametrize("heads", ["4", 0, -4, 2.5, True])
def test_a_timm_model_args_num_heads_that_is_no_positive_integer_is_named(tmp_path, heads):
    """"3" ended in a TypeError ('%' of int and str), 0 in a ZeroDivisionError, neither naming the file or field."""
    config = dict(TIMM_CONFIG, model_args=dict(TIMM_CONFIG["model_args"], num_heads=heads))
    path = timm_file(tmp_path / "timm", vit_checkpoint(), config)
    with pytest.raises(CheckpointError, match=rf"config\.json': model_args\.num_heads={re.escape(repr(heads))}, expected a positive integer"):
        describe(path)


def test_a_sharded_folder_named_by_its_index_loads_and_one_shard_is_refused_naming_the_folder(tmp_path):
    state = timm_state_dict(vit_checkpoint())
    write_shards(tmp_path, state)
    assert describe(str(tmp_path / "model.safetensors.index.json")).format == "timm"
    with pytest.raises(CheckpointError, match=r"model-1\.safetensors' is one shard of the model that .*load the folder"):
        describe(str(tmp_path / "model-1.safetensors"))  # it was called 'qkv_bias=True but the weights have False'
    safetensors_numpy.save_file(state, str(tmp_path / "model.safetensors"))  # a whole file beside a broken index
    (tmp_path / "model.safetensors.index.json").write_text("not json")
    assert describe(str(tmp_path / "model.safetensors")).format == "timm"


def test_an_integer_tensor_is_named_by_its_dtype_not_called_corrupt(tmp_path):
    state = timm_state_dict(vit_checkpoint())
    state["norm.bias"] = np.zeros(32, np.int64)
    path = str(tmp_path / "timm.safetensors")
    safetensors_numpy.save_file(state, path)
    with pytest.raises(CheckpointError) as error:
        describe(path)
    assert "tensor 'norm.bias' has dtype I64" in str(error.value) and "truncated" not in str(error.value)


def test_a_batchnorm_step_counter_is_no_weight_and_the_refusal_names_what_is_wrong(tmp_path):
    """timm's MobileCLIP vit_base_mci_224 (a convolutional stem with BatchNorm) was refused for the dtype of torch's
    `num_batches_tracked` counter ("save the weights as float32"); the counter is no weight (keras_vit reads the
    ConvStem since ba79fd3), and what does not fit the registration is named."""
    state = timm_state_dict(vit_checkpoint())
    state["patch_embed.backbone.0.bn.num_batches_tracked"] = np.zeros((), np.int64)
    path = tmp_path / "model.safetensors"
    safetensors_numpy.save_file(state, str(path))
    write_json(tmp_path / "config.json", dict(TIMM_CONFIG, architecture="vit_base_mci_224"))
    with pytest.raises(CheckpointError, match=r"architecture='vit_base_mci_224' \(timm's ConvStem\) but the weights have "
                                              r"no ConvStem \('patch_embed.backbone.0.conv.weight'"):
        describe(str(path))
    del state["patch_embed.proj.weight"]  # a stem of one convolution without the bias of the last
    state["patch_embed.backbone.0.conv.weight"] = np.zeros((8, 3, 3, 3), np.float32)
    safetensors_numpy.save_file(state, str(path))
    with pytest.raises(CheckpointError, match=r"'patch_embed.backbone.0.conv.weight': a ConvStem's last convolution alone has a bias"):
        describe(str(path))
    os.remove(path)  # sharded, the counter in the index too: the index is not called a mismatch for it
    write_shards(tmp_path, state)
    with pytest.raises(CheckpointError, match=r"a ConvStem's last convolution alone has a bias"):
        describe(str(tmp_path))


def test_input_normalisation_errors_name_the_file_and_field(tmp_path):
    config = dict(TIMM_CONFIG, pretrained_cfg={"mean": "imagenet", "std": [0.5] * 3})
    path = timm_file(tmp_path / "timm", vit_checkpoint(), config)
    with pytest.raises(CheckpointError, match=r"config\.json': pretrained_cfg\.mean='imagenet'.*expected 3 numbers"):
        describe(path)
    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())
    write_json(tmp_path / "vit" / "preprocessor_config.json", {"image_mean": [0.5] * 3, "image_std": [0, 0.5, 0.5]})
    with pytest.raises(CheckpointError, match=r"preprocessor_config\.json': image_std=\[0, 0\.5, 0\.5\].*positive"):
        describe(folder)


def test_hf_name_that_is_no_repository_id_is_refused_by_name():
    with pytest.raises(ValueError, match=r"'hf://a b/c'.*not a Hugging Face repository id"):
        keras_vit.from_pretrained("hf://a b/c")


def test_hf_offline_with_nothing_cached_says_what_to_do(monkeypatch):
    """With HF_HUB_OFFLINE=1, 'connect once' does not help: the message says to unset it, or to fetch elsewhere."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError) as error:
        keras_vit.from_pretrained("hf://google/vit-base-patch16-224@refs/pr/3")
    message = str(error.value)
    assert "hf://google/vit-base-patch16-224@refs/pr/3" in message and constants.HF_HUB_CACHE in message
    assert "unset HF_HUB_OFFLINE" in message
    assert "hf download google/vit-base-patch16-224 --revision refs/pr/3" in message


@pytest.mark.parametrize("written", ["ViT-Ti/16", "ti/16", "vit-ti/16"])
def test_preset_variant_written_as_in_the_messages_resolves(monkeypatch, written):
    """'ViT-Ti/16' is how every preset message prints a variant; it used to be refused, the hint repeating it."""
    from keras_vit.models import pretrained
    from keras_vit.weights import sources

    monkeypatch.setattr(sources, "fetch", lambda preset: preset.file)
    file, preset = pretrained.locate(f"{written}:augreg_in21k_ft_in1k")
    assert preset.variant == "Ti/16" and file.endswith("res_224.npz")
    with pytest.raises(ValueError, match=r"No preset 'nope' for ViT-Ti/16"):
        pretrained.locate(f"{written}:nope")


def test_class_names_survive_save_model_load_model_and_predict(tmp_path):
    """from_pretrained -> keras_vit.save_model -> load_model -> predict keeps id2label; a new head keeps none."""
    from PIL import Image

    folder = transformers_folder(tmp_path / "vit", vit_checkpoint())
    names = [f"class {i}" for i in range(5)]
    path = str(tmp_path / "vit.keras")
    keras_vit.save_model(keras_vit.from_pretrained(folder), path)
    assert saving.read_metadata(path)["class_names"] == names
    loaded = keras_vit.load_model(path)
    assert loaded.class_names == names
    image = str(tmp_path / "photo.png")
    Image.fromarray(images(1)[0].astype("uint8")).save(image)
    (result,) = keras_vit.predict(loaded, [image], top_k=5)
    assert sorted(p["label"] for p in result["predictions"]) == names

    tuned = str(tmp_path / "tuned.keras")
    keras_vit.save_model(keras_vit.from_pretrained(folder, num_classes=3), tuned)
    assert "class_names" not in saving.read_metadata(tuned)
    assert not getattr(keras_vit.load_model(tuned), "class_names", None)


def test_class_names_of_another_count_than_the_head_are_named(tmp_path):
    """id2label of 2 names for a head of 5: the weights load, a warning says why the model has no names."""
    folder = edit_config(transformers_folder(tmp_path / "vit", vit_checkpoint()), id2label={"0": "a", "1": "b"})
    with pytest.warns(UserWarning, match=r"vit' names 2 classes but its head has 5 outputs; the model gets no class names"):
        model = keras_vit.from_pretrained(folder)
    assert not getattr(model, "class_names", None)


def test_an_absent_transformers_field_is_called_absent_not_said(tmp_path):
    """ViTConfig's default stands in for an absent field; the message no longer claims the file says 768."""
    folder = edit_config(transformers_folder(tmp_path / "vit", vit_checkpoint()), hidden_size=None)
    with pytest.raises(CheckpointError, match=r"config\.json has no hidden_size \(ViTConfig's default 768\) "
                                              r"but the weights have 32"):
        describe(folder)


@pytest.mark.parametrize("override", [{"representation_size": 16}, {"block_units": (3, 4)}, {"width": 1}])
def test_a_size_the_file_lacks_is_refused_not_ignored(tmp_path, override):
    """A pre-logits layer or ResNet stages the weights do not have were silently left out of the model."""
    from helpers import save_npz

    path = save_npz(tmp_path / "c.npz", vit_checkpoint())
    (name, value), = override.items()
    with pytest.raises(ValueError, match=rf"has {name}=None, fixed by its weights\. Received: {re.escape(f'{name}={value!r}')}"):
        keras_vit.from_pretrained(path, **override)


def test_a_register_count_mismatch_names_the_field_and_the_file(tmp_path):
    """It used to name only keras_vit's internal key 'reg'."""
    from keras_vit.weights.mapping import targets_of

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                          num_classes=5, num_register_tokens=1)
    arrays = {key: np.full(target.shape, 0.1, np.float32) for key, target in targets_of(model).items()}
    arrays["reg"] = np.zeros((1, 4, 32), np.float32)
    path = tmp_path / "four_registers.npz"
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match=r"four_registers\.npz' has 4 register tokens \('reg' \(1, 4, 32\)\) but "
                                              r"model 'vit' has num_register_tokens=1: build it with num_register_tokens=4"):
        keras_vit.load_checkpoint(model, str(path))


def test_an_offline_snapshot_without_weights_says_the_cache_is_incomplete(monkeypatch, tmp_path):
    """It used to say the repository 'publishes no .safetensors weights in this revision'."""
    import huggingface_hub
    from huggingface_hub import constants

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: str(snapshot))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CheckpointError, match=r"cache's snapshot of hf://timm/vit_tiny_patch16_224\.augreg_in21k .* holds "
                                              r"no \.safetensors weights \(it has: config\.json\): the cache is incomplete"):
        keras_vit.from_pretrained("hf://timm/vit_tiny_patch16_224.augreg_in21k")


def test_a_keras_hub_folder_whose_config_lacks_registered_name_says_so(tmp_path):
    """It used to say the folder 'holds no model.safetensors'."""
    import json

    folder = tmp_path / "preset"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"class_name": "ViTBackbone", "config": {}}))
    (folder / "model.weights.h5").write_bytes(b"\\x89HDF\\r\\n\\x1a\\n")
    with pytest.raises(CheckpointError, match=r"holds model\.weights\.h5 and no \.safetensors file, as a keras-hub "
                                              r"preset does, but its config\.json has no 'registered_name'"):
        keras_vit.from_pretrained(str(folder))
