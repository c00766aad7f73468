"""The ViT family's switches in ViTConfig: refused combinations by name, parameter counts, saving, old configs."""

import keras
import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

from keras_vit import ViTConfig, build_model
from keras_vit.architecture import family
from keras_vit.architecture.params import count_config_params
from keras_vit.saving import load_model

TINY = dict(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=3)


@pytest.mark.parametrize(
    "switches, message",
    [
        (dict(class_token=False), "pooling='token' reads the class token"),
        (dict(distillation_token=True, pooling="gap"), "a distillation token is read with pooling='token'"),
        (dict(distillation_token=True, class_token=False, pooling="map"), "follows the class token"),
        (dict(distillation_token=True, projection_dim=8), "DeiT's two heads"),
        (dict(fc_norm=True), "fc_norm replaces the final norm"),
        (dict(pooling=None, include_top=False, projection_dim=8), "pooling=None has none"),
        (dict(stem="conv", stem_channels=(8,), num_register_tokens=4), "the paper's tokens only"),
        (dict(num_register_tokens=-1), "`num_register_tokens` must be an int >= 0"),
        (dict(layer_scale_init=0.0), "`layer_scale_init` must be a positive number"),
        (dict(mlp_activation="relu"), "Unknown `mlp_activation`"),
        (dict(mlp_type="moe"), "Unknown `mlp_type`"),
        (dict(input_std=(0.2, 0.0, 0.2)), "`input_std` must be three positive numbers"),
        (dict(input_mean=(0.5, 0.5)), "`input_mean` must be three finite numbers"),
        (dict(pooling="mean"), "Unknown pooling type"),  # "max" is keras.applications' max pooling
    ],
)
def test_impossible_combinations_are_refused_by_name(switches, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ViTConfig(**{**TINY, **switches})


def test_old_configs_are_the_paper_and_keep_their_class_token_rule():
    old = ViTConfig(**TINY).to_dict()
    for name in family.PAPER:
        old.pop(name)
    old.pop("class_token")
    config = ViTConfig.from_dict(old)
    assert family.is_paper(config) and config.class_token and config.variant is None  # 16/8 is no registered variant
    assert ViTConfig.from_dict({**old, "pooling": "gap"}).class_token is False
    assert config.replace(pooling="gap").class_token is False  # followed the pooling: still does
    assert config.replace(class_token=True, pooling="gap").replace(pooling="gap").class_token is True


def test_a_family_member_is_not_a_paper_variant():
    assert ViTConfig(image_size=224, patch_size=16).variant == "B/16"
    assert ViTConfig(image_size=224, patch_size=16, layer_scale_init=1e-5).variant is None


SWITCHES = st.fixed_dictionaries(
    {},
    optional={
        "num_register_tokens": st.integers(0, 4),
        "prefix_positions": st.booleans(),
        "layer_scale_init": st.sampled_from([None, 1e-5, 0.1]),
        "mlp_activation": st.sampled_from(["gelu", "gelu_tanh", "quick_gelu", "silu"]),
        "mlp_type": st.sampled_from(["mlp", "glu"]),
        "qkv_bias": st.booleans(),
        "pre_norm": st.booleans(),
        "projection_dim": st.sampled_from([None, 8]),
        "representation_size": st.sampled_from([None, 4]),
        "pooling": st.sampled_from(["token", "gap", "map"]),
        "include_top": st.booleans(),
        "distillation_token": st.booleans(),
        "class_token": st.sampled_from([None, True, False]),
        "fc_norm": st.booleans(),
    },
)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(SWITCHES)
def test_every_combination_is_refused_or_counted_exactly(switches):
    if switches.get("fc_norm"):
        switches["final_norm"] = False
    try:
        config = ViTConfig(**{**TINY, **switches})
    except ValueError as error:
        assert "Impossible ViTConfig" in str(error) or "Unknown" in str(error)
        event("refused")
        return
    event("built")
    model = build_model(config)
    assert model.count_params() == count_config_params(config)
    images = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)).astype("float32")
    outputs = np.asarray(model(images))
    assert np.isfinite(outputs).all()


def test_every_switch_survives_keras_files(tmp_path):
    config = ViTConfig(**{**TINY, "include_top": True}, num_register_tokens=2, prefix_positions=False, layer_scale_init=0.1,
                       mlp_activation="quick_gelu", mlp_type="glu", qkv_bias=False, pre_norm=True, pooling="map",
                       map_num_heads=4, map_mlp_dim=24, class_token=False, projection_dim=8, input_mean=(0.48, 0.46, 0.41), input_std=(0.27, 0.26, 0.28))
    model = build_model(config)
    for variable in model.weights:
        variable.assign(np.random.default_rng(1).normal(size=variable.shape).astype("float32") * 0.1)
    images = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)).astype("float32")
    path = tmp_path / "family.keras"
    model.save(path)
    for loaded in (load_model(path), keras.saving.load_model(path)):
        assert loaded.vit_config == config
        np.testing.assert_allclose(np.asarray(loaded(images)), np.asarray(model(images)), rtol=1e-5, atol=1e-6)


def test_input_mean_and_std_scale_pixels_per_channel():
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    model = build_model(ViTConfig(**TINY, input_mean=mean, input_std=std))
    pixels = np.random.default_rng(0).uniform(0, 255, (1, 16, 16, 3)).astype("float32")
    scaled = np.asarray(model.get_layer("preprocessing")(pixels))
    np.testing.assert_allclose(scaled, (pixels / 255.0 - np.array(mean)) / np.array(std), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["bicubic_torch", "bicubic_torch_antialias", "bilinear_torch"])
def test_position_resampling_is_the_same_rule_in_the_graph_and_the_loader(method):
    from keras_vit.layers.resampling import resize_position_embedding

    config = ViTConfig(**{**TINY, "image_size": None, "native_image_size": 32}, num_register_tokens=2, position_resampling=method)
    model = build_model(config)
    encoder = model.get_layer("patch_encoder")
    encoder.position_embedding.assign(np.random.default_rng(0).normal(size=encoder.position_embedding.shape))
    stored = np.asarray(encoder.position_embedding)
    graph = np.asarray(encoder.position_embedding_for((3, 5)))
    loader = resize_position_embedding(stored.astype("float64"), (3, 5), (4, 4), num_prefix_tokens=1, method=method)
    # float32 in the graph against float64 in the loader, on N(0, 1) values: float32 round-off of the interpolation
    np.testing.assert_allclose(graph, loader, rtol=0, atol=1e-5 * np.abs(loader).max())
    with pytest.raises(ValueError, match="Unknown `position_resampling`"):
        config.replace(position_resampling="nearest")


@pytest.mark.parametrize("switch", ["mlp_norm", "attention_norm"])
def test_the_sub_layernorms_are_refused_with_rmsnorm(switch):
    """EVA-02's sub-LayerNorms are built as LayerNorms: with norm_type='rmsnorm' (every other norm RMSNorm, AIMv2's)
    the model would mix the two silently, and no published model does; refused naming both fields."""
    with pytest.raises(ValueError, match=rf"norm_type='rmsnorm'.*{switch}=True"):
        ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                  norm_type="rmsnorm", **{switch: True})


def test_the_pooling_reads_the_prefix_tokens_only_with_pool_include_prefix():
    """timm's VisionTransformer pools (mean, max, attention) the patch tokens; pool_include_prefix every token. A file
    written before the field had attention pooling over every token, which it keeps."""
    small = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, include_top=False,
                 num_register_tokens=2, pooling="map")  # the pooled vector (a new head is zeros)
    patches, every = build_model(ViTConfig(**small)), build_model(ViTConfig(**small, pool_include_prefix=True))
    every.set_weights(patches.get_weights())
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    assert np.max(np.abs(np.asarray(patches(x)) - np.asarray(every(x)))) > 1e-4  # the registers change the pooling
    old = {k: v for k, v in patches.vit_config.to_dict().items() if k != "pool_include_prefix"}
    assert ViTConfig.from_dict(old).pool_include_prefix
    assert not ViTConfig.from_dict(dict(old, pooling="gap")).pool_include_prefix
    with pytest.raises(ValueError, match=r"pool_include_prefix is read by the gap, avg, max, map poolings"):
        ViTConfig(**dict(small, pooling="token"), pool_include_prefix=True)
