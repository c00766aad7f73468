"""One notion of a model's state (float, quantized, LoRA) that the weight writers consult: loading a checkpoint,
resize_model and the keras-hub export refuse a quantized or LoRA model up front, naming the way out."""

import os

import numpy as np
import pytest

import keras_vit
from foreign_files import timm_file
from helpers import images, tiny_vit, vit_checkpoint
from keras_vit.architecture.state import model_state
from keras_vit.export import export_model

QUANTIZED = r"quantized \(int8.*load the weights into the float model, then call model\.quantize\('int8'\)"
LORA = r"LoRA enabled \(rank 2 on \d+ layers, trained factors\).*call keras_vit\.merge_lora\(model\) first"


def int8_model():
    model = tiny_vit()
    model.quantize("int8")
    return model


def trained_lora_model():
    """LoRA of rank 2 with non-zero B factors (as after training), without a training run."""
    model = tiny_vit()
    keras_vit.enable_lora(model, 2)
    rng = np.random.default_rng(0)
    for layer in model._flatten_layers(include_self=False):
        if getattr(layer, "lora_enabled", False):
            layer.lora_kernel_b.assign(rng.standard_normal(layer.lora_kernel_b.shape).astype("float32") * 0.1)
    return model


def values(model):
    return [np.array(v) for v in model.weights]


def assert_unchanged(before, model):
    for old, new in zip(before, values(model)):
        np.testing.assert_allclose(new, old, rtol=0, atol=0)


def test_model_state_tells_float_quantized_and_lora_apart():
    assert model_state(tiny_vit()).kind == "float"
    state = model_state(int8_model())
    assert (state.kind, state.quantization) == ("quantized", "int8") and state.quantized_layers
    model = tiny_vit()
    keras_vit.enable_lora(model, 2)
    state = model_state(model)
    assert (state.kind, state.lora_rank, state.lora_trained) == ("lora", 2, False)
    assert model_state(trained_lora_model()).lora_trained


@pytest.fixture(scope="module")
def timm_checkpoint(tmp_path_factory):
    return timm_file(str(tmp_path_factory.mktemp("timm")), vit_checkpoint())


def test_a_float_model_still_loads_the_checkpoint(timm_checkpoint):
    model = tiny_vit()
    report = keras_vit.load_checkpoint(model, timm_checkpoint)
    assert len(report.loaded) > 30
    kernel = vit_checkpoint()["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"]
    np.testing.assert_allclose(np.array(model.get_layer("transformer_block_0").mlp_dense_1.kernel), kernel, atol=1e-6)


@pytest.mark.parametrize("make, message", [(int8_model, QUANTIZED), (trained_lora_model, LORA)], ids=["int8", "lora"])
def test_loading_into_a_quantized_or_lora_model_is_refused_and_assigns_nothing(make, message, timm_checkpoint):
    model = make()
    before = values(model)
    with pytest.raises(ValueError, match=message + ".*Nothing was assigned"):
        keras_vit.load_checkpoint(model, timm_checkpoint)
    assert_unchanged(before, model)


def test_resize_of_a_float_model_still_works():
    resized = keras_vit.resize_model(tiny_vit(), image_size=48)
    assert resized.input_shape == (None, 48, 48, 3)


@pytest.mark.parametrize("make, message", [
    (int8_model, r"Cannot resize model 'vit': it is quantized \(int8.*resize the float model, then call model\.quantize\('int8'\)"),
    (trained_lora_model, r"Cannot resize model 'vit'.*" + LORA + r".* and resize that"),
], ids=["int8", "lora"])
def test_resize_of_a_quantized_or_lora_model_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.resize_model(make(), image_size=48)


def test_keras_hub_export_of_a_float_model_still_works(tmp_path):
    model = tiny_vit(classifier_activation=None)
    report = export_model(model, "keras-hub", str(tmp_path / "preset"))
    assert report.passed and os.path.isdir(tmp_path / "preset")


@pytest.mark.parametrize("make, message", [
    (int8_model, r"export as a keras-hub preset model 'vit': it is quantized \(int8.*export the float model, then call "
                 r"model\.quantize\('int8'\)"),
    (trained_lora_model, r"export as a keras-hub preset model 'vit'.*" + LORA + r".* and export that"),
], ids=["int8", "lora"])
def test_keras_hub_export_of_a_quantized_or_lora_model_is_refused_and_writes_nothing(make, message, tmp_path):
    out = tmp_path / "preset"
    with pytest.raises(ValueError, match=message):
        export_model(make(), "keras-hub", str(out))
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match=message):  # the exporter itself, called directly, refuses alike
        from keras_vit.export import keras_hub

        keras_hub.export(make(), str(out), images=images())
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rank", [32, 1000, 99_999])
def test_a_lora_rank_that_is_not_low_is_refused_by_name(rank):
    """Rank 1,000 on a width-32 model gave 1.3 M trainable weights for a 24 k model, without a word."""
    model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, num_classes=3)
    with pytest.raises(ValueError, match=rf"`rank`={rank} is not a low rank for this model: the factors of layer '\w+' "
                                         r"would have [\d,]+ weights, its kernel has [\d,]+"):
        keras_vit.enable_lora(model, rank=rank)
    assert not keras_vit.models.lora.lora_layers(model)
    keras_vit.enable_lora(model, rank=8)


@pytest.mark.parametrize("index", [1.9, "1", True, None])
def test_forward_intermediates_refuses_an_index_that_is_not_an_int(index):
    """indices=[1.9], ['1'] and [True] all used to give block 1."""
    from keras_vit.inspect.features import forward_intermediates

    model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=16, num_layers=2, num_heads=2, mlp_dim=32, num_classes=3)
    with pytest.raises(ValueError, match=r"Block indices must be ints"):
        forward_intermediates(model, np.zeros((1, 32, 32, 3), np.float32), indices=[index])
