"""A frozen keras_vit layer stays frozen through a ``.keras`` file, a config and JSON (keras_vit.layers.trainability).

Keras revives ``trainable=False`` on a layer but not on the sublayers it creates (``Dense``, ``EinsumDense``,
``LayerNormalization``, ``StdConv2D``): before the fix a partly frozen model, or a frozen backbone inside a larger
model, listed the frozen blocks' weights in ``trainable_weights`` again after loading, and ``fit`` trained them.
"""

import numpy as np
import pytest

import keras
import keras_vit
from keras_vit.train.model_setup import freeze

SMALL = dict(hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=3)
MODELS = {
    "vit": dict(image_size=32, patch_size=8, **SMALL),
    "hybrid": dict(image_size=32, stem="resnet", block_units=(1,), width=0.5, patch_size=1, **SMALL),
    "family": dict(image_size=32, patch_size=8, pooling="map", mlp_type="glu", mlp_activation="silu", layer_scale_init=0.1,
                   **SMALL),
}


def trainable_paths(model):
    return sorted(v.path for v in model.trainable_weights)


def revived(model, tmp_path):
    path = str(tmp_path / "model.keras")
    model.save(path)
    return {
        "keras.saving.load_model": keras.saving.load_model(path),
        "keras_vit.load_model": keras_vit.load_model(path),
        "from_config": type(model).from_config(model.get_config()),
        "model_from_json": keras.models.model_from_json(model.to_json()),
    }


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_partly_frozen_model_keeps_its_frozen_layers_frozen(name, tmp_path):
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS[name]))
    frozen = freeze(model, 1)
    expected = trainable_paths(model)
    assert expected and len(expected) < len(model.weights)
    for how, loaded in revived(model, tmp_path).items():
        assert trainable_paths(loaded) == expected, how
        assert all(not loaded.get_layer(layer).trainable for layer in frozen), how


def test_a_frozen_backbone_inside_a_larger_model_stays_frozen_and_unfreezes(tmp_path):
    backbone = keras_vit.build_model(keras_vit.ViTConfig.from_dict(dict(MODELS["vit"], include_top=False)))
    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, keras.layers.Dense(2, name="dense")(backbone(inputs)))  # named: Keras numbers others
    backbone.trainable = False
    assert trainable_paths(model) == ["dense/bias", "dense/kernel"]
    loaded = revived(model, tmp_path)["keras.saving.load_model"]
    assert trainable_paths(loaded) == ["dense/bias", "dense/kernel"]
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    before = [w.numpy().copy() for w in loaded.layers[1].weights]
    loaded.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    loaded.fit(images, np.ones((2, 2), "float32"), epochs=1, verbose=0)
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, loaded.layers[1].weights))
    loaded.layers[1].trainable = True
    assert len(loaded.trainable_weights) == len(loaded.weights)


def test_a_layer_built_frozen_freezes_its_sublayers():
    block = keras_vit.TransformerBlock(num_heads=2, mlp_dim=16, trainable=False)
    block(keras.ops.ones((1, 3, 8)))
    assert block.weights and not [v.path for v in block.weights if v.trainable]


@pytest.mark.parametrize("name", ["vit", "hybrid"])
def test_a_sublayer_frozen_inside_a_trainable_layer_stays_frozen(name, tmp_path):
    """block.attention.trainable = False (fine-tune the MLPs only), a ResidualUnit's first convolution: the sublayers
    a keras_vit layer creates are not in the model's config, so they came back trainable and fit trained them."""
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS[name]))
    block = model.get_layer("transformer_block_0")
    block.attention.trainable = False
    block.mlp_dense_1.trainable = False
    if name == "hybrid":
        unit = next(layer for layer in model.layers if "unit" in layer.name)
        unit._flatten_layers(include_self=False, recursive=False)[0].trainable = False
    expected = trainable_paths(model)
    assert expected and len(expected) < len(model.weights)
    for how, loaded in {**revived(model, tmp_path), "clone_model": keras.models.clone_model(model)}.items():
        assert trainable_paths(loaded) == expected, how
    assert "frozen_sublayers" not in keras_vit.build_model(keras_vit.ViTConfig.from_dict(MODELS[name])).get_layer(
        "transformer_block_0").get_config()  # saved only when set
