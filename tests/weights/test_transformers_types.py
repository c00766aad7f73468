"""The other model types of transformers whose vision encoder is the paper's ViT (ViT-MSN, I-JEPA, TIPSv2, MetaCLIP 2,
Chinese-CLIP, AltCLIP, CLIPSeg), each in the key layout transformers 4.x and 5.x write, against the independent NumPy
forward pass (tests/reference_hf_family.py) on random weights (offline, torch-free); and the model types whose
blocks need a switch keras_vit lacks, refused by name with it."""

import json
import os
import re

import numpy as np
import pytest

import reference_hf_family as ref
from helpers import images

safetensors_numpy = pytest.importorskip("safetensors.numpy")

LABELS = {str(i): f"class {i}" for i in range(5)}
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8, num_channels=3)
_VIT = dict(_SMALL, intermediate_size=64, hidden_act="gelu", layer_norm_eps=1e-6, qkv_bias=True)
_CLIP_VISION = dict(_SMALL, intermediate_size=64, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=24)
_TIPS = dict(_SMALL, mlp_ratio=2, hidden_act="gelu", layer_norm_eps=1e-6, layerscale_value=1.0, num_register_tokens=2)
_TEXT = {"hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 50}
_HALF = ([0.5] * 3, [0.5] * 3)


def _bare(prefix):
    """transformers 5's *VisionModel: the 4.x keys without ``prefix``."""
    return lambda key: key[len(prefix):] if key.startswith(prefix) else key


def _tower(model_type, architecture, **config):
    return dict(model_type=model_type, architectures=[architecture], text_config=_TEXT, projection_dim=24,
                vision_config=dict(_CLIP_VISION, model_type=f"{model_type}_vision_model"), **config)


def _vision(model_type, architecture):
    return dict(_CLIP_VISION, model_type=model_type, architectures=[architecture])


# name -> (model_type, config.json, preprocessor mean and std, the 4.x keys -> the written keys)
CASES = {
    "vit_msn_model": ("vit_msn", dict(_VIT, model_type="vit_msn", architectures=["ViTMSNModel"]), ref.IMAGENET, None),
    "vit_msn_classifier_4x": ("vit_msn", dict(_VIT, model_type="vit_msn", architectures=["ViTMSNForImageClassification"],
                                              id2label=LABELS), ref.IMAGENET, None),
    # transformers 5 writes the Hub checkpoints' names: the layers without vit. (conversion_mapping.py)
    "vit_msn_classifier_5x": ("vit_msn", dict(_VIT, model_type="vit_msn", architectures=["ViTMSNForImageClassification"],
                                              id2label=LABELS), ref.IMAGENET, lambda k: re.sub(r"^vit\.encoder\.", "encoder.", k)),
    "ijepa_model": ("ijepa", dict(_VIT, model_type="ijepa", architectures=["IJepaModel"], layer_norm_eps=1e-12),
                    ref.IMAGENET, None),
    "ijepa_classifier": ("ijepa", dict(_VIT, model_type="ijepa", architectures=["IJepaForImageClassification"],
                                       id2label=LABELS), ref.IMAGENET, None),
    "tipsv2_vision_model": ("tipsv2_vision_model", dict(_TIPS, model_type="tipsv2_vision_model",
                                                        architectures=["Tipsv2VisionModel"]), _HALF, None),
    "tipsv2_vision_model_swiglu": ("tipsv2_vision_model", dict(_TIPS, model_type="tipsv2_vision_model", mlp_ratio=4,
                                                               use_swiglu_ffn=True, architectures=["Tipsv2VisionModel"]),
                                   _HALF, None),
    "tipsv2": ("tipsv2", dict(model_type="tipsv2", architectures=["Tipsv2Model"], text_config=_TEXT,
                              vision_config=dict(_TIPS, model_type="tipsv2_vision_model")), _HALF, None),
    "metaclip_2": ("metaclip_2", _tower("metaclip_2", "MetaClip2Model"), ref.CLIP, None),
    "metaclip_2_classifier": ("metaclip_2", _tower("metaclip_2", "MetaClip2ForImageClassification", id2label=LABELS),
                              ref.CLIP, None),
    "metaclip_2_vision_model_5x": ("metaclip_2_vision_model", _vision("metaclip_2_vision_model", "MetaClip2VisionModel"),
                                   ref.CLIP, _bare("vision_model.")),
    "chinese_clip": ("chinese_clip", _tower("chinese_clip", "ChineseCLIPModel"), ref.CLIP, None),
    "chinese_clip_vision_model_4x": ("chinese_clip_vision_model", _vision("chinese_clip_vision_model",
                                                                          "ChineseCLIPVisionModel"), ref.CLIP, None),
    "chinese_clip_vision_model_5x": ("chinese_clip_vision_model", _vision("chinese_clip_vision_model",
                                                                          "ChineseCLIPVisionModel"), ref.CLIP,
                                     _bare("vision_model.")),
    "clipseg": ("clipseg", _tower("clipseg", "CLIPSegModel"), ref.CLIP, None),
    "clipseg_vision_model_5x": ("clipseg_vision_model", _vision("clipseg_vision_model", "CLIPSegVisionModel"), ref.CLIP,
                                _bare("vision_model.")),
    "altclip_4x": ("altclip", _tower("altclip", "AltCLIPModel"), ref.CLIP, None),
    # transformers 5's AltCLIPModel: encoder.layer.N (its text tower's renaming undone on save)
    "altclip_5x": ("altclip", _tower("altclip", "AltCLIPModel"), ref.CLIP,
                   lambda k: re.sub(r"^vision_model\.encoder\.layers\.", "vision_model.encoder.layer.", k)),
    "altclip_vision_model_5x": ("altclip_vision_model", _vision("altclip_vision_model", "AltCLIPVisionModel"), ref.CLIP,
                                _bare("vision_model.")),
}


def write_folder(folder, model_type, config, processor, rename=None):
    """A ``save_pretrained`` folder with the 4.x state dict's keys ``rename``d; ``(folder, the 4.x state dict)``."""
    os.makedirs(folder, exist_ok=True)
    sd = ref.state_dict(model_type, config)
    written = {rename(k) if rename else k: v for k, v in sd.items()}
    assert len(written) == len(sd)
    safetensors_numpy.save_file(written, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"do_normalize": True, "image_mean": processor[0], "image_std": processor[1], "do_rescale": True}, f)
    return str(folder), sd


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_pretrained_gives_the_transformers_output(tmp_path, case):
    import keras_vit

    model_type, config, processor, rename = CASES[case]
    folder, sd = write_folder(tmp_path / case, model_type, config, processor, rename)
    model = keras_vit.from_pretrained(folder, classifier_activation=None)
    x = images()
    expected = ref.forward(model_type, x, sd, config, *processor)
    out = np.asarray(model(x))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
    assert model.load_report.format == "transformers"
    if "id2label" in config:
        assert model.class_names == [f"class {i}" for i in range(5)]


def test_ijepa_has_no_class_token_and_averages_every_token(tmp_path):
    import keras_vit

    model_type, config, processor, _ = CASES["ijepa_model"]
    folder, _ = write_folder(tmp_path / "ijepa", model_type, config, processor)
    model = keras_vit.from_pretrained(folder)
    assert (model.vit_config.class_token, model.vit_config.pooling) == (False, "gap")
    assert model.vit_config.layer_norm_epsilon == pytest.approx(1e-12)


def test_tipsv2_runs_at_its_own_size_only(tmp_path):
    """Its position embeddings are resampled bilinearly with antialiasing, a rule keras_vit lacks: another size is
    refused by name, never resampled another way."""
    import keras_vit
    from keras_vit.weights import CheckpointError

    model_type, config, processor, _ = CASES["tipsv2_vision_model"]
    folder, _ = write_folder(tmp_path / "tips", model_type, config, processor)
    with pytest.raises(CheckpointError, match=r"image_size=32 \(TIPSv2 resamples its position embeddings bilinearly"):
        keras_vit.from_pretrained(folder, image_size=48)


def test_a_clip_like_tower_skips_its_text_tower(tmp_path):
    import keras_vit

    model_type, config, processor, rename = CASES["chinese_clip"]
    folder, _ = write_folder(tmp_path / "cc", model_type, config, processor, rename)
    model = keras_vit.from_pretrained(folder)
    assert model.vit_config.projection_dim == 24
    assert any(key.startswith("text_model.") for key in model.load_report.skipped)


@pytest.mark.parametrize("model_type, switch", [
    ("pixtral", "rotary position embeddings"), ("mlcd_vision_model", "rotary position embeddings"),
    ("beit", "relative position bias"), ("data2vec-vision", "relative position bias")])
def test_a_model_type_needing_a_switch_keras_vit_lacks_is_refused_by_name(tmp_path, model_type, switch):
    """Whatever its keys (here none that any layout knows), before anything is built."""
    import keras_vit
    from keras_vit.weights import CheckpointError

    os.makedirs(tmp_path / model_type)
    safetensors_numpy.save_file({"embeddings.patch_embeddings.weight": np.zeros((32, 3, 8, 8), np.float32)},
                                str(tmp_path / model_type / "model.safetensors"))
    with open(tmp_path / model_type / "config.json", "w") as f:
        json.dump(dict(_SMALL, model_type=model_type, architectures=["X"]), f)
    with pytest.raises(CheckpointError, match=rf"transformers '{model_type}' model, whose blocks have .*{switch}"):
        keras_vit.from_pretrained(str(tmp_path / model_type))


# a class of a model_type keras_vit reads, whose output needs what keras_vit does not build: refused by name
REFUSED_CLASSES = {
    "CLIPSegForImageSegmentation": (_tower("clipseg", "CLIPSegForImageSegmentation"), "a segmentation decoder"),
}


@pytest.mark.parametrize("architecture", sorted(REFUSED_CLASSES))
def test_a_class_needing_what_keras_vit_lacks_is_refused_by_name(tmp_path, architecture):
    import keras_vit
    from keras_vit.weights import CheckpointError

    config, said = REFUSED_CLASSES[architecture]
    os.makedirs(tmp_path / architecture)
    safetensors_numpy.save_file({"embeddings.patch_embeddings.weight": np.zeros((32, 3, 8, 8), np.float32)},
                                str(tmp_path / architecture / "model.safetensors"))
    with open(tmp_path / architecture / "config.json", "w") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError, match=rf"{architecture} is .*{said}"):
        keras_vit.from_pretrained(str(tmp_path / architecture))
