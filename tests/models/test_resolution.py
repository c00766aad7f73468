"""Any resolution: image_size=None models, resize_model / keras-vit resize, FlexiViT patch-size resampling.

Tolerances: a dynamic model at its native size adds the stored position embeddings
(the interpolation matrix is the identity bit for bit), so it equals the static model to
float32 rounding of the same ops (1e-6); at another size it resamples them in float32 in
the graph where the loader does it in float64, a difference of ~1e-7 per embedding that
the encoder keeps well under 1e-5.
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

import keras
import keras_vit
from helpers import images, run_layer_test
from keras_vit import cli
from keras_vit.layers import resampling
from keras_vit.models.resize import native_image_size
from keras_vit.models.small import conv_stem_vit
from keras_vit.weights import resize_position_embedding

TINY = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5, classifier_activation=None)
HYBRID = dict(block_units=(1, 1), width=0.5, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5,
              classifier_activation=None)
CONV = dict(stem_channels=(8, 16), patch_size=2, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_classes=5,
            classifier_activation=None)

# kind -> (builder, its tiny config, native size, another valid size)
KINDS = {
    "vit": (keras_vit.ViT, TINY, 32, (48, 64)),
    "gap": (keras_vit.ViT, dict(TINY, pooling="gap"), (32, 24), (40, 56)),
    # timm's SBB so150m: the registers' positions kept, only the patches' resampled
    "register_positions": (keras_vit.ViT, dict(TINY, pooling="gap", num_register_tokens=2, register_positions=True),
                           (32, 24), (40, 56)),
    "hybrid": (keras_vit.HybridViT, HYBRID, 64, (96, 48)),
    "conv_stem": (conv_stem_vit, CONV, 28, (56, 40)),
}


def _build(kind, image_size, **extra):
    builder, config, native, _ = KINDS[kind]
    if image_size is None:
        extra.setdefault("native_image_size", native)
    return builder(image_size=image_size, **config, **extra)


def _randomize_head(model, seed=0):
    """The zero-initialised head (and class token) made random, so the logits depend on every token.

    The head's scale is LeCun's (1 / sqrt(width)): logits of order 1, as a trained head gives, so that
    an absolute tolerance on them means what it says for every width.
    """
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        for variable in layer.weights:
            if layer.name == "head":
                width = model.get_layer("head").kernel.shape[0]
                variable.assign(rng.normal(0, 1 / np.sqrt(width), variable.shape).astype("float32"))
            elif variable.name == "class_token":
                variable.assign(rng.normal(0, 0.02, variable.shape).astype("float32"))
    return model


# --------------------------------------------------------------------------- one interpolation, two places


@pytest.mark.parametrize("old, new", [((4, 4), (4, 4)), ((4, 4), (7, 5)), ((6, 3), (2, 4)), ((3, 5), (1, 1))])
def test_graph_resample_equals_the_loaders(old, new):
    grid = np.random.default_rng(0).normal(size=old + (8,))
    numpy = resampling.resize_grid(grid, new, xp=np)
    graph = np.asarray(resampling.resize_grid(keras.ops.convert_to_tensor(grid.astype("float32")), new))
    np.testing.assert_allclose(graph, numpy, atol=1e-6)  # float32 in the graph, float64 in the loader
    if old == new:
        np.testing.assert_array_equal(graph, grid.astype("float32"))  # the identity, exactly
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    if min(new) > 1:  # the original code's zoom(order=1); zoom to one sample uses another convention
        expected = scipy_ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
        np.testing.assert_allclose(numpy, expected, atol=1e-12)


def test_graph_resample_with_sizes_known_at_run_time():
    grid = np.random.default_rng(1).normal(size=(4, 4, 3)).astype("float32")
    fn = tf.function(lambda rows, cols: resampling.resize_grid(tf.constant(grid), (rows, cols)))
    out = fn(tf.constant(6), tf.constant(9)).numpy()
    np.testing.assert_allclose(out, resampling.resize_grid(grid.astype("float64"), (6, 9), xp=np), atol=1e-6)


# --------------------------------------------------------------------------- layers


def test_layers_round_trip_with_their_new_arguments():
    x = images(2, (24, 40))
    patches = keras_vit.Patches((4, 8), flatten=False)
    assert tuple(run_layer_test(patches, x).shape) == (2, 6, 5, 96)
    encoder = keras_vit.PatchEncoder(num_patches=12, hidden_size=16, grid_size=(3, 4))
    out = run_layer_test(encoder, np.asarray(patches(x)))
    assert tuple(out.shape) == (2, 31, 16) and encoder.get_config()["grid_size"] == (3, 4)
    posemb = np.asarray(encoder.position_embedding)
    np.testing.assert_allclose(
        np.asarray(encoder.position_embedding_for((6, 5))), resize_position_embedding(posemb, (6, 5), (3, 4)), atol=1e-6
    )


def test_patch_encoder_refuses_a_grid_of_another_size():
    with pytest.raises(ValueError, match=r"grid_size=\(3, 5\), num_patches=12"):
        keras_vit.PatchEncoder(num_patches=12, hidden_size=8, grid_size=(3, 5))
    with pytest.raises(ValueError, match=r"num_patches=12 is not a square"):
        keras_vit.PatchEncoder(num_patches=12, hidden_size=8)(np.zeros((1, 3, 4, 6), "float32"))


def test_size_the_patch_size_does_not_divide_names_both():
    model = _build("vit", None)
    with pytest.raises(ValueError, match=r"image_size=\(36, 32\), patch_size=\(8, 8\)"):
        model(np.zeros((1, 36, 32, 3), "float32"))
    fn = tf.function(lambda x: model(x)).get_concrete_function(tf.TensorSpec((None, None, None, 3), tf.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"divisible by the patch size \(8, 8\)[^[]*\[1 36 32 3\]"):
        fn(tf.zeros((1, 36, 32, 3)))


# --------------------------------------------------------------------------- dynamic == static


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_dynamic_equals_static_at_native_and_at_another_size(kind, tmp_path):
    _, _, native, other = KINDS[kind]
    static = _randomize_head(_build(kind, native))
    dynamic = _build(kind, None)
    dynamic.set_weights(static.get_weights())
    assert dynamic.input_shape == (None, None, None, 3)
    assert native_image_size(dynamic) == ((native, native) if isinstance(native, int) else native)
    # the dynamic model through predict (a traced graph, whose height and width Keras relaxes to None when the
    # second size comes), the models of one size called as they are (eagerly: no trace of their own)
    x = images(2, native)
    # the same weights in a traced and an eager graph: float32 round-off of logits of order 1, whose size depends on
    # the kernels' blocking (6.8e-7 with oneDNN, 2.3e-7 without, AMD EPYC AVX-512); the bar of the other size below
    np.testing.assert_allclose(dynamic.predict(x, verbose=0), np.asarray(static(x)), atol=1e-5)

    # at another size: a static model built there, loaded from the same weights (.keras as the source)
    path = str(tmp_path / "dynamic.keras")
    keras_vit.save_model(dynamic, path)
    if kind == "conv_stem":  # the builders take no weights; the loader does
        there = _build(kind, other)
        keras_vit.load_checkpoint(there, path)
    else:
        there = _build(kind, other, weights=path)
    x = images(2, other, seed=1)
    at_other, expected = dynamic.predict(x, verbose=0), np.asarray(there(x))
    np.testing.assert_allclose(at_other, expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(keras_vit.resize_model(static, other)(x)), expected, atol=1e-6)
    loaded = keras_vit.load_model(path)  # the dynamic model round-trips through .keras
    np.testing.assert_allclose(np.asarray(loaded(x)), at_other, atol=1e-5)  # eager against predict's trace, as above


@pytest.mark.slow
def test_vit_b16_dynamic_equals_static():
    static = _randomize_head(keras_vit.ViTB16(image_size=224, num_classes=10, classifier_activation=None))
    dynamic = keras_vit.ViTB16(image_size=None, num_classes=10, classifier_activation=None)
    dynamic.set_weights(static.get_weights())
    x = images(1, 224)
    np.testing.assert_allclose(dynamic.predict(x, verbose=0), static.predict(x, verbose=0), atol=1e-6)
    x = images(1, (384, 320), seed=1)
    there = keras_vit.resize_model(static, (384, 320))
    np.testing.assert_allclose(dynamic.predict(x, verbose=0), there.predict(x, verbose=0), atol=1e-5)


# --------------------------------------------------------------------------- resize_model


def test_resize_model_copies_every_weight_and_resamples_the_position_embeddings():
    model = _randomize_head(_build("vit", 32))
    resized = keras_vit.resize_model(model, (48, 64))
    assert resized.input_shape == (None, 48, 64, 3) and resized.name == model.name
    for old, new in zip(model.weights, resized.weights):
        assert old.path == new.path
        if old.name == "position_embedding":
            np.testing.assert_allclose(np.asarray(new), resize_position_embedding(np.asarray(old), (6, 8)), atol=1e-7)
        else:
            np.testing.assert_array_equal(np.asarray(new), np.asarray(old))
    assert keras_vit.resize_model(resized, 32).get_layer("patch_encoder").grid_size == (4, 4)
    dynamic = keras_vit.resize_model(resized, None)
    assert dynamic.get_layer("patch_encoder").grid_size == (6, 8) and native_image_size(dynamic) == (48, 64)
    x = images(1, (48, 64))
    # predict's trace against an eager call: the kernels' round-off (see test_dynamic_equals_static_...)
    np.testing.assert_allclose(dynamic.predict(x, verbose=0), np.asarray(resized(x)), atol=1e-5)


def test_any_size_from_a_model_that_crops_and_from_an_older_conv_stem_file(tmp_path):
    """A .keras of crop_remainder=True (a timm so400m/14 at 384 converted) crashed from_pretrained(image_size=None)
    and resize_model(..., None) ('crop_remainder=True ... needs an image_size'); resize_model of a conv-stem file saved
    before stem_input_check existed crashed looking the new layer up."""
    crops = keras_vit.ViT(image_size=36, crop_remainder=True, **TINY)
    path = str(tmp_path / "crop36.keras")
    keras_vit.save_model(crops, path)
    x = images(1, 36)
    for model in (keras_vit.from_pretrained(path, image_size=None), keras_vit.resize_model(keras_vit.load_model(path), None)):
        assert model.vit_config.native_image_size == (32, 32) and not model.vit_config.crop_remainder
        # the same weights and the same whole patches: eager calls of two graphs, the kernels' round-off
        np.testing.assert_allclose(np.asarray(model(x[:, :32, :32])), np.asarray(crops(x)), atol=1e-6)
    old = keras_vit.load_model(os.path.join(os.path.dirname(__file__), "..", "fixtures", "v0.1.0", "conv_stem.keras"))
    assert keras_vit.resize_model(old, 56).input_shape == (None, 56, 56, 3)


def test_resize_model_refuses_an_indivisible_size():
    with pytest.raises(ValueError, match=r"a 12x12 feature map\)\. Received: image_size=\(96, 96\), patch_size=\(5, 5\)"):
        keras_vit.resize_model(_build("hybrid", 64), 96, patch_size=5)
    with pytest.raises(ValueError, match=r"image_size=\(36, 36\), patch_size=\(8, 8\)"):
        keras_vit.resize_model(_build("vit", 32), 36)


def test_resize_command_keeps_the_class_names(tmp_path, capsys):
    source, target = str(tmp_path / "m.keras"), str(tmp_path / "m-48.keras")
    model = _randomize_head(_build("vit", 32))
    keras_vit.save_model(model, source, metadata={"class_names": list("abcde"), "image_size": 32})
    assert cli.main(["resize", source, "--image-size", "48", "--output", target]) == 0
    assert "32x32, patch 8x8" in capsys.readouterr().out
    from keras_vit.saving import read_metadata

    assert read_metadata(target) == {"class_names": list("abcde"), "image_size": 48}
    x = images(1, 48)
    expected = np.asarray(keras_vit.resize_model(model, 48)(x))
    np.testing.assert_allclose(np.asarray(keras_vit.load_model(target)(x)), expected, atol=1e-6)
    assert cli.main(["resize", source, "--image-size", "none", "--output", target, "--overwrite"]) == 0
    assert keras_vit.load_model(target).input_shape == (None, None, None, 3)
    assert cli.main(["resize", source, "--image-size", "33x48", "--output", target, "--overwrite"]) == 2  # 33: not whole patches
    assert cli.main(["resize", source, "--patch-size", "4", "--output", target, "--overwrite"]) == 0  # the size kept
    assert keras_vit.load_model(target).get_layer("patch_encoder").grid_size == (8, 8)
    assert cli.main(["resize", source, "--output", target, "--overwrite"]) == 2  # nothing to change


# --------------------------------------------------------------------------- FlexiViT patch-size resampling


@pytest.mark.parametrize("old, new", [((8, 8), (16, 16)), ((4, 6), (7, 9)), ((16, 16), (8, 8)), ((5, 5), (3, 8))])
def test_resize_matrix_is_tf_image_resize(old, new):
    basis = np.eye(old[0] * old[1]).reshape(-1, old[0], old[1], 1)
    resized = tf.image.resize(basis, new, method="bilinear").numpy().reshape(len(basis), -1)
    np.testing.assert_allclose(resampling.resize_matrix(new, old), resized.T, atol=1e-6)  # TF computes in float32


@pytest.mark.parametrize("old, new", [((8, 8), (16, 16)), ((4, 4), (6, 10)), ((2, 3), (2, 3))])
def test_resampled_kernel_on_the_resized_patch_gives_the_same_token(old, new):
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=old + (3, 5))
    resized_kernel = resampling.resample_patch_embedding(kernel, new)
    patch = rng.normal(size=(4,) + old + (3,))
    resized_patch = tf.image.resize(patch, new, method="bilinear").numpy()  # the resize, by another implementation
    tokens = np.einsum("bhwc,hwcd->bd", patch, kernel)
    np.testing.assert_allclose(np.einsum("bhwc,hwcd->bd", resized_patch, resized_kernel), tokens, atol=1e-5)


def test_shrinking_the_patch_is_the_least_squares_kernel():
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(8, 8, 1, 1))
    small = resampling.resample_patch_embedding(kernel, (4, 4))
    matrix = resampling.resize_matrix((4, 4), (8, 8))
    solution, *_ = np.linalg.lstsq(matrix.T, kernel.reshape(-1), rcond=None)
    np.testing.assert_allclose(small.reshape(-1), solution, atol=1e-10)


def test_model_at_twice_the_patch_size_classifies_patchwise_upsampled_images_alike():
    model = _randomize_head(_build("vit", 32))
    bigger = keras_vit.resize_model(model, 64, patch_size=16)  # the same 4x4 grid
    x = images(2, 32)
    patches = x.reshape(2, 4, 8, 4, 8, 3).transpose(0, 1, 3, 2, 4, 5).reshape(-1, 8, 8, 3)
    up = tf.image.resize(patches, (16, 16), method="bilinear").numpy()
    x2 = up.reshape(2, 4, 4, 16, 16, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 64, 64, 3)
    np.testing.assert_allclose(np.asarray(bigger(x2)), np.asarray(model(x)), atol=1e-4)


def test_loader_resamples_a_checkpoint_of_another_patch_size(tmp_path):
    source = _build("vit", 32)
    path = str(tmp_path / "p8.keras")
    keras_vit.save_model(source, path)
    model = keras_vit.ViT(image_size=32, **dict(TINY, patch_size=4), weights=path)
    assert model.load_report.resized["embedding/kernel"] == ((8, 8, 3, 32), (4, 4, 3, 32))
    expected = resampling.resample_patch_embedding(np.asarray(source.get_layer("patch_encoder").projection.kernel).reshape(8, 8, 3, 32), (4, 4))
    np.testing.assert_allclose(np.asarray(model.get_layer("patch_encoder").projection.kernel), expected.reshape(48, 32), atol=1e-6)


def test_variant_builder_takes_another_patch_size(tmp_path):
    from helpers import save_npz, vit_checkpoint

    ti16 = keras_vit.decode_variant("Ti/16")
    arrays = vit_checkpoint(patch_size=16, grid=(2, 2), num_classes=3,
                            **{k: ti16[k] for k in ("hidden_size", "num_layers", "num_heads", "mlp_dim")})
    model = keras_vit.ViTTi16(num_classes=3, image_size=32, patch_size=8, weights=save_npz(tmp_path / "Ti16.npz", arrays))
    assert model.get_layer("patches").patch_size_pair == (8, 8) and model.name == "vit_ti16"
    assert model.load_report.resized["embedding/kernel"] == ((16, 16, 3, 192), (8, 8, 3, 192))
    assert model.load_report.resized["Transformer/posembed_input/pos_embedding"] == ((1, 5, 192), (1, 17, 192))


# --------------------------------------------------------------------------- exports and inspection


def _one_block_of_any_size():
    """The exports' dynamic model: one Transformer block (the exporters trace the graph several times; the
    block count is not what they are tested for)."""
    return _randomize_head(keras_vit.ViT(image_size=None, native_image_size=32, **dict(TINY, num_layers=1)))


def test_dynamic_saved_model_serves_two_sizes_in_one_signature(tmp_path):
    model = _one_block_of_any_size()
    report = keras_vit.export_model(model, "saved_model", str(tmp_path), eval_data=images(4, 32), warmup=False)
    loaded = tf.saved_model.load(report.path)
    serve = loaded.signatures["serving_default"]
    assert serve.structured_input_signature[1]["images"].shape.as_list() == [None, None, None, 3]
    probabilities = keras.activations.softmax
    for size in (32, (48, 64)):
        x = images(2, size, seed=2)
        expected = np.asarray(probabilities(model(x)))
        np.testing.assert_allclose(serve(images=tf.constant(x))["probabilities"].numpy(), expected, atol=1e-5)
    png = tf.io.encode_png(tf.cast(images(1, (20, 30))[0], tf.uint8))
    out = loaded.signatures["serving_bytes"](image_bytes=tf.stack([png]))["probabilities"]
    assert out.shape == (1, 5)  # resized to the native 32x32


def test_dynamic_model_exports_to_tflite_at_the_size_given(tmp_path):
    model = _one_block_of_any_size()
    report = keras_vit.export_model(model, "tflite", str(tmp_path / "m.tflite"), eval_data=images(4, 48), image_size=48)
    assert report.passed
    from keras_vit.inference import tflite_files

    interpreter = tflite_files.tflite_interpreter(str(tmp_path / "m.tflite"))
    assert tuple(interpreter.get_input_details()[0]["shape"]) == (1, 48, 48, 3)


def test_inspection_at_any_size():
    model = _randomize_head(_build("vit", None))
    for size in (32, (48, 64)):
        h, w = (size, size) if isinstance(size, int) else size
        x = images(1, size)
        weights = keras_vit.attention_weights(model, x[0])
        tokens = (h // 8) * (w // 8) + 1
        assert weights.shape == (2, 4, tokens, tokens)
        static = keras_vit.resize_model(model, size)
        np.testing.assert_allclose(weights, keras_vit.attention_weights(static, x[0]), atol=1e-5)
        assert keras_vit.rollout_map(model, x[0], weights=weights).shape == (h, w)
        assert keras_vit.mean_attention_distance(model, x).shape == (2, 4)
        features = keras_vit.forward_features(model, x, blocks=[-1])
        assert features["tokens"].shape == (1, tokens, 32)
    assert keras_vit.position_embedding_similarity(model).shape == (4, 4, 4, 4)


def test_train_weights_from_a_keras_file_of_another_size(tmp_path):
    from keras_vit.train import recipes

    trained = _randomize_head(recipes.build_model("mnist", 10))
    path = str(tmp_path / "mnist.keras")
    keras_vit.save_model(trained, path)
    model = recipes.build_model("mnist", 3, image_size=56, weights=path)  # conv stem, new head, 14x14 grid
    assert set(model.load_report.skipped) == {"head/kernel", "head/bias"}
    assert model.get_layer("patch_encoder").position_embedding.shape == (1, 14 * 14 + 1, 64)
    np.testing.assert_array_equal(np.asarray(model.get_layer("stem_conv_1").kernel), np.asarray(trained.get_layer("stem_conv_1").kernel))
    with pytest.raises(ValueError, match="conv stem"):
        npz = str(tmp_path / "c.npz")
        np.savez(npz, cls=np.zeros((1, 1, 64)))
        recipes.build_model("mnist", 3, weights=npz)


def test_docs_examples_run(capsys):
    page = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "resolution.md")
    with open(page, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        exec(block, {})
    out = capsys.readouterr().out
    assert "(None, None, None, 3)" in out and "(2, 3)" in out and "(16, 16)" in out


def test_a_naflex_model_under_another_patch_size_keeps_the_pixels_of_its_budget(tmp_path):
    """resize --patch-size of a NaFlex model kept max_patches: 16 patches of 8x8 became 16 of 4x4, and every image
    was cut at half the resolution it was trained at."""
    from keras_vit.inference.naflex_input import target_size
    from keras_vit.models.resize import resize_model

    model = keras_vit.ViT(image_size=32, input_mode="naflex", max_patches=16, **TINY)
    finer = resize_model(model, patch_size=4)
    assert finer.vit_config.max_patches == 64 and finer.vit_config.patch_size == (4, 4)
    np.testing.assert_array_equal(np.asarray(target_size(64, 64, 4, 64)), np.asarray(target_size(64, 64, 8, 16)))
    for height, width in ((48, 96), (200, 30)):  # another aspect: under the same pixels, the grid rule's own rounding
        assert np.prod(np.asarray(target_size(height, width, 4, 64))) <= 16 * 8 * 8
    assert resize_model(model, patch_size=4, max_patches=16).vit_config.max_patches == 16  # said: kept
    assert resize_model(model, max_patches=None).vit_config.max_patches is None
    with pytest.raises(ValueError, match=r"max_patches is a NaFlex model's budget; model of 32x32, patch 8x8 has none"):
        resize_model(keras_vit.ViT(image_size=32, **TINY), max_patches=64)
    source, output = tmp_path / "nf.keras", tmp_path / "nf4.keras"
    keras_vit.save_model(model, str(source))
    assert cli.main(["resize", str(source), "--output", str(output), "--max-patches", "9"]) == 0
    assert keras_vit.load_model(str(output)).vit_config.max_patches == 9
