"""transformers' ViT family (DINOv2, DINOv2 with registers, DeiT, ViT-MAE, CLIP, SigLIP, SigLIP2) loaded from
``save_pretrained`` folders and ``hf://`` caches, compared with an independent NumPy forward pass
(tests/reference_hf_family.py) on random weights written in exactly transformers' layout (offline, torch-free)."""

import json
import os

import numpy as np
import pytest

import reference_hf_family as ref
from helpers import hf_snapshot, images, offline_hf

safetensors_numpy = pytest.importorskip("safetensors.numpy")

LABELS = {str(i): f"class {i}" for i in range(5)}
_SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, image_size=32, patch_size=8, num_channels=3)
_VIT = dict(_SMALL, intermediate_size=64, hidden_act="gelu", layer_norm_eps=1e-12, qkv_bias=True)
_DINO = dict(_SMALL, mlp_ratio=2, hidden_act="gelu", layer_norm_eps=1e-6, qkv_bias=True, layerscale_value=1.0,
             use_swiglu_ffn=False)
_CLIP_VISION = dict(_SMALL, intermediate_size=64, hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=24)
_SIGLIP_VISION = dict(_SMALL, intermediate_size=64, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
_TEXT = {"hidden_size": 16, "num_hidden_layers": 1, "vocab_size": 50}

# name -> (model_type, config.json, preprocessor_config.json or None (defaults), output)
CASES = {
    "dinov2_classifier": ("dinov2", dict(_DINO, model_type="dinov2", architectures=["Dinov2ForImageClassification"],
                                         id2label=LABELS), ref.IMAGENET, "logits"),
    "dinov2_swiglu_model": ("dinov2", dict(_DINO, model_type="dinov2", architectures=["Dinov2Model"], use_swiglu_ffn=True,
                                           mlp_ratio=4, layerscale_value=1e-5), None, "pooled"),
    "dinov2_with_registers": ("dinov2_with_registers", dict(
        _DINO, model_type="dinov2_with_registers", architectures=["Dinov2WithRegistersForImageClassification"],
        num_register_tokens=2, id2label=LABELS), ref.IMAGENET, "logits"),
    # no registers: transformers writes a (1, 0, width) register_tokens (it was refused as "expected a positive integer")
    "dinov2_with_registers_none": ("dinov2_with_registers", dict(
        _DINO, model_type="dinov2_with_registers", architectures=["Dinov2WithRegistersModel"], num_register_tokens=0),
        ref.IMAGENET, "pooled"),
    "deit": ("deit", dict(_VIT, model_type="deit", architectures=["DeiTForImageClassificationWithTeacher"],
                          id2label=LABELS), None, "logits"),
    "vit_mae": ("vit_mae", dict(_VIT, model_type="vit_mae", architectures=["ViTMAEForPreTraining"], mask_ratio=0.75,
                                decoder_hidden_size=16), ref.IMAGENET, "pooled"),
    "clip": ("clip", dict(model_type="clip", architectures=["CLIPModel"], projection_dim=24,
                          vision_config=dict(_CLIP_VISION, model_type="clip_vision_model"), text_config=_TEXT),
             ref.CLIP, "pooled"),
    "clip_vision_model": ("clip_vision_model", dict(_CLIP_VISION, model_type="clip_vision_model",
                                                    architectures=["CLIPVisionModel"]), None, "pooled"),
    "clip_vision_with_projection": ("clip_vision_model", dict(
        _CLIP_VISION, model_type="clip_vision_model", architectures=["CLIPVisionModelWithProjection"]), ref.CLIP, "pooled"),
    "siglip": ("siglip", dict(model_type="siglip", architectures=["SiglipModel"],
                              vision_config=dict(_SIGLIP_VISION, model_type="siglip_vision_model"), text_config=_TEXT),
               ([0.5] * 3, [0.5] * 3), "pooled"),
    "siglip_vision_model": ("siglip_vision_model", dict(_SIGLIP_VISION, model_type="siglip_vision_model",
                                                        architectures=["SiglipVisionModel"]), None, "pooled"),
    "siglip2": ("siglip2", dict(model_type="siglip2", architectures=["Siglip2Model"], text_config=_TEXT,
                                vision_config=dict({k: v for k, v in _SIGLIP_VISION.items() if k != "image_size"},
                                                   num_patches=16, model_type="siglip2_vision_model")),
                ([0.5] * 3, [0.5] * 3), "pooled"),
}
DEFAULT_NORMALIZATION = {"dinov2": ref.IMAGENET, "deit": ref.IMAGENET, "clip_vision_model": ref.CLIP,
                         "siglip_vision_model": ([0.5] * 3, [0.5] * 3)}


def write_folder(folder, model_type, config, processor, seed=0):
    """A ``save_pretrained`` folder: model.safetensors, config.json and, unless None, preprocessor_config.json."""
    os.makedirs(folder, exist_ok=True)
    sd = ref.state_dict(model_type, config, seed=seed)
    safetensors_numpy.save_file(sd, os.path.join(folder, "model.safetensors"))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    if processor is not None:
        with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
            json.dump({"do_normalize": True, "image_mean": processor[0], "image_std": processor[1], "do_rescale": True}, f)
    return str(folder), sd


def assert_close(out, expected):
    """Within 1e-4 relative, of each value or (near zero) of the largest."""
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_pretrained_gives_the_transformers_output(tmp_path, case):
    import keras_vit

    model_type, config, processor, output = CASES[case]
    folder, sd = write_folder(tmp_path / case, model_type, config, processor)
    model = keras_vit.from_pretrained(folder, classifier_activation=None)
    x = images()
    mean, std = processor or DEFAULT_NORMALIZATION[model_type]
    expected = ref.forward(model_type, x, sd, config, mean, std)
    assert_close(np.asarray(model(x)), expected)
    assert model.output_shape[-1] == expected.shape[-1]
    report = str(model.load_report)
    assert "[transformers]" in report
    assert ("preprocessor_config.json: image_mean" if processor else "no image_mean") in report
    if output == "logits":
        assert model.class_names == [f"class {i}" for i in range(5)]


def test_dinov2_classifier_reads_the_class_token_and_the_mean_of_the_patch_tokens():
    """pooling='token_gap_concat' is a plain config switch: a (batch, 2 D) vector, registers left out of the mean."""
    import keras

    import keras_vit
    from keras_vit.architecture.params import count_config_params

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          num_register_tokens=2, pooling="token_gap_concat", include_top=False)
    assert model.output_shape == (None, 32)
    tokens = keras.Model(model.input, model.get_layer("encoder_norm").output)(images())
    pooled = np.asarray(model(images()))
    tokens = np.asarray(tokens)
    np.testing.assert_allclose(pooled, np.concatenate([tokens[:, 0], tokens[:, 3:].mean(1)], -1), rtol=1e-5, atol=1e-6)
    head = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                         pooling="token_gap_concat", num_classes=3)
    assert count_config_params(head.vit_config) == head.count_params()
    assert head.vit_config.variant is None
    with pytest.raises(ValueError, match=r"pooling='token_gap_concat' reads the class token"):
        keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                      pooling="token_gap_concat", class_token=False)


def test_a_clip_repository_loads_its_image_tower_and_reports_the_text_tower_skipped(tmp_path):
    import keras_vit

    model_type, config, processor, _ = CASES["clip"]
    folder, _ = write_folder(tmp_path / "clip", model_type, config, processor)
    model = keras_vit.from_pretrained(folder)
    report = model.load_report
    skipped = {key: why for key, why in report.skipped.items() if key.startswith(("text_model", "text_projection", "logit"))}
    assert set(skipped) == {"text_model.* (6 tensors)", "text_projection.weight (1 tensor)", "logit_scale (1 tensor)"}
    assert all(why.startswith("the text tower") for why in skipped.values())
    assert "skipped text_model.* (6 tensors): the text tower" in str(report)
    assert model.vit_config.projection_dim == 24 and model.vit_config.mlp_activation == "quick_gelu"


def test_mae_decoder_and_the_default_normalisation_are_reported(tmp_path):
    import keras_vit

    model_type, config, _, _ = CASES["vit_mae"]
    folder, _ = write_folder(tmp_path / "mae", model_type, config, None)
    report = str(keras_vit.from_pretrained(folder).load_report)
    assert "skipped decoder.* (" in report and "pixel decoder" in report
    assert "mask_ratio=0.75" in report and "no masking" in report
    assert "ImageNet mean and std" in report


def test_unknown_key_is_refused_by_name(tmp_path):
    import keras_vit
    from keras_vit.weights import CheckpointError

    model_type, config, processor, _ = CASES["siglip_vision_model"]
    folder, sd = write_folder(tmp_path / "siglip", model_type, config, processor)
    sd["vision_model.encoder.layers.0.self_attn.q_norm.weight"] = np.ones(32, np.float32)
    safetensors_numpy.save_file(sd, os.path.join(folder, "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"not part of a ViT: vision_model\.encoder\.layers\.0\.self_attn\.q_norm\.weight"):
        keras_vit.from_pretrained(folder)


@pytest.mark.parametrize("switch, builder_args, message", [
    ("dinov2_swiglu_model", dict(mlp_type="mlp", mlp_activation="gelu", mlp_dim=88, layer_scale_init=1.0),
     r"use_swiglu_ffn=True but the model has mlp_type='mlp'"),
    ("dinov2_with_registers", dict(num_register_tokens=0, layer_scale_init=1.0, pooling="token_gap_concat", num_classes=5),
     r"num_register_tokens=2 but the model has num_register_tokens=0"),
    ("clip_vision_model", dict(mlp_activation="gelu", pre_norm=True, final_norm=False, fc_norm=True),
     r"hidden_act='quick_gelu' but the model has mlp_activation='gelu'"),
    ("siglip_vision_model", dict(pooling="token", mlp_activation="gelu_tanh", include_top=False),
     r"vision_use_head absent \(transformers' default True\) but the model has pooling='token'"),
    ("deit", dict(num_classes=5), r"deit: a distillation token but the model has distillation_token=False"),
])
def test_a_model_with_another_switch_is_refused_by_field_name(tmp_path, switch, builder_args, message):
    """ViT(..., weights=folder) with one family switch other than the file's: refused, naming both fields."""
    import keras_vit
    from keras_vit.weights import CheckpointError

    model_type, config, processor, _ = CASES[switch]
    folder, _ = write_folder(tmp_path / switch, model_type, config, processor)
    vision = config.get("vision_config", config)
    sizes = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    sizes.update({k: v for k, v in builder_args.items()})
    if "pooling" not in sizes and "include_top" not in sizes and not vision.get("id2label"):
        sizes["include_top"] = False
    with pytest.raises(CheckpointError, match=message):
        keras_vit.ViT(weights=folder, **sizes)


def test_vit_builder_with_the_files_switches_loads_and_folds_the_normalisation(tmp_path):
    """``ViT(..., weights=folder)`` keeps the model's own input scaling ([-1, 1]) and resampling rule; the file's
    ImageNet mean and std are folded into the patch embedding, so the output is still DINOv2's."""
    import keras_vit

    model_type, config, processor, _ = CASES["dinov2_with_registers"]
    folder, sd = write_folder(tmp_path / "reg", model_type, config, processor)
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          num_register_tokens=2, layer_scale_init=1e-5, pooling="token_gap_concat", num_classes=5,
                          layer_norm_epsilon=1e-6, classifier_activation=None, weights=folder)
    assert model.vit_config.input_mean == (0.5, 0.5, 0.5) and model.vit_config.position_resampling == "linear_aligned"
    x = images()
    assert_close(np.asarray(model(x)), ref.forward(model_type, x, sd, config, *ref.IMAGENET))


def test_hf_cache_offline_loads_a_dinov2_repository(tmp_path, monkeypatch):
    """``hf://ORG/NAME`` of a family repository from a Hugging Face cache with HF_HUB_OFFLINE=1 (no network)."""
    import keras_vit

    model_type, config, processor, _ = CASES["dinov2_classifier"]
    _, sd = write_folder(hf_snapshot(tmp_path, "facebook/dinov2-tiny-test"), model_type, config, processor)
    offline_hf(monkeypatch, tmp_path)
    model = keras_vit.from_pretrained("hf://facebook/dinov2-tiny-test", classifier_activation=None)
    assert (model.load_report.format, model.vit_config.pooling) == ("transformers", "token_gap_concat")
    assert_close(np.asarray(model(images())), ref.forward(model_type, images(), sd, config, *ref.IMAGENET))


def test_deit_single_classifier_and_unknown_model_type_are_refused_by_name(tmp_path):
    import keras_vit
    from keras_vit.weights import CheckpointError

    model_type, config, processor, _ = CASES["deit"]
    folder, _ = write_folder(tmp_path / "deit", model_type, dict(config, architectures=["DeiTForImageClassification"]),
                             processor)
    with pytest.raises(CheckpointError, match=r"DeiTForImageClassification reads the class token only"):
        keras_vit.from_pretrained(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(dict(config, model_type="swin"), f)
    with pytest.raises(CheckpointError, match=r"model of type 'swin'; keras_vit reads model_type 'vit', 'dinov2'"):
        keras_vit.from_pretrained(folder)


def _torch_bicubic(grid, size):
    """``torch.nn.functional.interpolate(grid, size, mode="bicubic", align_corners=False)`` of ``(rows, cols, D)``,
    transcribed from ATen's upsample_bicubic2d (cubic convolution, A = -0.75, source index ``(i + 0.5) * in / out -
    0.5`` not clamped, neighbours clamped to the border), independent of keras_vit's resampling matrices."""
    a = -0.75

    def weights(t):  # ATen's get_cubic_upsample_coefficients
        x1, x2 = t + 1.0, 1.0 - t
        return np.array([((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
                         ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1, ((a * (x2 + 1) - 5 * a) * (x2 + 1) + 8 * a) * (x2 + 1) - 4 * a])

    def along(x, out):  # axis 0 of x
        n = x.shape[0]
        result = np.zeros((out,) + x.shape[1:])
        for i in range(out):
            real = (i + 0.5) * n / out - 0.5
            base = int(np.floor(real))
            for w, k in zip(weights(real - base), range(base - 1, base + 3)):
                result[i] += w * x[min(max(k, 0), n - 1)]
        return result

    return np.swapaxes(along(np.swapaxes(along(grid, size[0]), 0, 1), size[1]), 0, 1)


@pytest.mark.parametrize("case,prefix", [("dinov2_classifier", 1), ("deit", 2)])
def test_another_resolution_resamples_the_positions_as_interpolate_pos_encoding(tmp_path, case, prefix):
    """``from_pretrained(folder, image_size=56)`` of a 32-pixel checkpoint (a 4 x 4 grid to 7 x 7) gives what
    transformers computes with ``interpolate_pos_encoding=True`` at 56: its position embeddings resized by torch's
    bicubic (``position_resampling="bicubic_torch"``), the class (and distillation) positions kept."""
    import keras_vit

    model_type, config, processor, _ = CASES[case]
    folder, sd = write_folder(tmp_path / case, model_type, config, processor)
    model = keras_vit.from_pretrained(folder, image_size=56, classifier_activation=None)
    assert model.vit_config.position_resampling == "bicubic_torch"
    key = next(k for k in sd if k.endswith("embeddings.position_embeddings"))
    table = sd[key][0].astype(np.float64)
    grid = _torch_bicubic(table[prefix:].reshape(4, 4, -1), (7, 7)).reshape(49, -1)
    resized = dict(sd, **{key: np.concatenate([table[:prefix], grid])[None]})
    x = images(size=56)
    mean, std = processor or DEFAULT_NORMALIZATION[model_type]
    assert_close(np.asarray(model(x)), ref.forward(model_type, x, resized, config, mean, std))


def test_a_vit_model_type_at_another_resolution_resamples_as_interpolate_pos_encoding(tmp_path):
    """model_type "vit" (ViTForImageClassification) resampled its table by keras_vit's linear rule (4.9e-3 relative
    off transformers' interpolate_pos_encoding=True): torch's bicubic, as every other transformers row."""
    import keras_vit
    import reference_hf
    from foreign_files import transformers_folder
    from helpers import vit_checkpoint

    checkpoint = vit_checkpoint()
    folder = transformers_folder(tmp_path / "vit", checkpoint)
    model = keras_vit.from_pretrained(folder, image_size=56, classifier_activation=None)
    assert model.vit_config.position_resampling == "bicubic_torch"
    sd = safetensors_numpy.load_file(os.path.join(folder, "model.safetensors"))
    table = sd["vit.embeddings.position_embeddings"][0].astype(np.float64)
    grid = _torch_bicubic(table[1:].reshape(4, 4, -1), (7, 7)).reshape(49, -1)
    resized = dict(sd, **{"vit.embeddings.position_embeddings": np.concatenate([table[:1], grid])[None]})
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    x = images(size=56)
    assert_close(np.asarray(model(x)), reference_hf.vit_logits(x, resized, config))


@pytest.mark.parametrize("processor, feeds", [
    ({"do_rescale": True, "rescale_factor": 1 / 127.5, "image_mean": [1, 1, 1], "image_std": [1, 1, 1]},
     ([0.5] * 3, [0.5] * 3)),  # x / 127.5 - 1
    ({"do_rescale": False, "image_mean": [127.5] * 3, "image_std": [127.5] * 3}, ([0.5] * 3, [0.5] * 3)),
    ({"do_normalize": False, "rescale_factor": 1 / 255}, ([0.0] * 3, [1.0] * 3)),  # x / 255
])
def test_the_image_processors_rescale_and_normalize_are_what_the_model_computes(tmp_path, processor, feeds):
    """``(x * rescale_factor - image_mean) / image_std`` as transformers' image processor computes it, with
    ``do_rescale`` and ``do_normalize`` honoured (a rescale_factor other than 1/255 was once dropped silently)."""
    import keras_vit

    model_type, config, _, _ = CASES["dinov2_classifier"]
    folder, sd = write_folder(tmp_path / "m", model_type, config, None)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(processor, f)
    model = keras_vit.from_pretrained(folder, classifier_activation=None)
    x = images()
    assert_close(np.asarray(model(x)), ref.forward(model_type, x, sd, config, *feeds))
    plain = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                          layer_scale_init=1.0, pooling="token_gap_concat", num_classes=5, layer_norm_epsilon=1e-6,
                          classifier_activation=None, weights=folder)  # the model's own [-1, 1]: the difference folded
    assert_close(np.asarray(plain(x)), ref.forward(model_type, x, sd, config, *feeds))


def test_a_rescale_factor_that_is_not_a_positive_number_is_refused_by_name(tmp_path):
    import keras_vit
    from keras_vit.errors import CheckpointError

    model_type, config, _, _ = CASES["dinov2_classifier"]
    folder, _ = write_folder(tmp_path / "m", model_type, config, None)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"rescale_factor": -1}, f)
    with pytest.raises(CheckpointError, match=r"preprocessor_config\.json': rescale_factor=-1, expected a positive number"):
        keras_vit.from_pretrained(folder)
