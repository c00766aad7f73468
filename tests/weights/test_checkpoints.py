import io
import re

import numpy as np
import pytest

import keras_vit
import reference
from helpers import TINY, images, original_names, save_npz, tiny_vit, vit_checkpoint
from keras_vit import weights
from keras_vit.weights import CheckpointError, POSEMB_KEY, resize_position_embedding


@pytest.mark.parametrize("naming", ["original", "flax"])
@pytest.mark.parametrize("representation_size", [None, 24])
def test_parity_with_numpy_reference(tmp_path, naming, representation_size):
    arrays = vit_checkpoint(naming=naming, representation_size=representation_size)
    path = save_npz(tmp_path / "ViT-T.npz", arrays)
    model = tiny_vit(weights=path, classifier_activation=None)
    if representation_size:  # detected from the keys
        assert model.get_layer("pre_logits").units == representation_size
    x = images(3)
    expected = reference.vit_logits(x, original_names(arrays))
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-5, rtol=0)
    assert len(model.load_report.loaded) == len(arrays)
    assert not model.load_report.unused and not model.load_report.skipped


def test_flax_optim_file_loads_its_target_and_ignores_optimizer_state(tmp_path):
    # files saved with flax.optim hold the weights under opt/target/ and the moments under opt/state/
    arrays = vit_checkpoint()
    wrapped = {"opt/target/" + k: v for k, v in arrays.items()}
    wrapped.update({"opt/state/param_states/" + k + "/grad_ema": np.zeros_like(v) for k, v in arrays.items()})
    wrapped["opt/state/step"] = np.array(1000)
    model = tiny_vit(weights=save_npz(tmp_path / "opt.npz", wrapped), classifier_activation=None)
    plain = tiny_vit(weights=save_npz(tmp_path / "plain.npz", arrays), classifier_activation=None)
    # the loaded weights are copies of the same arrays: exactly equal
    for got, want in zip(model.weights, plain.weights):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=got.path)
    # the outputs are computed: two separately built models run the same float32 graph, equal bit for bit in
    # practice, but kernel choices (alignment, threads) are not promised to match; 1e-6 is 4 float32 ulp
    # of these logits (|logit| < 2, ulp 2.4e-7)
    x = images(2)
    np.testing.assert_allclose(np.asarray(model(x)), np.asarray(plain(x)), rtol=0, atol=1e-6)
    assert len(model.load_report.loaded) == len(arrays) and not model.load_report.unused


def test_parity_gap_model(tmp_path):
    arrays = vit_checkpoint(class_token=False)
    model = tiny_vit(weights=save_npz(tmp_path / "gap.npz", arrays), pooling="gap", classifier_activation=None)
    x = images(2)
    expected = reference.vit_logits(x, arrays, pooling="gap")
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-5)


def test_new_head_is_skipped_and_zero(tmp_path):
    path = save_npz(tmp_path / "c.npz", vit_checkpoint(num_classes=5))
    model = tiny_vit(weights=path, num_classes=3, classifier_activation=None)
    assert set(model.load_report.skipped) == {"head/kernel", "head/bias"}
    assert np.all(np.asarray(model.get_layer("head").kernel) == 0)
    # exact on purpose: features times a zero kernel plus a zero bias is exactly 0 in any summation order
    np.testing.assert_array_equal(np.asarray(model(images(2))), 0.0)


def test_headless_model_reports_unused_head(tmp_path):
    path = save_npz(tmp_path / "c.npz", vit_checkpoint())
    model = tiny_vit(weights=path, include_top=False)
    assert model.load_report.unused == ["head/bias", "head/kernel"]


def test_resolution_change_interpolates_position_embeddings(tmp_path):
    arrays = vit_checkpoint(grid=(4, 4))
    path = save_npz(tmp_path / "c.npz", arrays)
    for size, grid in ((48, (6, 6)), ((32, 64), (4, 8))):
        model = tiny_vit(weights=path, image_size=size)
        posemb = np.asarray(model.get_layer("patch_encoder").position_embedding)
        assert posemb.shape == (1, grid[0] * grid[1] + 1, TINY["hidden_size"])
        np.testing.assert_array_equal(posemb[0, 0], arrays[POSEMB_KEY][0, 0])  # CLS untouched
        # corners of the grid are kept (aligned-corner interpolation)
        old = arrays[POSEMB_KEY][0, 1:].reshape(4, 4, -1)
        new = posemb[0, 1:].reshape(grid[0], grid[1], -1)
        np.testing.assert_allclose(new[0, 0], old[0, 0], atol=1e-6)
        np.testing.assert_allclose(new[-1, -1], old[-1, -1], atol=1e-6)
        assert POSEMB_KEY in model.load_report.resized
        assert np.all(np.isfinite(np.asarray(model(images(1, size)))))


def test_resize_same_grid_is_identity_and_matches_scipy_zoom():
    posemb = np.random.default_rng(0).normal(size=(1, 17, 6)).astype("float32")
    # exact on purpose: the same grid is not resampled, only cast float32 -> float64 -> float32 (lossless)
    np.testing.assert_array_equal(resize_position_embedding(posemb, (4, 4)), posemb)
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    out = resize_position_embedding(posemb, (6, 3))
    grid = posemb[0, 1:].reshape(4, 4, 6)
    expected = scipy_ndimage.zoom(grid, (6 / 4, 3 / 4, 1), order=1)
    np.testing.assert_allclose(out[0, 1:].reshape(6, 3, 6), expected, atol=1e-5)


def test_missing_key_names_it(tmp_path):
    arrays = vit_checkpoint()
    del arrays["Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"]
    model = tiny_vit()
    before = [np.asarray(w).copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=r"encoderblock_1/MlpBlock_3/Dense_0/kernel \(model expects \(32, 64\)\)"):
        keras_vit.load_checkpoint(model, save_npz(tmp_path / "c.npz", arrays))
    for old, new in zip(before, model.weights):  # nothing half-written
        np.testing.assert_array_equal(old, np.asarray(new))


def test_wrong_shape_names_key_and_both_shapes(tmp_path):
    arrays = vit_checkpoint()
    arrays["Transformer/encoderblock_0/LayerNorm_0/scale"] = np.ones(31, "float32")
    model = tiny_vit()
    with pytest.raises(CheckpointError, match=r"encoderblock_0/LayerNorm_0/scale.*\(31,\).*\(32,\)"):
        keras_vit.load_checkpoint(model, save_npz(tmp_path / "c.npz", arrays))


def test_deeper_checkpoint_is_rejected(tmp_path):
    path = save_npz(tmp_path / "c.npz", vit_checkpoint(num_layers=3))
    with pytest.raises(CheckpointError, match="encoderblock_2"):
        tiny_vit(weights=path)


@pytest.mark.parametrize("content", [b"", b"not a zip file at all", None])
def test_corrupt_or_truncated_file(tmp_path, content):
    path = tmp_path / "bad.npz"
    if content is None:  # a real checkpoint cut in half
        good = save_npz(tmp_path / "good.npz", vit_checkpoint())
        data = open(good, "rb").read()
        content = data[: len(data) // 2]
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="bad.npz"):
        keras_vit.read_checkpoint(path)


def test_pickled_arrays_are_refused(tmp_path):
    path = tmp_path / "pickle.npz"
    np.savez(path, cls=np.array([object()], dtype=object))
    with pytest.raises(CheckpointError, match="pickle"):
        keras_vit.read_checkpoint(path)


@pytest.mark.parametrize("wrap", ["original", "flax", "opt"])
def test_shapes_peek_reads_headers_like_the_arrays(tmp_path, wrap):
    arrays = vit_checkpoint(naming="flax" if wrap == "flax" else "original", representation_size=24)
    if wrap == "opt":
        arrays = {"opt/target/" + k: v for k, v in arrays.items()}
        arrays["opt/state/step"] = np.array(7)
    path = save_npz(tmp_path / "c.npz", arrays)
    shapes = weights.checkpoint_shapes(path)
    assert shapes == {k: v.shape for k, v in weights.read_checkpoint(path).items()}
    assert weights.representation_size_of(shapes) == 24


def test_shapes_peek_names_a_bad_file(tmp_path):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"not a zip file at all")
    with pytest.raises(CheckpointError, match="bad.npz"):
        weights.checkpoint_shapes(path)
    with pytest.raises(CheckpointError, match="bad.npz"):  # the builder peeks first: the same error
        tiny_vit(weights=path)


@pytest.mark.parametrize("overrides", [dict(), dict(pooling="gap", representation_size=16), dict(include_top=False)])
def test_every_weight_has_one_checkpoint_key(overrides):
    model = tiny_vit(**overrides)
    targets = weights.targets_of(model)
    assert sorted(t.variable.path for t in targets.values()) == sorted(v.path for v in model.weights)


def test_builder_keeps_the_report_on_the_model(tmp_path):
    path = save_npz(tmp_path / "c.npz", vit_checkpoint())
    assert not hasattr(tiny_vit(), "load_report")
    model = tiny_vit(weights=path)
    assert isinstance(model.load_report, weights.LoadReport) and model.load_report.path == path
    fresh = tiny_vit()
    report = weights.load_into(fresh, path)
    assert fresh.load_report is report and report.loaded == model.load_report.loaded


def _last_target_key(model):
    return list(weights.targets_of(model))[-1]


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda shape: np.full(shape, "x"), "dtype <U1"),
        (lambda shape: np.ones(shape, bool), "dtype bool"),
        (lambda shape: np.ones(shape, np.complex64), "dtype complex64"),
        (lambda shape: np.where(np.arange(np.prod(shape)).reshape(shape) == 1, np.nan, 1.0).astype("float32"), "1 NaN or infinite"),
        (lambda shape: np.full(shape, np.inf, "float32"), "NaN or infinite"),
    ],
    ids=["string", "bool", "complex", "nan", "inf"],
)
def test_bad_values_are_refused_before_anything_is_written(tmp_path, bad, match):
    """Issue 14 item 5: a string array last in line failed after every other array had been assigned."""
    model = tiny_vit()
    key = _last_target_key(model)  # assigned last: everything else would already be in the model
    arrays = vit_checkpoint()
    arrays[key] = bad(arrays[key].shape)
    before = [np.asarray(w).copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=rf"c\.npz.*{re.escape(key)}.*{match}"):
        keras_vit.load_checkpoint(model, save_npz(tmp_path / "c.npz", arrays))
    for old, new in zip(before, model.weights):  # nothing half-written (exact: the very same values)
        np.testing.assert_array_equal(old, np.asarray(new))


def test_npy_file_named_npz_is_named(tmp_path):
    path = tmp_path / "weights.npz"
    with open(path, "wb") as f:
        np.save(f, np.zeros((2, 3), "float32"))
    for read in (keras_vit.read_checkpoint, weights.checkpoint_shapes):
        with pytest.raises(CheckpointError, match=r"weights\.npz.* single NumPy array \(\.npy\)"):
            read(path)


def test_entry_claiming_a_huge_shape_is_named_without_allocating(tmp_path):
    """A header that claims 1e13 elements: a MemoryError before, now an error naming the entry."""
    import zipfile

    arrays = vit_checkpoint()
    path = save_npz(tmp_path / "huge.npz", arrays)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**13,)})
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("zz/huge.npy", header.getvalue() + b"\0" * 64)  # the header (magic included), 64 bytes
    for read in (keras_vit.read_checkpoint, weights.checkpoint_shapes):
        with pytest.raises(CheckpointError, match=r"huge\.npz.*'zz/huge\.npy' claims shape \(10000000000000,\)"):
            read(path)
