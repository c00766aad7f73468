"""AIMv2's switches (RMSNorm, a norm of the patch embeddings, bias-free attention output and MLP projections) against
NumPy references (tests/reference_aimv2.py), counted exactly, saved and restored, their impossible values refused by
name, and exported to TFLite whole for the GPU delegate."""

import keras
import numpy as np
import pytest

import keras_vit
import reference_aimv2 as ref
from harness import _randomize
from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture.params import count_config_params
from keras_vit.layers import TransformerBlock
from keras_vit.layers.normalization import RMSNorm

AIMV2 = dict(norm_type="rmsnorm", patch_norm=True, qkv_bias=False, proj_bias=False, mlp_bias=False, mlp_type="glu",
             mlp_activation="silu", class_token=False, pooling="gap", layer_norm_epsilon=1e-5)
TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=40)


def test_rms_norm_is_timms_and_transformers():
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype("float32") * 3
    layer = RMSNorm(epsilon=1e-5)
    layer.build(x.shape)
    gamma = np.random.default_rng(1).uniform(0.5, 1.5, 16).astype("float32")
    layer.gamma.assign(gamma)
    np.testing.assert_allclose(np.asarray(layer(x)), ref.rms_norm(x.astype("float64"), gamma, 1e-5), rtol=1e-5, atol=1e-5)
    assert RMSNorm.from_config(layer.get_config()).epsilon == 1e-5


def test_rms_norm_computes_in_float32_under_bfloat16():
    x = np.random.default_rng(0).standard_normal((1, 3, 8)).astype("float32") * 100
    layer = RMSNorm(dtype="mixed_bfloat16")
    y = layer(x)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    # the output rounded to bfloat16 (8 significant bits: 0.4 % of each value; measured 0.005)
    np.testing.assert_allclose(np.asarray(keras.ops.cast(y, "float32")), ref.rms_norm(x, 1.0, 1e-6), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("epsilon", [0, 1.5, "1e-5", True])
def test_rms_norm_refuses_a_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match=r"`epsilon` must be a float in \(0, 1\)"):
        RMSNorm(epsilon=epsilon)


def test_bias_free_swiglu_block_is_timms_block():
    """timm's AIMv2 Block (tests/reference_aimv2.block) with the block's own weights written in timm's layout."""
    d, hidden, heads = 32, 40, 4
    block = TransformerBlock(num_heads=heads, mlp_dim=hidden, layer_norm_epsilon=1e-5, activation="silu", mlp_type="glu",
                             qkv_bias=False, norm_type="rmsnorm", proj_bias=False, mlp_bias=False)
    x = np.random.default_rng(0).standard_normal((1, 7, d)).astype("float32")
    block(x)
    assert sorted(w.path.split("/", 1)[1] for w in block.weights) == sorted(
        ["attention/query/kernel", "attention/key/kernel", "attention/value/kernel", "attention/attention_output/kernel",
         "layer_norm_1/gamma", "layer_norm_2/gamma", "mlp_dense_1/kernel", "mlp_dense_2/kernel"])
    sd = ref.state_dict(dim=d, depth=1, hidden=hidden, seed=3)
    qkv = sd["blocks.0.attn.qkv.weight"].T  # (D, 3D): [q | k | v]
    for i, dense in enumerate((block.attention.query_dense, block.attention.key_dense, block.attention.value_dense)):
        dense.kernel.assign(qkv[:, i * d:(i + 1) * d].reshape(d, heads, d // heads))
    block.attention.output_dense.kernel.assign(sd["blocks.0.attn.proj.weight"].T.reshape(heads, d // heads, d))
    block.norm1.gamma.assign(sd["blocks.0.norm1.weight"])
    block.norm2.gamma.assign(sd["blocks.0.norm2.weight"])
    block.mlp_dense_1.kernel.assign(np.concatenate([sd["blocks.0.mlp.fc1_g.weight"].T, sd["blocks.0.mlp.fc1_x.weight"].T], 1))
    block.mlp_dense_2.kernel.assign(sd["blocks.0.mlp.fc2.weight"].T)
    want = ref.block(x[0].astype("float64"), sd, "blocks.0", heads, 1e-5)
    np.testing.assert_allclose(np.asarray(block(x))[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    restored = TransformerBlock.from_config(block.get_config())
    assert (restored.norm_type, restored.proj_bias, restored.mlp_bias) == ("rmsnorm", False, False)


@pytest.mark.parametrize("fields", [
    AIMV2,
    dict(norm_type="rmsnorm"),
    dict(patch_norm=True),  # a LayerNorm of the patches: scale and bias
    dict(proj_bias=False, pre_norm=True, final_norm=False, fc_norm=True, pooling="gap"),
    dict(mlp_bias=False, norm_type="rmsnorm", pre_norm=True, layer_scale_init=0.1),
])
def test_the_count_is_the_built_models(fields):
    config = ViTConfig(**TINY, num_classes=3, **fields)
    model = keras_vit.ViT(**config.to_dict())
    assert count_config_params(config) == model.count_params()


def test_an_aimv2_model_saves_and_restores(tmp_path):
    model = keras_vit.ViT(**TINY, include_top=False, **dict(AIMV2, pooling=None))
    _randomize(model)
    assert ViTConfig.from_dict(model.vit_config.to_dict()) == model.vit_config
    names = [w.path for w in model.weights]
    assert "patch_encoder/patch_norm/gamma" in names and not any(n.endswith("beta") for n in names)
    path = str(tmp_path / "aimv2.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert restored.vit_config == model.vit_config
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(np.asarray(restored(x)), np.asarray(model(x)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fields, named", [
    (dict(norm_type="groupnorm"), r"Unknown `norm_type`: .*Received: norm_type='groupnorm'"),
    (dict(norm_type=None), r"Unknown `norm_type`"),
    (dict(patch_norm="rmsnorm"), r"`patch_norm` must be a bool. Received: patch_norm='rmsnorm'"),
    (dict(proj_bias=None), r"`proj_bias` must be a bool"),
    (dict(mlp_bias="no"), r"`mlp_bias` must be a bool"),
    (dict(norm_type="rmsnorm", pooling="map", class_token=False), r"Impossible ViTConfig: pooling='map' .*norm_type='rmsnorm', pooling='map'"),
])
def test_impossible_switches_are_refused_by_name(fields, named):
    with pytest.raises(ValueError, match=named):
        ViTConfig(**TINY, **fields)


def test_the_paper_is_not_aimv2():
    from keras_vit.architecture import family

    assert family.is_paper(ViTConfig(**TINY))
    for field, value in (("norm_type", "rmsnorm"), ("patch_norm", True), ("proj_bias", False), ("mlp_bias", False)):
        config = ViTConfig(**TINY, **{field: value})
        assert not family.is_paper(config) and config.variant is None


def test_keras_hub_export_names_the_switches():
    from keras_vit.export.keras_hub import unsupported

    found = " ".join(unsupported(ViTConfig(**TINY, **AIMV2)))
    for said in ("norm_type='rmsnorm'", "patch_norm=True", "proj_bias=False", "mlp_bias=False"):
        assert said in found


def test_the_tflite_formulation_of_an_aimv2_model_computes_the_same():
    """What the TFLite export traces (layers.formulation.rank4): the same outputs, fast; the file itself is checked
    by the slow test below."""
    from keras_vit.layers import formulation

    model = keras_vit.ViT(**TINY, num_classes=3, classifier_activation=None, **AIMV2)
    _randomize(model)
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    want = np.asarray(model(x))
    with formulation.rank4(model):
        got = np.asarray(model(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.slow  # a TFLite conversion (~10 s); the rank-4 attention itself is checked fast in test_formulation.py
def test_an_aimv2_model_exports_whole_to_the_gpu_delegate(tmp_path):
    from keras_vit.export import export_model, gpu_delegate_report

    model = keras_vit.ViT(**TINY, include_top=False, **AIMV2)
    _randomize(model)
    x = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
    path = str(tmp_path / "aimv2.tflite")
    report = export_model(model, "tflite", path, quantize="float32", eval_data=x, num_images=4)
    assert report.passed
    delegate = gpu_delegate_report(path)
    assert delegate.whole, delegate.line()
