"""Features of the ViT family: feature_model's named features, dense maps (forward_intermediates) at any size."""

import functools

import numpy as np
import pytest

import keras_vit
from helpers import images
from keras_vit.inspect import features

SMALL = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=3)
FAMILY = {
    "paper": dict(image_size=32),
    "dinov2_registers_any_size": dict(image_size=None, native_image_size=32, num_register_tokens=2, layer_scale_init=0.1),
    "deit_distilled": dict(image_size=32, distillation_token=True, prefix_positions=False, classifier_activation=None),
    "siglip_map": dict(image_size=32, pooling="map", class_token=False, mlp_activation="gelu_tanh", include_top=False),
    "mae_fc_norm": dict(image_size=32, pooling="gap", final_norm=False, fc_norm=True, classifier_activation=None),
    "clip_projection": dict(image_size=32, pre_norm=True, projection_dim=8, mlp_activation="quick_gelu", include_top=False),
}


@functools.lru_cache(maxsize=None)
def family_model(row):
    """The tiny model of ``row``, built once per worker: the tests read it, none changes it."""
    model = keras_vit.build_model(keras_vit.ViTConfig(**SMALL, **FAMILY[row]))
    rng = np.random.default_rng(7)
    for name in ("head", "head_distillation"):  # zero-initialised: random, so that comparisons mean something
        if any(layer.name == name for layer in model.layers):
            for variable in model.get_layer(name).weights:
                variable.assign(rng.normal(size=variable.shape).astype("float32"))
    return model


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_maps_are_the_blocks_patch_tokens_and_prefix_tokens_apart(row):
    model = family_model(row)
    config = model.vit_config
    x = images(2)
    blocks = keras_vit.forward_features(model, x, blocks="all", outputs=["tokens"])
    tokens, pairs = keras_vit.forward_intermediates(model, x, indices=None, return_prefix_tokens=True)
    prefix = config.num_prefix_tokens
    assert prefix == {"dinov2_registers_any_size": 3, "deit_distilled": 2, "siglip_map": 0, "mae_fc_norm": 0}.get(row, 1)
    np.testing.assert_allclose(tokens, blocks["tokens"], atol=1e-6)
    assert len(pairs) == config.num_layers
    for i, (fmap, prefix_tokens) in enumerate(pairs):
        block = blocks[f"block_{i}"]
        assert fmap.shape == (2, 4, 4, 32) and prefix_tokens.shape == (2, prefix, 32)
        np.testing.assert_allclose(fmap, block[:, prefix:].reshape(2, 4, 4, 32), atol=1e-6)
        np.testing.assert_allclose(prefix_tokens, block[:, :prefix], atol=1e-6)


def test_prefix_tokens_are_class_distillation_registers_in_that_order():
    """With every block an identity (LayerScale gammas zero) and no positions, the prefix is the learned tokens."""
    model = keras_vit.build_model(keras_vit.ViTConfig(image_size=32, **SMALL, distillation_token=True, num_register_tokens=3,
                                                      layer_scale_init=0.1, prefix_positions=False))
    encoder = model.get_layer("patch_encoder")
    rng = np.random.default_rng(0)
    for variable in (encoder.cls, encoder.dist, encoder.registers):
        variable.assign(rng.normal(size=variable.shape).astype("float32"))
    for i in range(2):
        block = model.get_layer(f"transformer_block_{i}")
        for scale in (block.layer_scale_1, block.layer_scale_2):
            scale.gamma.assign(np.zeros(scale.gamma.shape, "float32"))
    maps = keras_vit.forward_intermediates(model, images(1), indices=1, return_prefix_tokens=True, intermediates_only=True)
    (fmap, prefix), = maps
    expected = np.concatenate([np.asarray(encoder.cls), np.asarray(encoder.dist), np.asarray(encoder.registers)], axis=1)
    np.testing.assert_allclose(prefix, expected, atol=1e-6)
    assert fmap.shape == (1, 4, 4, 32)  # neither the registers nor the distillation token are on the map
    named = keras_vit.forward_features(model, images(1), outputs=["cls", "distillation", "registers"])
    expected = np.asarray(model.get_layer("encoder_norm")(expected))  # the named features are the encoder's output
    np.testing.assert_allclose(named["cls"], expected[:, 0], atol=1e-5)
    np.testing.assert_allclose(named["distillation"], expected[:, 1], atol=1e-5)
    np.testing.assert_allclose(named["registers"], expected[:, 2:], atol=1e-5)


def test_maps_at_any_input_size_follow_the_image():
    model = family_model("dinov2_registers_any_size")
    x = images(2, (48, 64))
    tokens, maps = keras_vit.forward_intermediates(model, x, indices=[-1, 0])
    assert tokens.shape == (2, 3 + 6 * 8, 32) and [m.shape for m in maps] == [(2, 6, 8, 32)] * 2
    static = keras_vit.resize_model(model, (48, 64))  # the same weights in a fixed 48x64 graph
    _, expected = keras_vit.forward_intermediates(static, x, indices=[-1, 0])
    for got, want in zip(maps, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    blocks = keras_vit.forward_features(model, x, blocks=[1])
    np.testing.assert_allclose(maps[0], blocks["block_1"][:, 3:].reshape(2, 6, 8, 32), atol=1e-6)
    # the native size too, and the Keras model answers every size without rebuilding
    extractor = keras_vit.intermediates_model(model, indices=1, intermediates_only=True)
    assert extractor.predict(images(1, 32), verbose=0)["block_1"].shape == (1, 4, 4, 32)
    assert extractor.predict(images(1, (24, 40)), verbose=0)["block_1"].shape == (1, 3, 5, 32)


def test_norm_applies_the_final_norm_and_formats():
    model = family_model("dinov2_registers_any_size")
    x = images(2, (32, 48))
    tokens, (raw,) = keras_vit.forward_intermediates(model, x, indices=1, norm=False)
    _, (normed,) = keras_vit.forward_intermediates(model, x, indices=1, norm=True)
    np.testing.assert_allclose(normed, tokens[:, 3:].reshape(2, 4, 6, 32), atol=1e-5)  # the last block, normed: the output
    assert not np.allclose(raw, normed, atol=1e-3)
    norm = model.get_layer("encoder_norm")
    np.testing.assert_allclose(np.asarray(norm(raw)), normed, atol=1e-5)
    (nchw,) = keras_vit.forward_intermediates(model, x, indices=1, output_fmt="NCHW", intermediates_only=True)
    (nlc,) = keras_vit.forward_intermediates(model, x, indices=1, output_fmt="NLC", intermediates_only=True)
    np.testing.assert_allclose(nchw, raw.transpose(0, 3, 1, 2), atol=1e-6)
    np.testing.assert_allclose(nlc, raw.reshape(2, 24, 32), atol=1e-6)


def test_norm_of_a_model_without_final_norm_is_the_identity_as_in_timm():
    model = family_model("mae_fc_norm")
    x = images(1)
    _, (raw,) = keras_vit.forward_intermediates(model, x, indices=1)
    _, (normed,) = keras_vit.forward_intermediates(model, x, indices=1, norm=True)
    np.testing.assert_allclose(raw, normed, atol=1e-6)


def _dense(vector, layer):
    out = vector @ np.asarray(layer.kernel)
    return out + np.asarray(layer.bias) if layer.use_bias else out


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_pooled_and_embedding_are_what_the_model_outputs(row):
    model = family_model(row)
    config = model.vit_config
    x = images(2)
    result = keras_vit.forward_features(model, x)
    has = {"cls": config.class_token, "distillation": config.distillation_token, "registers": config.num_register_tokens,
           "embedding": config.projection_dim}
    expected = {"tokens", "pooled"} | {name for name, present in has.items() if present}
    assert set(result) == expected
    output = np.asarray(model.predict(x, verbose=0))
    last = result["embedding"] if config.projection_dim else result["pooled"]
    if not config.include_top:
        np.testing.assert_allclose(last, output, rtol=1e-5, atol=1e-5)
    elif config.distillation_token:
        np.testing.assert_allclose(result["pooled"], (result["cls"] + result["distillation"]) / 2, atol=1e-5)
        logits = (_dense(result["cls"], model.get_layer("head")) + _dense(result["distillation"], model.get_layer("head_distillation"))) / 2
        np.testing.assert_allclose(logits, output, rtol=1e-4, atol=1e-4)
    else:
        logits = _dense(last, model.get_layer("head"))
        if config.classifier_activation == "softmax":
            logits = np.exp(logits - logits.max(-1, keepdims=True))
            logits /= logits.sum(-1, keepdims=True)
        np.testing.assert_allclose(logits, output, rtol=1e-4, atol=1e-5)
    if config.projection_dim:
        np.testing.assert_allclose(_dense(result["pooled"], model.get_layer("projection")), result["embedding"], rtol=1e-5, atol=1e-5)
    if config.fc_norm:  # the mean of the patch tokens (no final norm), through fc_norm
        np.testing.assert_allclose(np.asarray(model.get_layer("fc_norm")(result["tokens"].mean(1))), result["pooled"], atol=1e-5)


def test_missing_features_and_bad_arguments_are_refused_by_name():
    siglip = family_model("siglip_map")
    with pytest.raises(ValueError, match="no class token.*'cls'"):
        features.feature_model(siglip, outputs=["cls"])
    with pytest.raises(ValueError, match="no projection.*'embedding'"):
        features.feature_model(siglip, outputs=["embedding"])
    with pytest.raises(ValueError, match="no register tokens"):
        features.feature_model(siglip, outputs="registers")
    fixed = family_model("paper")
    with pytest.raises(ValueError, match=r"takes 32x32, patch 8x8 images. Received: images of 48x64"):
        keras_vit.forward_intermediates(fixed, images(1, (48, 64)))
    with pytest.raises(ValueError, match=r"last 3 blocks of a model of depth 2"):
        keras_vit.forward_intermediates(fixed, images(1), indices=3)
    with pytest.raises(ValueError, match=r"out of range for a model of depth 2"):
        keras_vit.forward_intermediates(fixed, images(1), indices=[2])
    with pytest.raises(ValueError, match=r"output_fmt='NWHC'"):
        keras_vit.forward_intermediates(fixed, images(1), output_fmt="NWHC")
    with pytest.raises(ValueError, match="divisible by the patch size"):
        keras_vit.forward_intermediates(family_model("dinov2_registers_any_size"), images(1, (36, 32)))
    # forward_features refused the same sizes only through Keras' message, which names neither size
    with pytest.raises(ValueError, match=r"takes 32x32, patch 8x8 images. Received: images of 48x64"):
        keras_vit.forward_features(fixed, images(1, (48, 64)), blocks="all")
    with pytest.raises(ValueError, match="divisible by the patch size"):
        keras_vit.forward_features(family_model("dinov2_registers_any_size"), images(1, (36, 32)))
    with pytest.raises(ValueError, match=r"\(batch, H, W, 3\). Received: shape=\(1, 32, 32, 4\)"):
        keras_vit.forward_features(fixed, np.zeros((1, 32, 32, 4)))


# the inspection models take a list of one input: given as such, Keras has nothing to warn about
@pytest.mark.filterwarnings("error:The structure of `inputs` doesn't match")
def test_inspection_runs_in_eager_batches_and_agrees_with_predict(monkeypatch):
    """forward_features, forward_intermediates and attention_weights call the model eagerly in batches (no predict
    step traced per model): the same arrays as model.predict, in the structure the model returns, whatever the
    batch size; no image is refused by name."""
    import keras

    from helpers import tiny_vit

    model, x = tiny_vit(num_classes=3), images(5, 32, seed=3)
    maps = features.feature_model(model, blocks=[1], outputs=["tokens", "cls"])
    expected = maps.predict(x, verbose=0)
    monkeypatch.setattr(keras.Model, "predict", lambda *a, **k: pytest.fail("model.predict called"))
    for batch_size in (2, 8):
        got = features.run_in_batches(maps, x, batch_size)
        assert sorted(got) == sorted(expected)
        for name in got:  # the same graph, eager or traced: float32 round-off, which scales with the tokens' size
            np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-5 * np.abs(expected[name]).max())
    weights = keras_vit.attention_weights(model, x, batch_size=2)
    assert weights.shape == (5, 2, 4, 17, 17) and np.allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert keras_vit.forward_features(model, x, blocks=[1], outputs=["cls"], batch_size=3)["cls"].shape == (5, 32)
    with pytest.raises(ValueError, match=r"Expected at least one image\. Received: images of shape \(0, 32, 32, 3\)"):
        features.run_in_batches(maps, x[:0], 2)
