"""The resampling rules of keras_vit.layers.resampling against the frameworks they copy.

torch is not installed here: ``bicubic_torch``, ``bicubic_torch_antialias`` and ``bilinear_torch`` (and
``linear_aligned`` as torch's bilinear with ``align_corners=True``) are compared with the loops of
``reference_resampling.py``, transcribed from PyTorch's C++ (``UpSample.h``, ``cpu/UpSampleKernel.cpp``), and
the antialiased rule also with Pillow, whose ``ImagingResample`` torch's antialias follows (the other with
OpenCV's ``INTER_CUBIC`` where OpenCV is installed; it is not a dependency). The NumPy path runs
in float64 (1e-12 against the float64 loops); Pillow computes in double and stores float32 images between and
after its two passes (1e-5); the graph runs in float32 (1e-5).
"""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st

import keras
from keras_vit.layers.resampling import RESAMPLING_METHODS, interpolation_matrix, resize_grid
from reference_resampling import torch_bicubic, torch_bicubic_antialias, torch_bilinear, torch_bilinear_aligned

TORCH = {"bicubic_torch": torch_bicubic, "bicubic_torch_antialias": torch_bicubic_antialias, "bilinear_torch": torch_bilinear}
# without antialiasing, align_corners False and True (C-RADIO's position tables in timm's NaFlexVit)
BILINEAR = {"bilinear_torch": torch_bilinear, "linear_aligned": torch_bilinear_aligned}

# (old, new): down, up, the ViT-family resolutions (DINOv2 37 <-> 16, 14 -> 24), one sample either way, non-square
SIZES = [((37, 37), (16, 16)), ((16, 16), (37, 37)), ((14, 14), (24, 24)), ((7, 7), (3, 3)), ((1, 1), (4, 4)),
         ((4, 4), (1, 1)), ((5, 9), (11, 4)), ((16, 16), (24, 16)), ((3, 12), (7, 5))]


def random_grid(old, channels=3, seed=0):
    return np.random.default_rng(seed).normal(size=tuple(old) + (channels,))


def per_channel(reference, grid, new, **kwargs):
    return np.stack([reference(grid[..., c], new, **kwargs) for c in range(grid.shape[-1])], axis=-1)


def test_the_names():
    assert RESAMPLING_METHODS == ("linear_aligned", "bicubic_torch", "bicubic_torch_antialias", "bicubic_tf",
                                  "bilinear_torch_antialias", "bilinear_torch")


@pytest.mark.parametrize("method", RESAMPLING_METHODS)
@pytest.mark.parametrize("size", [1, 2, 7, 16, 37])
def test_the_same_size_is_the_identity_exactly(method, size):
    """torch copies the input at the same size (separable_upsample_generic_Nd_kernel_impl); so do the weights."""
    eye = np.eye(size)
    np.testing.assert_array_equal(interpolation_matrix(size, size, xp=np, dtype="float64", method=method), eye)
    np.testing.assert_array_equal(interpolation_matrix(size, size, xp=np, method=method), eye.astype("float32"))
    graph = tf.function(lambda n: interpolation_matrix(n, size, method=method),
                        input_signature=[tf.TensorSpec((), tf.int32)])
    np.testing.assert_array_equal(graph(tf.constant(size)).numpy(), eye.astype("float32"))


def test_linear_aligned_stays_the_default():
    grid = random_grid((4, 6))
    np.testing.assert_array_equal(resize_grid(grid, (7, 3), xp=np),
                                  resize_grid(grid, (7, 3), xp=np, method="linear_aligned"))
    np.testing.assert_array_equal(interpolation_matrix(5, 3, xp=np), interpolation_matrix(5, 3, xp=np, method="linear_aligned"))


@pytest.mark.parametrize("method", sorted(TORCH))
@pytest.mark.parametrize("old, new", SIZES)
def test_torch_methods_equal_the_loops_of_torch_source(method, old, new):
    grid = random_grid(old)
    expected = per_channel(TORCH[method], grid, new)
    np.testing.assert_allclose(resize_grid(grid, new, xp=np, method=method), expected, atol=1e-12)


@pytest.mark.parametrize("old, new", SIZES + [((128, 128), (6, 9)), ((128, 128), (11, 11))])
def test_linear_aligned_is_torchs_bilinear_with_align_corners(old, new):
    """C-RADIO v3-B / H's rule (F.interpolate(mode='bilinear', align_corners=True, antialias=False)): the same
    triangle at i * (o - 1) / (n - 1), downsampling the 128 x 128 table too."""
    grid = random_grid(old, channels=2)
    np.testing.assert_allclose(resize_grid(grid, new, xp=np, method="linear_aligned"),
                               per_channel(torch_bilinear_aligned, grid, new), atol=1e-12)


@pytest.mark.parametrize("method", sorted(BILINEAR))
@pytest.mark.parametrize("old, new", [((5, 9), (11, 4)), ((3, 12), (7, 5)), ((37, 16), (8, 29)), ((128, 128), (6, 11)),
                                      ((1, 7), (4, 1)), ((6, 6), (6, 6))])
def test_bilinear_without_antialias_per_token_in_the_graph(method, old, new):
    """NaFlex's per-token rows (keras.ops, float32, the new size a tensor known when the graph runs) make the 2-D table
    torch's F.interpolate(mode='bilinear', antialias=False) makes: odd, non-square, up and down (C-RADIO's 128 down)."""
    from keras_vit.layers.resampling import sample_weights

    grid = random_grid(old, channels=3, seed=6).astype("float32")

    @tf.function(input_signature=[tf.TensorSpec((), tf.int32)] * 2)
    def resample(rows, cols):  # every output pixel a token: its row and column weights, as NaFlexPatchEncoder
        y, x = tf.meshgrid(tf.range(rows), tf.range(cols), indexing="ij")
        w_rows = sample_weights(tf.reshape(y, (-1,)), rows, old[0], method=method)  # (tokens, old rows)
        w_cols = sample_weights(tf.reshape(x, (-1,)), cols, old[1], method=method)  # (tokens, old cols)
        return tf.einsum("tr,tc,rcd->td", w_rows, w_cols, tf.constant(grid))

    got = resample(tf.constant(new[0]), tf.constant(new[1])).numpy().reshape(new + (3,))
    expected = per_channel(BILINEAR[method], grid.astype("float64"), new)
    # float32's source coordinate, as torch's own (its spacing is 7.6e-6 near 127, C-RADIO's table): its error times
    # the step between two neighbours (up to ~4 here)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 if max(old) < 64 else 6e-5)
    assert method == "linear_aligned" or new == old or np.abs(
        expected - per_channel(torch_bilinear_aligned, grid.astype("float64"), new)).max() > 1e-2  # the two differ


@pytest.mark.parametrize("new", [(6, 11), (21, 21), (27, 9)])
def test_aligned_per_token_rounds_as_torch_does(new):
    """torch rounds the aligned source coordinate in float32, (o - 1) / (n - 1) first, then times i (opmath_t of a
    float32 tensor): 1e-5 from the exact coordinate on C-RADIO v3's 128 x 128 table. The graph's per-token rows round
    the same way, so they meet the float32 loops far closer than that."""
    from keras_vit.layers.resampling import sample_weights

    grid = random_grid((128, 128), channels=1, seed=7)[..., 0].astype("float32")
    y, x = np.meshgrid(np.arange(new[0]), np.arange(new[1]), indexing="ij")
    w_rows = sample_weights(tf.constant(y.reshape(-1)), tf.constant(new[0]), 128, method="linear_aligned")
    w_cols = sample_weights(tf.constant(x.reshape(-1)), tf.constant(new[1]), 128, method="linear_aligned")
    got = tf.einsum("tr,tc,rc->t", w_rows, w_cols, tf.constant(grid)).numpy().reshape(new)
    expected = torch_bilinear(grid.astype("float64"), new, align_corners=True, real_type=np.float32)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("old, new", SIZES)
def test_antialiased_bicubic_equals_pillow(old, new):
    pil_image = pytest.importorskip("PIL.Image")
    grid = random_grid(old, seed=1)
    pillow = np.stack([
        np.asarray(pil_image.fromarray(grid[..., c].astype(np.float32), mode="F").resize(
            (new[1], new[0]), pil_image.Resampling.BICUBIC))
        for c in range(grid.shape[-1])], axis=-1)
    np.testing.assert_allclose(resize_grid(grid, new, xp=np, method="bicubic_torch_antialias"), pillow, atol=1e-5)



@pytest.mark.parametrize("old, new", SIZES)
def test_bicubic_torch_equals_opencv_where_installed(old, new):
    """torch's antialias=False bicubic is OpenCV's INTER_CUBIC (UpSampleKernel.cpp: "-0.75 ... compatibility with
    Opencv"); OpenCV is not a dependency, so this runs only where it is installed (float32 there)."""
    cv2 = pytest.importorskip("cv2")
    grid = random_grid(old, seed=4)
    opencv = np.stack([cv2.resize(grid[..., c].astype(np.float32), (new[1], new[0]), interpolation=cv2.INTER_CUBIC)
                       for c in range(grid.shape[-1])], axis=-1)
    np.testing.assert_allclose(resize_grid(grid, new, xp=np, method="bicubic_torch"), opencv.reshape(new + (-1,)),
                               atol=1e-5)

def test_the_methods_differ_where_they_should():
    """Upsampling, the kernels differ (A = -0.75 against -0.5 and clamped taps against normalised rows)."""
    grid = random_grid((7, 7))
    out = {m: resize_grid(grid, (12, 12), xp=np, method=m) for m in RESAMPLING_METHODS}
    assert np.abs(out["bicubic_torch"] - out["bicubic_torch_antialias"]).max() > 1e-2
    assert np.abs(out["bicubic_torch"] - out["linear_aligned"]).max() > 1e-2


@pytest.mark.parametrize("method", sorted(TORCH))
@pytest.mark.parametrize("old, new", [(16, 24), (37, 16), (16, 37), (7, 12)])
def test_a_scale_factor_sets_the_source_step(method, old, new):
    """DINOv2's original code and older transformers call interpolate(scale_factor=(new + 0.1) / old): torch then
    samples at 1 / scale_factor, not old / new (compute_scales_value)."""
    factor = (new + 0.1) / old
    grid = random_grid((old, 5))
    expected = per_channel(TORCH[method], grid, (new, 5), scale_factor=(factor, None))
    got = resize_grid(grid, (new, 5), xp=np, method=method, scale_factor=(factor, None))
    np.testing.assert_allclose(got, expected, atol=1e-12)
    assert np.abs(got - resize_grid(grid, (new, 5), xp=np, method=method)).max() > 1e-4  # not the size's rule


@pytest.mark.parametrize("method", RESAMPLING_METHODS)
@pytest.mark.parametrize("old, new", [((4, 4), (6, 9)), ((37, 37), (16, 20)), ((3, 5), (1, 1))])
def test_graph_with_sizes_known_at_run_time_equals_numpy(method, old, new):
    grid = random_grid(old, channels=4, seed=2).astype("float32")
    fn = tf.function(lambda rows, cols: resize_grid(tf.constant(grid), (rows, cols), method=method),
                     input_signature=[tf.TensorSpec((), tf.int32)] * 2)
    out = fn(tf.constant(new[0]), tf.constant(new[1])).numpy()
    expected = resize_grid(grid.astype("float64"), new, xp=np, method=method)
    # float32 against float64: mostly the float32 rounding of the interpolation weights (measured up to 7.3e-6)
    np.testing.assert_allclose(out, expected, atol=3e-5)


@pytest.mark.parametrize("method", sorted(TORCH))
def test_graph_scale_factor_from_a_run_time_size(method):
    """DINOv2's (new + 0.1) / old computed in the graph from a size known only when it runs."""
    grid = random_grid((16, 16), seed=3).astype("float32")

    @tf.function(input_signature=[tf.TensorSpec((), tf.int32)] * 2)
    def fn(rows, cols):
        factors = tuple((keras.ops.cast(n, "float32") + 0.1) / 16.0 for n in (rows, cols))
        return resize_grid(tf.constant(grid), (rows, cols), method=method, scale_factor=factors)

    expected = resize_grid(grid.astype("float64"), (24, 11), xp=np, method=method, scale_factor=(24.1 / 16, 11.1 / 16))
    np.testing.assert_allclose(fn(tf.constant(24), tf.constant(11)).numpy(), expected, atol=3e-5)  # as above


@settings(max_examples=25, deadline=None, derandomize=True)
@given(old=st.integers(1, 40), new=st.integers(1, 40), method=st.sampled_from(sorted(TORCH)))
def test_any_sizes_equal_the_loops(old, new, method):
    grid = random_grid((old, 2), channels=1)
    expected = per_channel(TORCH[method], grid, (new, 2))
    np.testing.assert_allclose(resize_grid(grid, (new, 2), xp=np, method=method), expected, atol=1e-12)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(old=st.integers(1, 40), new=st.integers(1, 40), method=st.sampled_from(RESAMPLING_METHODS))
def test_every_row_sums_to_one(old, new, method):
    """A constant grid stays constant: what every rule promises, the clamped torch taps included."""
    rows = interpolation_matrix(new, old, xp=np, dtype="float64", method=method).sum(axis=1)
    np.testing.assert_allclose(rows, np.ones(new), atol=1e-12)


# --------------------------------------------------------------------------- bad input


def test_an_unknown_method_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"Unknown resampling method 'bicubic'; expected one of 'linear_aligned', "
                                         r"'bicubic_torch', 'bicubic_torch_antialias'"):
        resize_grid(random_grid((2, 2)), (3, 3), xp=np, method="bicubic")


def test_a_scale_factor_with_the_aligned_rule_is_refused():
    with pytest.raises(ValueError, match=r"scale_factor=1\.5 is given with method='linear_aligned'"):
        interpolation_matrix(3, 2, xp=np, scale_factor=1.5)


def test_a_scale_factor_that_gives_another_size_is_refused():
    with pytest.raises(ValueError, match=r"resizes 16 samples to floor\(16 \* 1\.5\) = 24 in torch, not 20"):
        interpolation_matrix(20, 16, xp=np, method="bicubic_torch", scale_factor=1.5)


@pytest.mark.parametrize("factor, message", [(0.0, "must be a positive number, got 0.0"),
                                             (float("nan"), "must be a positive number, got nan"),
                                             ((1.5, 2.0, 1.0), r"one number or \(rows, cols\), got \(1\.5, 2\.0, 1\.0\)")])
def test_a_bad_scale_factor_is_refused(factor, message):
    with pytest.raises(ValueError, match=message):
        resize_grid(random_grid((2, 2)), (3, 3), xp=np, method="bicubic_torch_antialias", scale_factor=factor)



@pytest.mark.parametrize("old, new", [((6, 6), (4, 4)), ((4, 4), (7, 7)), ((37, 37), (16, 16)), ((5, 7), (9, 3))])
def test_bicubic_tf_is_keras_image_resize_on_tensorflow(old, new):
    """keras-hub's DINOv2 resamples its position embeddings with keras.ops.image.resize (tf.image.resize on
    TensorFlow): "bicubic_tf" without antialiasing, "bicubic_torch_antialias" with it."""
    import keras

    grid = np.random.default_rng(0).normal(size=old + (3,)).astype("float32")
    for method, antialias in (("bicubic_tf", False), ("bicubic_torch_antialias", True)):
        want = np.asarray(keras.ops.image.resize(grid[None], new, interpolation="bicubic", antialias=antialias))[0]
        np.testing.assert_allclose(resize_grid(grid.astype("float64"), new, xp=np, method=method), want, atol=2e-6)
        np.testing.assert_allclose(np.asarray(resize_grid(keras.ops.convert_to_tensor(grid), new, method=method)), want, atol=2e-6)


@pytest.mark.parametrize("method, kernel", [("bicubic_torch_antialias", "bicubic"), ("bilinear_torch_antialias", "bilinear"),
                                            ("linear_torch", None), ("linear_aligned", None)])
@pytest.mark.parametrize("old", [1, 3, 16])
def test_sample_weights_per_token_against_the_loop_references(method, kernel, old):
    """NaFlex's per-token rows (one new size per image in one call) against tests/reference_naflex.py's loops
    (Pillow's window for torch's antialiased kernels, torch's idx0 / idx1 for linear) and the aligned matrix."""
    import reference_naflex
    from keras_vit.layers.resampling import sample_weights

    news = np.array([1, 2, 5, 16, 24, 37])
    index = np.concatenate([np.arange(n) for n in news])
    new = np.concatenate([np.full(n, n) for n in news])
    got = np.asarray(sample_weights(tf.constant(index), tf.constant(new), old, method=method))  # keras.ops, float32
    for n in news:
        if kernel is not None:
            expected = reference_naflex.antialiased(n, old, kernel)
        elif method == "linear_torch":
            expected = reference_naflex.linear(n, old)
        else:
            expected = interpolation_matrix(int(n), old, xp=np, dtype="float64")
        np.testing.assert_allclose(got[new == n], expected, rtol=0, atol=2e-6)
