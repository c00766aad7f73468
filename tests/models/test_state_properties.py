"""Property-based (Hypothesis): every model state meets load_checkpoint and resize_model either correctly or with a
refusal that names the way out, and every stated grid (square, rectangular, a non-square count) through every
foreign source builds that grid or is refused (issue 35). The exports' own refusals are tested in
tests/models/test_model_state.py and tests/export/."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import keras_vit
from helpers import save_npz, vit_checkpoint
from keras_vit.architecture.state import model_state

pytest.importorskip("safetensors.numpy")
from foreign_files import TINY_TIMM_CONFIG, timm_file, transformers_folder  # noqa: E402

TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5,
            classifier_activation=None)
STATES = ("float", "int8", "lora", "lora_trained", "merged")
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _model(state):
    model = keras_vit.ViT(**TINY)
    if state == "int8":
        model.quantize("int8")
    elif state != "float":
        keras_vit.enable_lora(model, rank=2)
        if state != "lora":  # trained factors: B away from its zero start
            for layer in keras_vit.models.lora.lora_layers(model):
                layer.lora_kernel_b.assign(np.full(layer.lora_kernel_b.shape, 0.05, np.float32))
        if state == "merged":
            model = keras_vit.merge_lora(model)
    return model


@SETTINGS
@given(state=st.sampled_from(STATES), operation=st.sampled_from(("load", "resize")))
def test_every_state_is_loaded_resized_or_refused_by_name(tmp_path_factory, state, operation):
    model = _model(state)
    assert model_state(model).kind == ("float" if state in ("float", "merged") else ("quantized" if state == "int8" else "lora"))
    float_model = state in ("float", "merged")
    try:
        if operation == "load":
            path = save_npz(tmp_path_factory.mktemp("c") / "c.npz", vit_checkpoint())
            keras_vit.load_checkpoint(model, path)
            reference = keras_vit.ViT(**TINY, weights=path)
            x = np.random.default_rng(0).uniform(0, 255, (1, 32, 32, 3)).astype("float32")
            np.testing.assert_allclose(np.asarray(model(x)), np.asarray(reference(x)), rtol=0, atol=1e-5)
        else:
            resized = keras_vit.resize_model(model, image_size=48)
            assert resized.vit_config.image_size == (48, 48)
    except ValueError as error:
        assert not float_model, f"a float model was refused: {error}"
        assert ("quantize" in str(error)) if state == "int8" else ("merge_lora" in str(error)), str(error)
    else:
        assert float_model, f"a {state} model was {operation}ed without a word"


@SETTINGS
@given(grid=st.sampled_from(((4, 4), (2, 8), (2, 6), (3, 5))), source=st.sampled_from(("timm", "transformers")))
def test_every_stated_grid_through_every_source_is_that_grid(tmp_path_factory, grid, source):
    size = [8 * grid[0], 8 * grid[1]]
    folder = tmp_path_factory.mktemp(source)
    if source == "timm":
        config = dict(TINY_TIMM_CONFIG, num_classes=5, model_args=dict(TINY_TIMM_CONFIG["model_args"], img_size=size))
        path = timm_file(folder, vit_checkpoint(grid=grid), config)
    else:
        path = transformers_folder(folder / "vit", vit_checkpoint(grid=grid), image_size=size)
    model = keras_vit.from_pretrained(path, classifier_activation=None)
    assert model.vit_config.grid == grid and not model.load_report.resized
