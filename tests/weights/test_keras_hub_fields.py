"""Every field keras-hub writes in a preset's config.json is read by keras_vit (or changes nothing it computes); any
other field is refused by name. tests/fixtures/keras_hub_configs.json lists the fields of keras-hub 0.32's own
``get_config`` of each class (written by tools/keras_hub_configs.py in the peers environment, keras-hub itself): the
offline presets the tests write hold to those names, so the loading tests prove each is read, and a field no reader
looks at (a later keras-hub's switch, which keras_vit would not compute) was silently dropped before."""

import json
import os

import pytest

import reference_keras_hub as khub
import reference_keras_hub_dinov3 as khub3

import keras_vit
from keras_vit.errors import CheckpointError

FIELDS = json.load(open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras_hub_configs.json")))["fields"]
VIT = dict(image_shape=[32, 32, 3], patch_size=[8, 8], num_layers=1, num_heads=4, hidden_dim=32, mlp_dim=64)


def _vit_preset(folder):
    backbone, task = khub.random_preset_weights(VIT)
    return khub.write_preset(str(folder), VIT, backbone, task, {"pooling": "token"})


def _family_preset(folder, kind, task=None):
    config = khub.family_config(kind)
    return khub.write_family_preset(str(folder), kind, config, khub.family_weights(kind, config), task=task)


def _dinov3_preset(folder):
    config = khub3.config()
    return khub3.write_preset(str(folder), config, khub3.weights(config)) or str(folder)


def _config(folder, name="config.json"):
    with open(os.path.join(folder, name)) as f:
        return json.load(f)


def _rewrite(folder, name, edit):
    config = _config(folder, name)
    edit(config["config"])
    with open(os.path.join(folder, name), "w") as f:
        json.dump(config, f)


def test_the_offline_presets_write_the_fields_keras_hubs_get_config_writes(tmp_path):
    """The fields of each class as the tests write them are keras-hub 0.32's (the loading tests then read them all)."""
    vit = _vit_preset(tmp_path / "vit")
    written = {"ViTBackbone": _config(vit)["config"], "ViTImageClassifier": _config(vit, "task.json")["config"],
               "DINOV3Backbone": _config(_dinov3_preset(tmp_path / "v3"))["config"]}
    for kind in ("DeiTBackbone", "DINOV2Backbone", "CLIPBackbone", "SigLIPBackbone"):
        folder = _family_preset(tmp_path / kind, kind, task={"pooling": "token"} if kind == "DeiTBackbone" else None)
        written[kind] = config = _config(folder)["config"]
        if "vision_encoder" in config:
            written[config["vision_encoder"]["class_name"]] = config["vision_encoder"]["config"]
        if kind == "DeiTBackbone":
            written["DeiTImageClassifier"] = _config(folder, "task.json")["config"]
    assert sorted(written) == sorted(FIELDS)
    assert {kind: sorted(config) for kind, config in written.items()} == FIELDS


@pytest.mark.parametrize("kind, where", [
    ("ViTBackbone", "config.json"), ("ViTImageClassifier", "task.json"), ("DINOV2Backbone", "config.json"),
    ("DINOV3Backbone", "config.json"), ("CLIPVisionEncoder", "config.json"), ("CLIPBackbone", "config.json"),
])
def test_a_field_no_reader_looks_at_is_refused_by_name(tmp_path, kind, where):
    """`use_rope: true` in a ViTBackbone's config (no such switch in keras-hub 0.32) loaded the plain ViT."""
    if kind.startswith("ViT"):
        folder = _vit_preset(tmp_path / "p")
    elif kind == "DINOV3Backbone":
        folder = _dinov3_preset(tmp_path / "p")
    else:
        folder = _family_preset(tmp_path / "p", "CLIPBackbone" if kind.startswith("CLIP") else kind)
    keras_vit.from_pretrained(folder)  # as written: loads

    def edit(config):
        (config["vision_encoder"]["config"] if kind == "CLIPVisionEncoder" else config)["use_rope"] = True

    _rewrite(folder, where, edit)
    prefix = "config.vision_encoder.config." if kind == "CLIPVisionEncoder" else "config."
    with pytest.raises(CheckpointError, match=rf"{where}': {prefix}use_rope=True: no field keras_vit reads for a {kind} "):
        keras_vit.from_pretrained(folder)


def test_fields_that_change_nothing_keras_vit_computes_are_not_refused(tmp_path):
    """Dropout rates, names and dtypes: what keras-hub writes for training or bookkeeping loads as it is."""
    folder = _family_preset(tmp_path / "p", "DINOV2Backbone")
    _rewrite(folder, "config.json", lambda c: c.update(dropout_rate=0.3, drop_path_rate=0.2, name="mine",
                                                       apply_layernorm=True))
    model = keras_vit.from_pretrained(folder)
    assert "apply_layernorm=true normalises keras-hub's pyramid_outputs" in str(model.load_report)
