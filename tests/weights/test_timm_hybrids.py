"""timm's hybrid ViTs (``vision_transformer_hybrid.py``) from timm's Hub layout: ``patch_embed.backbone.*`` + ``config.json``.

Tiny random hybrids are written in timm's key names (``tests/foreign_files.py``, from timm's ``_load_weights``) with
the ``config.json`` that ``timm.models.save_for_hf`` writes; ``keras_vit.from_pretrained`` must build the hybrid
(stages, patch size on the feature map, image size) and give what timm computes: the NumPy hybrid of
``tests/reference_hybrid.py`` with timm's normalisation constants (``norms="timm"``). The full-size check against
timm itself is ``tools/check_timm_hybrids.py``.
"""

import json
import os

import numpy as np
import pytest

import keras_vit
import reference_hybrid
from foreign_files import timm_hybrid_folder
from hybrid_helpers import hybrid_checkpoint
from keras_vit.layers.resnet import StdConv2D
from keras_vit.weights import CheckpointError

pytest.importorskip("safetensors.numpy")

# name -> (timm architecture, block_units, ResNet width, patch size on the feature map, model_args beyond the tiny
# sizes); root widths of 64 and 32 channels: 2 and 1 per GroupNorm group
HYBRIDS = {
    "stem_only": ("vit_tiny_r_s16_p8_224", (), 1, 2, dict(patch_size=2)),  # timm's R-Ti/16 layout: backbone = the stem
    # timm registers no two-stage hybrid (a registration builds its own backbone): a bare state dict, read from its keys
    "two_stages": (None, (1, 1), 0.5, 1, {}),
}
SIZE = 32


def uneven(params, seed=0):
    """The ResNet's conv kernels with output channels of std 0.001 to 0.1 (log-uniform): the weight-standardisation
    epsilons then change how the channels of a GroupNorm group compare, which the norm does not undo."""
    rng = np.random.default_rng(seed)
    out = dict(params)
    for key, kernel in params.items():
        if key != "embedding/kernel" and key.endswith("/kernel") and kernel.ndim == 4:
            out[key] = (kernel * 10 ** rng.uniform(-1, 1, kernel.shape[-1])).astype(kernel.dtype)
    return out


def write(folder, name, seed=0, **kwargs):
    architecture, units, width, patch, model_args = HYBRIDS[name]
    params = uneven(hybrid_checkpoint(block_units=units, width=width, grid=(4, 4), patch_size=patch, seed=seed), seed)
    timm_hybrid_folder(folder, params, units, architecture, SIZE, **{**model_args, **kwargs})
    return params


def images(n=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, SIZE, SIZE, 3)).astype("float32")


def assert_close(y, ref, tolerance=1e-4):
    """Within ``tolerance`` of the reference, relative to its largest value."""
    assert y.shape == ref.shape
    error = np.max(np.abs(np.asarray(y, np.float64) - ref)) / np.max(np.abs(ref))
    assert error <= tolerance, error


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_a_timm_hybrid_folder_builds_the_hybrid_and_gives_timms_output(tmp_path, name):
    params = write(tmp_path / name, name)
    heads = {} if HYBRIDS[name][0] else {"num_heads": 4}  # a bare state dict does not say its heads
    model = keras_vit.from_pretrained(str(tmp_path / name), classifier_activation=None, **heads)
    config = model.vit_config
    _, units, width, patch, _ = HYBRIDS[name]
    assert (config.stem, config.block_units, config.width, config.patch_size) == ("resnet", units, width, (patch, patch))
    assert (config.image_size, config.grid, config.num_heads, config.resnet_norms) == ((SIZE, SIZE), (4, 4), 4, "timm")
    x = images()
    timm = reference_hybrid.hybrid_logits(x, params, units, norms="timm")
    assert_close(np.asarray(model(x)), timm)
    assert model.load_report.format == "timm"
    original = reference_hybrid.hybrid_logits(x, params, units)  # what the paper's constants give: not timm's output
    assert np.max(np.abs(original - timm)) > 1e-3 * np.max(np.abs(timm))


def test_the_weights_are_the_equivalent_npzs(tmp_path):
    """The timm folder and the original .npz of the same arrays load the same values into every variable."""
    params = write(tmp_path / "timm", "two_stages")
    np.savez(tmp_path / "orig.npz", **params)
    timm = keras_vit.from_pretrained(str(tmp_path / "timm"), classifier_activation=None, num_heads=4)
    original = keras_vit.from_pretrained(str(tmp_path / "orig.npz"), classifier_activation=None)
    assert original.vit_config.resnet_norms == "original"
    assert original.vit_config.replace(resnet_norms="timm", position_resampling="bicubic_torch_antialias") == timm.vit_config
    for a, b in zip(timm.weights, original.weights, strict=True):
        assert a.path == b.path
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-7, err_msg=a.path)


def test_timms_constants_change_the_output():
    """What resnet_norms="timm" computes: timm's StdConv2dSame(eps=1e-8) on the variance, not the std + 1e-5."""
    w = np.random.default_rng(1).standard_normal((3, 3, 8, 4)).astype("float32") * 0.01
    x = np.random.default_rng(2).standard_normal((1, 6, 6, 8)).astype("float32")
    for epsilon_on, eps, norms in (("std", 1e-5, "original"), ("variance", 1e-8, "timm")):
        conv = StdConv2D(4, 3, epsilon=eps, epsilon_on=epsilon_on)
        conv.build(x.shape)
        conv.kernel.assign(w)
        ref = reference_hybrid.std_conv(x[0].astype(np.float64), w.astype(np.float64), norms=norms)
        np.testing.assert_allclose(np.asarray(conv(x))[0], ref, rtol=0, atol=1e-4 * np.max(np.abs(ref)))
    timm = reference_hybrid.weight_standardize(w.astype(np.float64), 1e-8, "variance")
    original = reference_hybrid.weight_standardize(w.astype(np.float64), 1e-5, "std")
    assert np.max(np.abs(timm - original)) > 1e-4  # weights of a trained network's size: the epsilons matter


def test_a_builder_takes_timms_norms_from_the_file_and_refuses_others(tmp_path):
    params = write(tmp_path / "f", "two_stages")
    folder = str(tmp_path / "f")
    args = dict(block_units=(1, 1), width=0.5, image_size=SIZE, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                num_classes=5, classifier_activation=None, input_mean=(0.5,) * 3)
    model = keras_vit.HybridViT(**args, weights=folder)
    assert model.vit_config.resnet_norms == "timm"
    x = images(1)
    assert_close(np.asarray(model(x)), reference_hybrid.hybrid_logits(x, params, (1, 1), norms="timm"))
    with pytest.raises(CheckpointError, match=r"'patch_embed\.backbone\.\*' \(timm's hybrid ResNetV2: StdConv2dSame "
                                              r"eps=1e-8 on the variance, GroupNormAct eps=1e-5\) but the model has "
                                              r"resnet_norms='original'"):
        keras_vit.HybridViT(**args, resnet_norms="original", weights=folder)
    np.savez(tmp_path / "orig.npz", **params)
    with pytest.raises(CheckpointError, match=r"original hybrid layout .* but the model has resnet_norms='timm'"):
        keras_vit.HybridViT(**args, resnet_norms="timm", weights=str(tmp_path / "orig.npz"))


def test_a_saved_model_keeps_timms_norms(tmp_path):
    write(tmp_path / "f", "stem_only")
    model = keras_vit.from_pretrained(str(tmp_path / "f"), classifier_activation=None)
    keras_vit.save_model(model, str(tmp_path / "m.keras"))
    again = keras_vit.from_pretrained(str(tmp_path / "m.keras"))
    assert again.vit_config.resnet_norms == "timm"
    x = images(1)
    assert_close(np.asarray(again(x)), np.asarray(model(x)), 1e-6)


def test_timms_symmetric_padding_is_refused_by_name(tmp_path):
    write(tmp_path / "f", "stem_only", padding_same=False)
    with pytest.raises(CheckpointError, match=r"model_args\.padding_same=False: keras_vit's ViT has no such part \(a "
                                              r"hybrid backbone with PyTorch's symmetric padding"):
        keras_vit.from_pretrained(str(tmp_path / "f"))


def test_a_registration_with_other_stages_is_refused(tmp_path):
    """config.json names R26+S/32, whose backbone timm registers with four stages of 2; the weights have (1, 1)."""
    params = hybrid_checkpoint(block_units=(1, 1), width=0.5, grid=(4, 4), patch_size=1)
    timm_hybrid_folder(tmp_path / "f", params, (1, 1), "vit_small_r26_s32_224", SIZE)
    with pytest.raises(CheckpointError, match=r"architecture='vit_small_r26_s32_224' \(timm registers "
                                              r"backbone_layers=\(2, 2, 2, 2\)\) but the weights' backbone has stages "
                                              r"of \(1, 1\) units"):
        keras_vit.from_pretrained(str(tmp_path / "f"))


@pytest.mark.parametrize("extra, message", [
    ({"patch_embed.backbone.stages.0.blocks.0.norm4.weight": np.ones(32, np.float32)},
     r"backbone has 1 key\(s\) that keras_vit's ResNet-v2 .* does not have: "
     r"patch_embed\.backbone\.stages\.0\.blocks\.0\.norm4\.weight"),
    ({"patch_embed.backbone.conv1.0.weight": np.ones((8, 3, 3, 3), np.float32)},
     r"a timm ResNet-D backbone \(vit_small_resnet26d_224"),
])
def test_another_backbone_is_refused_by_name(tmp_path, extra, message):
    params = hybrid_checkpoint(block_units=(1, 1), width=0.5, grid=(4, 4), patch_size=1)
    timm_hybrid_folder(tmp_path / "f", params, (1, 1), None, SIZE, extra=extra)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.from_pretrained(str(tmp_path / "f"), num_heads=4)


def test_a_hybrid_with_another_input_normalisation_needs_it_in_the_model(tmp_path):
    """A mean/std other than the model's cannot be folded through the ResNet: from_pretrained builds the file's into
    the model's preprocessing; a builder with other values is refused, naming both."""
    write(tmp_path / "f", "stem_only")
    path = tmp_path / "f" / "config.json"
    config = json.loads(path.read_text())
    config["pretrained_cfg"].update(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    path.write_text(json.dumps(config))
    model = keras_vit.from_pretrained(str(tmp_path / "f"))
    assert model.vit_config.input_mean == pytest.approx((0.485, 0.456, 0.406))
    with pytest.raises(CheckpointError, match=r"A hybrid or conv-stem model trained on inputs normalised with mean=\[0\.485"):
        keras_vit.HybridViT((), 1, image_size=SIZE, patch_size=2, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                            num_classes=5, weights=os.fspath(tmp_path / "f"))


def test_a_hybrids_registration_alone_gives_no_config():
    """config_fields builds presets from a registration alone: a hybrid's stages and width come from its weights."""
    from keras_vit.weights import timm_config

    with pytest.raises(ValueError, match=r"'vit_base_r50_s16_224' is a timm hybrid"):
        timm_config.config_fields("vit_base_r50_s16_224")
