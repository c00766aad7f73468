"""timm-layout .safetensors loaded through the builders, and the files refused (offline, torch-free)."""


import numpy as np
import pytest

from helpers import TINY, hf_snapshot, images, run_offline_hf, vit_checkpoint
from reference import vit_logits
from foreign_files import timm_state_dict, transformers_folder

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def test_timm_safetensors_gives_the_reference_logits(tmp_path):
    import keras_vit

    params = vit_checkpoint()
    path = str(tmp_path / "model.safetensors")
    safetensors_numpy.save_file(timm_state_dict(params), path)
    model = keras_vit.ViT(**TINY, num_classes=5, weights=path, classifier_activation=None)
    x = images()
    np.testing.assert_allclose(np.asarray(model(x)), vit_logits(x, params), atol=5e-5)
    assert model.load_report.format == "timm"


def test_pickle_and_npy_are_refused(tmp_path):
    from keras_vit.weights import CheckpointError, read_checkpoint

    bin_path = tmp_path / "pytorch_model.bin"
    bin_path.write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(CheckpointError, match="never unpickles.*safetensors"):
        read_checkpoint(bin_path)
    npy = tmp_path / "weights.npz"
    with open(npy, "wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(CheckpointError, match=r"weights\.npz.*single NumPy array"):
        read_checkpoint(npy)


def test_unsupported_timm_part_is_named(tmp_path):
    """q/k norms (timm's qk_norm=True) have no keras_vit layer: refused by name (distilled DeiT, registers, LayerScale,
    fc_norm, norm_pre and attention pooling load now: tests/weights/test_timm_family.py)."""
    from keras_vit.weights import CheckpointError, checkpoint_shapes

    arrays = timm_state_dict(vit_checkpoint())
    for i in range(2):
        for part in ("q_norm", "k_norm"):
            arrays[f"blocks.{i}.attn.{part}.weight"] = np.ones(8, np.float32)
    path = str(tmp_path / "qknorm.safetensors")
    safetensors_numpy.save_file(arrays, path)
    with pytest.raises(CheckpointError, match=r"query/key normalisation \(qk_norm\).*keys 'blocks\.0\.attn\.k_norm\.weight'"):
        checkpoint_shapes(path)


def test_transformers_folder_takes_the_files_epsilon_and_gives_the_reference_logits(tmp_path, monkeypatch):
    import keras_vit
    import reference
    from keras_vit.weights import CheckpointError

    params = vit_checkpoint()
    folder = transformers_folder(tmp_path / "vit-tiny", params)
    model = keras_vit.ViT(**TINY, num_classes=5, weights=folder, classifier_activation=None)
    assert model.load_report.format == "transformers"
    assert {layer.layer_norm_epsilon for layer in model.layers if isinstance(layer, keras_vit.TransformerBlock)} == {1e-12}
    monkeypatch.setattr(reference.layer_norm, "__defaults__", (1e-12,))  # the reference at the file's epsilon
    x = images()
    np.testing.assert_allclose(np.asarray(model(x)), reference.vit_logits(x, params), atol=5e-5)
    # loading the same folder into a model built with the original 1e-6 would be silently different: refused
    plain = keras_vit.ViT(**TINY, num_classes=5)
    with pytest.raises(CheckpointError, match=r"config\.json: layer_norm_eps=1e-12 but the model has layer_norm_epsilon=1e-06"):
        keras_vit.load_checkpoint(plain, folder)


def test_hf_source_from_an_offline_hub_cache(tmp_path):
    """``hf://ORG/NAME`` from a Hugging Face cache (HF_HOME, HF_HUB_OFFLINE=1): no network, as users configure it."""
    params = vit_checkpoint()
    transformers_folder(hf_snapshot(tmp_path, "google/vit-tiny-test"), params)
    np.save(tmp_path / "x.npy", images())
    code = (
        "import numpy as np, sys, keras_vit\n"
        f"m = keras_vit.ViT(image_size={TINY['image_size']}, patch_size={TINY['patch_size']}, hidden_size=32, num_layers=2,"
        " num_heads=4, mlp_dim=64, num_classes=5, weights='hf://google/vit-tiny-test', classifier_activation=None)\n"
        f"np.save(r'{tmp_path}/out.npy', np.asarray(m(np.load(r'{tmp_path}/x.npy'))))\n"
        "print(m.load_report.format)\n"
        "try:\n    keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,"
        " weights='hf://google/absent')\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    lines = run_offline_hf(tmp_path, code)
    assert lines[-2] == "transformers"
    assert "google/absent" in lines[-1] and "Error" in lines[-1].split()[0]  # offline, nothing cached: named
    import reference

    old = reference.layer_norm.__defaults__
    reference.layer_norm.__defaults__ = (1e-12,)
    try:
        expected = reference.vit_logits(images(), params)
    finally:
        reference.layer_norm.__defaults__ = old
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, atol=5e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_safetensors_load_widened_and_checked(tmp_path, dtype):
    """timm / Hub files are often bf16 or f16: read exactly, widened to float32, NaN still refused by key."""
    import keras_vit
    from keras_vit.weights import CheckpointError

    ml_dtypes = pytest.importorskip("ml_dtypes")  # writes bfloat16 through safetensors' NumPy API
    half = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    params = vit_checkpoint()
    state = {k: v.astype(half) for k, v in timm_state_dict(params).items()}
    path = str(tmp_path / "model.safetensors")
    safetensors_numpy.save_file(state, path)
    # the reference on the same rounded numbers (the inverse of timm_state_dict's transposes)
    rounded = {k: v.astype(half).astype(np.float32) for k, v in params.items()}
    model = keras_vit.ViT(**TINY, num_classes=5, weights=path, classifier_activation=None)
    x = images()
    np.testing.assert_allclose(np.asarray(model(x)), vit_logits(x, rounded), atol=5e-5)

    state["norm.weight"] = state["norm.weight"].copy()
    state["norm.weight"][3] = np.nan
    safetensors_numpy.save_file(state, path)
    with pytest.raises(CheckpointError, match=r"'Transformer/encoder_norm/scale' holds 1 NaN"):
        keras_vit.ViT(**TINY, num_classes=5, weights=path)
