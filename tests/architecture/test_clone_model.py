"""``keras.models.clone_model`` on keras_vit models: a VisionTransformer with the same ``vit_config``.

Keras builds the copy with the functional constructor alone (``cls(inputs, outputs, name=...)``); before the fix
``VisionTransformer.__init__`` required ``vit_config`` and every clone failed with a ``TypeError``.
"""

import numpy as np
import pytest

import keras
import keras_vit

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=3)


@pytest.mark.parametrize("fields", [{}, dict(pooling="map", rope="axial", num_register_tokens=2),
                                    dict(stem="resnet", block_units=(1,), width=0.5, patch_size=1)])
def test_clone_model_gives_a_vision_transformer_of_the_same_config(fields, tmp_path):
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(dict(SMALL, **fields)))
    clone = keras.models.clone_model(model)
    assert isinstance(clone, keras_vit.VisionTransformer) and clone.vit_config == model.vit_config
    assert [layer.name for layer in clone.layers] == [layer.name for layer in model.layers]
    clone.set_weights(model.get_weights())
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    # the same graph and weights: one CPU gives the same bits, but no computed float is compared exactly (the house rule)
    np.testing.assert_allclose(clone.predict(images, verbose=0), model.predict(images, verbose=0), rtol=0, atol=1e-6)
    clone.save(tmp_path / "clone.keras")
    assert keras_vit.load_model(tmp_path / "clone.keras").vit_config == model.vit_config


def test_a_larger_model_with_a_keras_vit_backbone_clones_recursively():
    backbone = keras_vit.build_model(keras_vit.ViTConfig.from_dict(dict(SMALL, include_top=False)))
    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(backbone(inputs)))
    for recursive in (False, True):
        clone = keras.models.clone_model(model, recursive=recursive)
        assert clone.layers[1].vit_config == backbone.vit_config


def test_a_clone_that_changes_the_graph_is_refused_by_name():
    model = keras_vit.build_model(keras_vit.ViTConfig.from_dict(SMALL))

    def wider_head(layer):
        config = layer.get_config()
        if layer.name == "head":
            config["units"] = 7
        return layer.__class__.from_config(config)

    with pytest.raises(ValueError, match="needs its `vit_config`.*clone_model"):
        keras.models.clone_model(model, clone_function=wider_head)


def test_a_model_built_on_a_users_input_clones():
    """clone_model names its new keras.Input after the tensor ("keras_tensor_N"), not the input layer."""
    model = keras_vit.ViT(**SMALL, input_tensor=keras.Input((32, 32, 3)))
    assert keras.models.clone_model(model).vit_config == model.vit_config


def test_a_lora_model_is_not_cloned_into_a_plain_one():
    """keras.models.clone_model of a model with LoRA factors gave a plain model without a word (the factors are in no
    layer config): every weight of the copy trainable, and set_weights of the original failed on the count."""
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, num_classes=3)
    keras_vit.enable_lora(model, rank=2)
    with pytest.raises(ValueError, match=r"has LoRA factors .* keras.models.clone_model does not copy"):
        keras.models.clone_model(model)
    merged = keras_vit.merge_lora(model)  # a plain model of the same graph as the LoRA one, still live: its config
    assert keras.models.clone_model(merged).vit_config == merged.vit_config
