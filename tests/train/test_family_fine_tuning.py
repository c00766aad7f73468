"""`keras-vit train --weights MODEL.keras` on members of the ViT family: the source's architecture, a new zero head."""

import json

import numpy as np
import pytest

import keras_vit
from keras_vit import cli
from keras_vit.train import job, recipes

SIZES = dict(image_size=28, patch_size=14, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
FAMILY = {
    "dinov2": dict(num_classes=5, num_register_tokens=4, layer_scale_init=1e-5),
    "siglip": dict(pooling="map", class_token=False, mlp_activation="gelu_tanh", include_top=False),
    "clip": dict(pre_norm=True, projection_dim=16, mlp_activation="quick_gelu", include_top=False,
                 input_mean=(0.48, 0.46, 0.41), input_std=(0.27, 0.26, 0.28)),
}
SWITCHES = ("num_register_tokens", "layer_scale_init", "pooling", "class_token", "mlp_activation", "pre_norm", "projection_dim",
            "input_mean", "input_std", "patch_size", "hidden_size", "num_layers")


def saved_source(tmp_path, row):
    model = keras_vit.build_model(keras_vit.ViTConfig(**SIZES, **FAMILY[row]))
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(size=variable.shape).astype("float32") * 0.1)
    path = str(tmp_path / f"{row}.keras")
    keras_vit.save_model(model, path)
    return model, path


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """``sources(row)``: :func:`saved_source` of a family row, built and saved once for the module (the tests read
    the model and its file; none writes to them)."""
    made = {}

    def source(row):
        if row not in made:
            made[row] = saved_source(tmp_path_factory.mktemp(row), row)
        return made[row]

    return source


@pytest.mark.parametrize("row", sorted(FAMILY))
def test_the_fine_tuning_model_keeps_the_family_and_gets_a_zero_head(sources, row):
    source, path = sources(row)
    model = recipes.build_model(recipes.PRETRAINED, 10, weights=path)
    for field in SWITCHES:
        assert getattr(model.vit_config, field) == getattr(source.vit_config, field), field
    assert model.vit_config.include_top and model.vit_config.num_classes == 10 and model.output_shape == (None, 10)
    head = model.get_layer("head")
    assert not np.any(np.asarray(head.kernel)) and not np.any(np.asarray(head.bias))
    assert head.kernel.shape[0] == (16 if row == "clip" else 32)  # on the projection for CLIP, the pooled vector otherwise
    for layer in ("transformer_block_1", "patch_encoder", "map_head" if row == "siglip" else "encoder_norm"):
        for got, want in zip(model.get_layer(layer).weights, source.get_layer(layer).weights):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("row", ["dinov2", "siglip"])
def test_train_command_fine_tunes_a_family_model_from_its_keras_file(tmp_path, sources, row):
    source, path = sources(row)
    out = tmp_path / "run"
    code = cli.main(["train", "--weights", path, "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "32",
                     "--output", str(out), "--progress", "0", "--no-tensorboard"])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "pretrained" and metrics["image_size"] == 28 and metrics["optimizer"] == "sgd"
    trained = keras_vit.load_model(out / "model.keras")
    for field in SWITCHES:
        assert getattr(trained.vit_config, field) == getattr(source.vit_config, field), field
    assert trained.output_shape == (None, 10)
    probabilities = trained.predict(np.zeros((1, 28, 28, 3), "float32"), verbose=0)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)


def test_pretrained_needs_weights_and_a_named_model_is_still_refused_the_family_file(sources):
    with pytest.raises(ValueError, match="model='pretrained' is the architecture of the weights: give weights"):
        job.TrainConfig(model="pretrained").resolved()
    assert job.TrainConfig().resolved().model == "mnist"
    _, path = sources("dinov2")
    assert job.TrainConfig(weights=path).resolved().model == "pretrained"
    with pytest.raises(ValueError, match=r"no place for.*LayerScale_1/gamma.*reg"):
        recipes.build_model("micro", 10, weights=path)  # a paper model cannot hold registers and LayerScale
