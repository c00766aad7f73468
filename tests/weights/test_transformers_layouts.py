"""transformers' ViT family in the key layouts of transformers 4.x and 5, and the classifiers on its encoders.

Folders written offline (NumPy + safetensors) in exactly the layout ``save_pretrained`` writes
(tests/foreign_files.py, tests/reference_hf_family.py), checked against the NumPy forward pass of
tests/reference_hf_family.py. ``tools/check_transformers_layouts.py`` runs the same classes in torch with
transformers 5.
"""

import json
import os

import numpy as np
import pytest

import reference_hf_family as ref
from foreign_files import transformers5_vision_model
from helpers import images

safetensors_numpy = pytest.importorskip("safetensors.numpy")

LABELS = {str(i): f"class {i}" for i in range(5)}
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8, num_channels=3,
              intermediate_size=64)
_CLIP = dict(_SMALL, hidden_act="quick_gelu", layer_norm_eps=1e-5, model_type="clip_vision_model")
_SIGLIP = dict(_SMALL, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, model_type="siglip_vision_model")
_SIGLIP2 = dict({k: v for k, v in _SIGLIP.items() if k != "image_size"}, num_patches=16,
                model_type="siglip2_vision_model")
_TEXT = {"hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 50}
HALF = ([0.5] * 3, [0.5] * 3)

# transformers 5's *VisionModel: config.json as it writes it (model_type and architectures as in 4.x)
VISION_MODELS = {
    "clip_vision_model": dict(_CLIP, architectures=["CLIPVisionModel"]),
    "siglip_vision_model": dict(_SIGLIP, architectures=["SiglipVisionModel"]),
    "siglip2_vision_model": dict(_SIGLIP2, architectures=["Siglip2VisionModel"]),
}
# *ForImageClassification: model_type, config.json (the whole model's, with vision_config and id2label)
CLASSIFIERS = {
    "SiglipForImageClassification": ("siglip", dict(model_type="siglip", vision_config=_SIGLIP, text_config=_TEXT)),
    "Siglip2ForImageClassification": ("siglip2", dict(model_type="siglip2", vision_config=_SIGLIP2, text_config=_TEXT)),
    "CLIPForImageClassification": ("clip", dict(model_type="clip", vision_config=_CLIP, text_config=_TEXT)),
}


def _write(folder, sd, config, processor=HALF):
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(sd, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"do_normalize": True, "image_mean": processor[0], "image_std": processor[1]}, f)
    return str(folder)


def assert_close(out, expected):
    """Within 1e-4 relative, of each value or (near zero) of the largest."""
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("model_type", sorted(VISION_MODELS))
def test_a_transformers_5_vision_model_without_the_vision_model_prefix_loads(tmp_path, model_type):
    import keras_vit

    config = VISION_MODELS[model_type]
    sd = ref.state_dict(model_type, config)
    bare = transformers5_vision_model(sd)
    assert not any(k.startswith("vision_model.") for k in bare)
    assert ("head.probe" in bare) == (not model_type.startswith("clip"))
    model = keras_vit.from_pretrained(_write(tmp_path / model_type, bare, config), classifier_activation=None)
    x = images()
    assert_close(np.asarray(model(x)), ref.forward(model_type, x, sd, config, *HALF))
    assert "keys without the 'vision_model.' prefix of transformers 5's" in str(model.load_report)


def test_a_file_mixing_the_4x_and_5_layouts_is_refused_by_name(tmp_path):
    """One prefix per file (the patch embedding's): a post_layernorm without it in a vision_model. file is refused."""
    import keras_vit
    from keras_vit.weights import CheckpointError

    config = VISION_MODELS["siglip_vision_model"]
    sd = ref.state_dict("siglip_vision_model", config)
    mixed = {k.removeprefix("vision_model.") if ".post_layernorm." in f".{k}" else k: v for k, v in sd.items()}
    assert "post_layernorm.weight" in mixed and "vision_model.embeddings.patch_embedding.weight" in mixed
    with pytest.raises(CheckpointError, match=r"'vision_model\.'-prefixed layout\) has 2 key\(s\) that are not part of a ViT: "
                                              r"post_layernorm\.bias, post_layernorm\.weight"):
        keras_vit.from_pretrained(_write(tmp_path / "mixed", mixed, config))


@pytest.mark.parametrize("architecture", sorted(CLASSIFIERS))
def test_a_classifier_on_the_mean_of_the_tokens_loads_as_gap_pooling(tmp_path, architecture):
    """Siglip(2)ForImageClassification: the mean of every token after post_layernorm (its MAP head unread);
    CLIPForImageClassification: the mean of the patch tokens, without post_layernorm (left unread)."""
    import keras_vit

    model_type, config = CLASSIFIERS[architecture]
    config = dict(config, architectures=[architecture], id2label=LABELS)
    sd = ref.state_dict(model_type, config)
    model = keras_vit.from_pretrained(_write(tmp_path / architecture, sd, config), classifier_activation=None)
    x = images()
    assert_close(np.asarray(model(x)), ref.forward(model_type, x, sd, config, *HALF))
    vit = model.vit_config
    assert (vit.pooling, vit.num_classes, model.class_names) == ("gap", 5, [f"class {i}" for i in range(5)])
    unread = {k: why for k, why in model.load_report.skipped.items() if k.startswith("vision_model.")}
    if model_type == "clip":
        assert (vit.class_token, vit.pre_norm, vit.final_norm, vit.fc_norm) == (True, True, False, False)
        assert list(unread) == ["vision_model.post_layernorm.* (2 tensors)"]
    else:
        assert (vit.class_token, vit.final_norm) == (False, True)
        assert list(unread) == ["vision_model.head.* (11 tensors)"] and architecture in unread["vision_model.head.* (11 tensors)"]


def test_a_clip_classifier_is_not_the_class_token_nor_normalised(tmp_path):
    """What sets CLIPForImageClassification apart: changing post_layernorm's weights does not change its logits,
    and the class token's output does not enter the mean (a model reading either would differ)."""
    import keras_vit

    model_type, config = CLASSIFIERS["CLIPForImageClassification"]
    config = dict(config, architectures=["CLIPForImageClassification"], id2label=LABELS)
    sd = ref.state_dict(model_type, config)
    changed = dict(sd, **{"vision_model.post_layernorm.weight": 3 * sd["vision_model.post_layernorm.weight"]})
    x = images()
    outputs = [np.asarray(keras_vit.from_pretrained(_write(tmp_path / str(i), d, config), classifier_activation=None)(x))
               for i, d in enumerate((sd, changed))]
    assert_close(outputs[1], outputs[0])
    assert_close(outputs[0], ref.forward(model_type, x, sd, config, *HALF))


def test_deit_single_classifier_is_refused_naming_the_switch_keras_vit_lacks(tmp_path):
    import keras_vit
    from keras_vit.weights import CheckpointError

    config = dict(_SMALL, hidden_act="gelu", layer_norm_eps=1e-12, qkv_bias=True, model_type="deit",
                  architectures=["DeiTForImageClassification"], id2label=LABELS)
    sd = ref.state_dict("deit", config)
    sd = {("classifier" + k[len("cls_classifier"):] if k.startswith("cls_classifier") else k): v for k, v in sd.items()
          if not k.startswith("distillation_classifier")}
    with pytest.raises(CheckpointError, match=r"DeiTForImageClassification reads the class token only, past a "
                                              r"distillation token that no head reads; keras_vit's ViTConfig has no "
                                              r"switch for that: distillation_token=True averages"):
        keras_vit.from_pretrained(_write(tmp_path / "deit", sd, config))
