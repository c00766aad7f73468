"""timm-layout .safetensors loaded through the builders, and the files refused (offline, torch-free)."""

import os

import numpy as np
import pytest

from helpers import TINY, images, vit_checkpoint
from reference import vit_logits

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def timm_state_dict(p, num_layers=2, d=32):
    """The original arrays in timm's layout, as timm's own ``_load_weights`` maps them."""
    t = {"cls_token": p["cls"], "pos_embed": p["Transformer/posembed_input/pos_embedding"],
         "patch_embed.proj.weight": p["embedding/kernel"].transpose(3, 2, 0, 1), "patch_embed.proj.bias": p["embedding/bias"],
         "norm.weight": p["Transformer/encoder_norm/scale"], "norm.bias": p["Transformer/encoder_norm/bias"],
         "head.weight": p["head/kernel"].T, "head.bias": p["head/bias"]}
    for i in range(num_layers):
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        t[f"blocks.{i}.attn.qkv.weight"] = np.concatenate([p[a + n + "/kernel"].reshape(d, d).T for n in ("query", "key", "value")])
        t[f"blocks.{i}.attn.qkv.bias"] = np.concatenate([p[a + n + "/bias"].reshape(-1) for n in ("query", "key", "value")])
        t[f"blocks.{i}.attn.proj.weight"] = p[a + "out/kernel"].reshape(d, d).T
        t[f"blocks.{i}.attn.proj.bias"] = p[a + "out/bias"]
        for n, k in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
            t[f"blocks.{i}.{n}.weight"], t[f"blocks.{i}.{n}.bias"] = p[b + k + "/scale"], p[b + k + "/bias"]
        for n, k in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            t[f"blocks.{i}.mlp.{n}.weight"] = p[b + "MlpBlock_3/" + k + "/kernel"].T
            t[f"blocks.{i}.mlp.{n}.bias"] = p[b + "MlpBlock_3/" + k + "/bias"]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in t.items()}


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
    from keras_vit.weights import CheckpointError, checkpoint_shapes

    arrays = timm_state_dict(vit_checkpoint())
    arrays["dist_token"] = np.zeros((1, 1, 32), np.float32)
    path = str(tmp_path / "deit.safetensors")
    safetensors_numpy.save_file(arrays, path)
    with pytest.raises(CheckpointError, match="distillation token"):
        checkpoint_shapes(path)
