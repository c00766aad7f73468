import warnings

import numpy as np
import pytest

import keras
import keras_vit
from helpers import TINY, images, run_fit_step_test, run_saving_test, tiny_vit
from keras_vit.architecture import params
from keras_vit.architecture import variants as configs
from keras_vit.models import vit as models

# the paper's counts with 1000 classes (DEVELOPERS.md)
PAPER_COUNTS = {
    "Ti/16": 5_717_416,
    "S/16": 22_050_664,
    "B/16": 86_567_656,
    "B/32": 88_224_232,
    "L/16": 304_326_632,
    "L/32": 306_535_400,
    "H/14": 632_045_800,
}


@pytest.mark.parametrize("variant", ["Ti/16", "S/16", "S/32", "B/16", "B/32"])
def test_builder_parameter_count_and_shape(variant):
    model = models.BUILDERS[variant]()
    expected = params.count_params(**configs.decode_variant(variant))
    assert model.count_params() == expected
    if variant in PAPER_COUNTS:
        assert model.count_params() == PAPER_COUNTS[variant]
    assert model.output_shape == (None, 1000)
    assert model.input_shape == (None, 224, 224, 3)


@pytest.mark.parametrize("variant", ["L/16", "L/32", "H/14"])
def test_large_counts_without_allocating(variant):
    assert params.count_params(**configs.decode_variant(variant)) == PAPER_COUNTS[variant]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["L/16", "L/32", "H/14"])
def test_large_builders_for_real(variant):
    assert models.BUILDERS[variant]().count_params() == PAPER_COUNTS[variant]


@pytest.mark.parametrize("variant", list(models.BUILDERS))
def test_every_builder_runs_small(variant):
    """Each builder's own architecture at a small image size (patch grid 2x2)."""
    patch = configs.decode_variant(variant)["patch_size"]
    if variant[0] in "LH":
        pytest.skip("large widths are covered by the count test; built for real in test-slow")
    model = models.BUILDERS[variant](num_classes=7, image_size=2 * patch)
    out = np.asarray(model(images(2, 2 * patch)))
    assert out.shape == (2, 7) and np.all(np.isfinite(out))
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    "variant",
    # each takes 18 to 60 s of tracing and stepping at real depth, so all are in test-slow; the fast suite's fit
    # steps (test_tiny_fit_step_every_weight_gets_gradient, the hybrid's) run the same builders' graph and code
    [pytest.param(v, marks=pytest.mark.slow) for v in ("Ti/16", "S/32", "S/16", "B/16", "B/32", "L/32")],
)
def test_every_builder_fit_step(variant):
    """One fit step of each builder's real width and depth (small image), every weight gets a gradient."""
    patch = configs.decode_variant(variant)["patch_size"]
    model = models.BUILDERS[variant](num_classes=7, image_size=2 * patch)
    run_fit_step_test(model, images(2, 2 * patch), 7)


def test_tiny_fit_step_every_weight_gets_gradient():
    model = tiny_vit(classifier_activation="softmax", representation_size=16, dropout=0.1, drop_path_rate=0.1)
    run_fit_step_test(model, images(4), 5)


def test_gap_model_has_no_class_token_and_trains():
    model = tiny_vit(pooling="gap")
    assert not model.get_layer("patch_encoder").class_token
    run_fit_step_test(model, images(4), 5)


def test_saving_round_trip_safe_mode(tmp_path):
    model = tiny_vit(representation_size=16)
    for v in model.weights:  # a non-trivial head so the comparison means something
        v.assign(np.random.default_rng(0).normal(0, 0.2, v.shape))
    loaded = run_saving_test(model, images(2), tmp_path)
    assert [l.name for l in loaded.layers] == [l.name for l in model.layers]


_LOAD_WITH_KERAS = """
import json, sys
import numpy as np
{imports}
model = keras.saving.load_model(sys.argv[1] + "/model.keras")
print(json.dumps(dict(cls=type(model).__name__, outputs=np.asarray(model(np.load(sys.argv[1] + "/x.npy"))).tolist())))
"""


@pytest.mark.parametrize("imports", [
    "import keras_vit; assert 'keras' not in sys.modules; import keras",  # registered right after `import keras`
    pytest.param("import keras, keras_vit", marks=pytest.mark.slow),  # registered at `import keras_vit`
])
def test_keras_load_model_finds_the_classes_after_import_keras_vit(tmp_path, imports):
    """Plain keras.saving.load_model, in a fresh process, right after `import keras_vit` (before or after keras).

    Each starts TensorFlow again; keras first (the order of sorted imports) is the slow-marked one.
    """
    import json
    import os
    import subprocess
    import sys

    model, x = tiny_vit(), images(2)
    model.save(tmp_path / "model.keras")
    np.save(tmp_path / "x.npy", x)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-c", _LOAD_WITH_KERAS.format(imports=imports), str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["cls"] == "VisionTransformer"
    # the same weights and inputs on the same CPU, in another process
    np.testing.assert_allclose(np.asarray(result["outputs"]), np.asarray(model(x)), rtol=1e-5, atol=1e-6)


_SECOND_IMPORT = """
import sys
import keras_vit
keras_vit.count_params(hidden_size=32, num_layers=1, mlp_dim=64, num_heads=4, patch_size=8)  # imports keras, not the model
config = keras_vit.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)
from keras_vit.architecture import model
assert model.ViTConfig is keras_vit.ViTConfig is sys.modules["keras_vit.architecture.config"].ViTConfig
assert sys.modules["keras_vit.architecture.config"].__spec__.origin.endswith("config.py")
print(keras_vit.build_model(config).vit_config.grid)
"""


def test_a_module_the_keras_registration_imports_is_not_imported_twice():
    """``keras_vit.count_params`` (which imports Keras) then ``keras_vit.ViTConfig``: the registration that runs at the
    first import after Keras imported ``keras_vit.architecture.config`` inside that very import, which then executed
    the module a second time: two ``ViTConfig`` classes, and ``build_model(config)`` raised ``TypeError: A ViTConfig is
    read from a dict. Received: ViTConfig`` (docs/models-and-weights.md, in that order)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", _SECOND_IMPORT], env=dict(os.environ, PYTHONPATH=root),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "(4, 4)"


def test_non_square_images_and_features():
    model = tiny_vit(image_size=(32, 48), include_top=False, pooling=None)
    assert model.output_shape == (None, 4 * 6 + 1, TINY["hidden_size"])
    pooled = tiny_vit(image_size=(32, 48), include_top=False)
    assert pooled.output_shape == (None, TINY["hidden_size"])
    assert np.asarray(pooled(images(1, (32, 48)))).shape == (1, TINY["hidden_size"])


def test_stable_layer_names():
    model = tiny_vit()
    names = [layer.name for layer in model.layers]
    assert names == [
        "images", "preprocessing", "patches", "patch_encoder",
        "transformer_block_0", "transformer_block_1", "encoder_norm", "pool", "head", "predictions",
    ]


def test_preprocessing_scales_to_minus_one_one():
    with_pre = tiny_vit(classifier_activation=None)
    without = tiny_vit(classifier_activation=None, include_preprocessing=False)
    without.set_weights(with_pre.get_weights())
    x = images(2)
    np.testing.assert_allclose(np.asarray(with_pre(x)), np.asarray(without(x / 127.5 - 1)), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image_size=225), r"Received: image_size=225, patch_size=16"),
        (dict(image_size=(224, 200)), r"image_size=\(224, 200\), patch_size=16"),
        (dict(pooling="mean"), r"pooling='mean'"),  # 'max' is keras.applications' max pooling
        (dict(num_classes=0), r"num_classes=0"),
        (dict(weights="no/such/file.npz"), r"no such file"),
        (dict(classifier_activation="nope"), r"nope"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.ViTB16(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_layers=0), r"`num_layers` must be a positive int\. Received: num_layers=0"),
        (dict(num_layers=-2), r"Received: num_layers=-2"),
        (dict(num_heads=0), r"Received: num_heads=0"),
        (dict(mlp_dim=0), r"Received: mlp_dim=0"),
        (dict(hidden_size=30), r"hidden_size=30, num_heads=4"),
        (dict(image_size="64"), r"Received: image_size='64'"),  # int("64") would have passed, tuple("64") is (6, 4)
        (dict(image_size=32.0), r"Received: image_size=32\.0"),
        (dict(image_size=(32, 32, 3)), r"Received: image_size=\(32, 32, 3\)"),
        (dict(patch_size=0), r"`patch_size` must be a positive int.*Received: patch_size=0"),
        (dict(patch_size=(8, 0)), r"Received: patch_size=\(8, 0\)"),
    ],
)
def test_bad_architecture_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny_vit(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_layers=0), r"Received: num_layers=0"),
        (dict(image_size="28"), r"Received: image_size='28'"),
        (dict(patch_size=0), r"Received: patch_size=0"),
        (dict(stem_channels=(16, 0)), r"Received: stem_channels=\(16, 0\)"),
    ],
)
def test_conv_stem_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.conv_stem_vit(**kwargs)


def test_long_argument_lists_are_keyword_only():
    """A swapped positional rate or width cannot pass silently: past the first arguments, keywords only."""
    import inspect

    from keras_vit.models import hybrid, small

    def positional(function):
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]

    from keras_vit.architecture import graph
    from keras_vit.models.build import build_model, make_builder

    assert positional(build_model) == ["config"] and positional(make_builder) == ["builder_name"]
    for function in (graph.stem, graph.embed, graph.encoder, graph.head):
        assert positional(function) == ["x", "config"]
    assert positional(keras_vit.ViT) == ["image_size", "patch_size"]
    assert positional(hybrid.HybridViT) == ["block_units", "width"]
    assert positional(small.conv_stem_vit) == ["image_size", "stem_channels"]
    assert positional(keras_vit.ViTB16) == positional(keras_vit.R50ViTB16) == ["num_classes", "image_size"]
    with pytest.raises(TypeError):
        keras_vit.ViT(32, 8, 32, 2, 4, 64)


def test_builders_come_from_the_variant_registry():
    from keras_vit.models import hybrid

    assert list(models.BUILDERS) == list(configs.VIT_VARIANTS)
    assert list(hybrid.HYBRID_BUILDERS) == list(configs.HYBRID_VARIANTS)
    for variant, builder in {**models.BUILDERS, **hybrid.HYBRID_BUILDERS}.items():
        assert builder.__name__ == configs.builder_name(variant)
        assert getattr(keras_vit, builder.__name__) is builder  # the public name is the registry's builder
    assert keras_vit.ViTB16.__name__ == "ViTB16" and keras_vit.R26ViTS32.__name__ == "R26ViTS32"
    model = models.BUILDERS["S/32"](num_classes=3, image_size=64)
    assert model.name == "vit_s32"
    config = configs.decode_variant("S/32")
    assert model.get_layer("patch_encoder").hidden_size == config["hidden_size"]
    assert len([l for l in model.layers if isinstance(l, keras_vit.TransformerBlock)]) == config["num_layers"]


def test_decode_hybrid_variant():
    config = configs.decode_hybrid_variant("R50+L/32", num_layers=2)
    assert config == dict(
        block_units=(3, 4, 6, 3), width=1, patch_size=1, hidden_size=1024, num_layers=2, mlp_dim=4096, num_heads=16
    )
    with pytest.raises(ValueError, match=r"variant='R50\+X/16'"):
        configs.decode_hybrid_variant("R50+X/16")
    with pytest.raises(ValueError, match=r"Unknown override\(s\) \['depth'\]"):
        configs.decode_hybrid_variant("R50+B/16", depth=3)


def test_decode_variant():
    assert keras_vit.decode_variant("L/32") == dict(
        hidden_size=1024, num_layers=24, mlp_dim=4096, num_heads=16, patch_size=32
    )
    assert keras_vit.decode_variant("B/16", num_layers=6)["num_layers"] == 6
    with pytest.raises(ValueError, match="variant='X/16'"):
        keras_vit.decode_variant("X/16")


def _quantize(model):
    with warnings.catch_warnings():  # Keras warns once per layer kind that has no int8 form (LayerNorm, ...)
        warnings.simplefilter("ignore", UserWarning)
        model.quantize("int8")
    return model


def _assert_close_to_float(out, expected):
    # int8 weights with per-channel scales: a few % of the float model's largest logit
    assert np.abs(out - expected).max() < 0.1 * np.abs(expected).max()


def _float_model_with_a_random_head():
    model = tiny_vit(classifier_activation=None, drop_path_rate=0.1, dropout=0.1)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32") * 0.1)
    return model


def test_keras_int8_quantization_keeps_the_outputs():
    # model.quantize("int8") stores int8 kernels with scales; SelfAttention then calls the quantized
    # EinsumDense layers (its fused path read the raw int8 kernels: outputs were unrelated to the float model's)
    model = tiny_vit(classifier_activation=None)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32") * 0.1)
    x = images(4)
    expected = np.asarray(model(x))
    model.quantize("int8")
    assert model.get_layer("transformer_block_0").attention.query_dense.quantization_mode == "int8"
    out = np.asarray(model(x))
    assert np.abs(out - expected).max() < 0.1 * np.abs(expected).max()


def test_int8_quantization_of_a_model_never_called():
    # straight from the builder: every sub-layer must be built (it failed on the blocks' stochastic depth)
    model = _float_model_with_a_random_head()
    reference = tiny_vit(classifier_activation=None, drop_path_rate=0.1, dropout=0.1)
    reference.set_weights(model.get_weights())
    _quantize(model)
    attention = model.get_layer("transformer_block_1").attention
    assert attention.query_dense.kernel.dtype == "int8" and model.get_layer("head").quantization_mode == "int8"
    x = images(4)
    _assert_close_to_float(np.asarray(model(x)), np.asarray(reference(x)))


def test_int8_quantization_of_a_model_loaded_from_keras_file(tmp_path):
    model = _float_model_with_a_random_head()
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = _quantize(keras_vit.load_model(path))
    assert loaded.get_layer("transformer_block_0").attention.output_dense.quantization_mode == "int8"
    x = images(4)
    _assert_close_to_float(np.asarray(loaded(x)), np.asarray(model(x)))


def test_input_tensor_is_the_models_input_and_is_checked_before_building():
    """keras.applications' input_tensor: a channel count other than 3 used to build a model that predicted uniform
    scores, another size to fail inside the patch encoder, naming neither input_tensor nor image_size."""
    tensor = keras.Input((32, 48, 3))
    model = keras_vit.ViT(**{**TINY, "image_size": (32, 48)}, num_classes=3, input_tensor=tensor)
    assert model.inputs[0] is tensor and model(images(1, (32, 48))).shape == (1, 3)
    with pytest.raises(ValueError, match=r"must be a batch of RGB images, \(batch, height, width, 3\)\. "
                                         r"Received: input_tensor of shape \(None, 32, 32, 1\)"):
        keras_vit.ViT(**TINY, num_classes=3, input_tensor=keras.Input((32, 32, 1)))
    with pytest.raises(ValueError, match=r"holds 64x64 images; the model is built for image_size=\(32, 32\): "
                                         r"pass image_size=\(64, 64\)"):
        keras_vit.ViT(**TINY, num_classes=3, input_tensor=keras.Input((64, 64, 3)))
    assert keras_vit.ViT(**{**TINY, "image_size": None}, input_tensor=keras.Input((None, None, 3))).input_shape == (
        None, None, None, 3)
