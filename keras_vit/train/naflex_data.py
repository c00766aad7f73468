"""NaFlex batches for ``model.fit``: images of mixed shapes as patch dicts, batched by sequence length.

A NaFlex model (``ViTConfig(input_mode="naflex")``) takes each image at its own aspect ratio (no crop to a square):
resized by the grid rule under a budget of patches and cut into the dict ``{patches, patch_coord, patch_valid}``
(:mod:`keras_vit.inference.naflex_input`, the same rule as :mod:`keras_vit.layers.naflex_grid`). As timm's NaFlex
loader (``timm/data/naflex_dataset.py``, ``NaFlexMapDatasetWrapper``) batches them:

* each training batch has one budget (sequence length), drawn at random among ``budgets``, and as many images as
  fill ``batch_size * max(budgets)`` tokens: ``batch_size * max(budgets) // budget`` (timm's
  ``calculate_naflex_batch_size`` with ``max_tokens_per_batch = batch_size * max(train_seq_lens)``); the draws are
  stateless, from ``seed`` and the batch's index, so a seeded pipeline gives the same batches every time it is built;
* evaluation batches all have the largest budget (timm validates at one ``max_seq_len``), ``batch_size`` images each.

The augmentations that apply to an image of its own shape apply here: ``"inception"`` is a random crop (area 8-100 %,
aspect 3/4-4/3) and a horizontal flip, the crop then sized by the grid rule (timm's ``RandomResizedCropToSequence``);
``"digits"`` is the small random affine at the image's size; ``"none"`` resizes only. RandAugment, MixUp and CutMix
mix whole images of one size: they are refused here by name.

Example:
>>> batch_sizes((64, 128, 256), 8)  # 2048 tokens per batch
{64: 32, 128: 16, 256: 8}
"""

import dataclasses

import tensorflow as tf

from keras_vit.inference import naflex_input
from keras_vit.layers.naflex_grid import KEYS, grid_rule
from keras_vit.train import augment as augment_lib

AUTOTUNE = tf.data.AUTOTUNE
_SCHEDULE_SALT = 7919  # the budget draws' seed is (seed + salt, batch index): apart from the augmentation's seeds


@dataclasses.dataclass(frozen=True)
class NaFlexBatching:
    """What ``make_pipeline(naflex=...)`` needs of a NaFlex model: its patch size, the budgets to batch by and its grid
    rule (``ViTConfig.grid_rule``: ``"timm"`` or ``"siglip2"``).

    Example:
    >>> NaFlexBatching(7, (36, 16)).budgets
    (16, 36)
    """

    patch_size: int | tuple
    budgets: tuple
    rule: str = "timm"

    def __post_init__(self):
        object.__setattr__(self, "budgets", check_budgets(self.budgets))
        grid_rule(self.rule)  # an unknown rule named here


def batch_sizes(budgets, batch_size):
    """``{budget: images per batch}``: each batch holds about ``batch_size * max(budgets)`` tokens (timm's rule)."""
    tokens = batch_size * max(budgets)
    return {int(b): max(1, tokens // int(b)) for b in sorted(budgets)}


def check_budgets(budgets):
    """``budgets`` as a sorted tuple of distinct positive ints, or a ``ValueError`` naming them."""
    if isinstance(budgets, int) and not isinstance(budgets, bool):
        budgets = (budgets,)
    if (not isinstance(budgets, (list, tuple)) or not budgets
            or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in budgets)):
        raise ValueError(f"NaFlex budgets must be positive ints (patches per image), e.g. (64, 128, 256). "
                         f"Received: budgets={budgets!r}")
    return tuple(sorted(set(budgets)))


def _augmented(image, seed, augment):
    """One training image at its own shape, augmented (float32 in [0, 255]); the grid rule sizes it after."""
    if augment == "inception":
        begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=seed, min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10, use_image_if_no_bounding_boxes=True,
        )
        image = tf.image.stateless_random_flip_left_right(tf.cast(tf.slice(image, begin, crop), tf.float32), seed=seed + 1)
    elif augment == "digits":
        image = augment_lib.random_affine(image, seed)
    return tf.ensure_shape(tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 255.0), (None, None, 3))


def _patches_dtype(parts, image_dtype):
    patches = parts[0]
    if image_dtype == "uint8":  # whole levels, one byte per channel to the device (the model rescales inside)
        patches = tf.cast(tf.round(tf.clip_by_value(patches, 0.0, 255.0)), tf.uint8)
    return dict(zip(KEYS, (patches, *parts[1:])))


def pipeline(dataset, patch_size, budgets, batch_size, *, training=False, augment="none", num_classes=None, seed=0,
             shuffle_buffer=10_000, repeat=False, drop_remainder=None, image_dtype="float32", rule="timm"):
    """Batch a split of ``(uint8 image (H, W, 3) of any size, label)`` into NaFlex batches ``(dict, labels)``.

    See the module docstring for the batching and the augmentation; ``make_pipeline(..., naflex=...)`` calls it
    (:func:`keras_vit.train.data.make_pipeline`, whose other arguments these are); ``rule``: the model's grid rule.
    """
    budgets = check_budgets(budgets)
    sizes = batch_sizes(budgets, batch_size)
    drop_remainder = training if drop_remainder is None else drop_remainder
    options = tf.data.Options()
    options.deterministic = True
    ds = dataset.with_options(options)

    def labelled(label):
        return augment_lib.one_hot(label, num_classes) if num_classes else label

    if not training:
        largest = budgets[-1]

        def eval_map(image, label):
            parts = naflex_input.image_to_patches(image, patch_size, largest, rule)
            return _patches_dtype(parts, image_dtype), labelled(label)

        ds = ds.map(eval_map, num_parallel_calls=AUTOTUNE)
        if repeat:
            ds = ds.repeat()
        return ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)

    budget_table = tf.constant(budgets, tf.int32)
    size_table = tf.constant([sizes[b] for b in budgets], tf.int64)

    def drawn(index):  # the budget (its position in the table) of batch `index`: stateless
        key = tf.stack([tf.constant(seed + _SCHEDULE_SALT, tf.int64), tf.cast(index, tf.int64)])
        return tf.random.stateless_uniform((), seed=key, minval=0, maxval=len(budgets), dtype=tf.int32)

    def schedule(state, element):  # each image's batch: a new one starts when the last is full
        index, left = state
        start = tf.equal(left, 0)
        index = tf.where(start, index + 1, index)
        left = tf.where(start, size_table[drawn(index)], left) - 1
        return (index, left), (element, index)

    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = tf.data.Dataset.zip((ds, tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)))
    ds = ds.scan((tf.constant(-1, tf.int64), tf.constant(0, tf.int64)), schedule)

    def train_map(element, index):
        (image, label), r = element
        image = _augmented(image, tf.stack([r, tf.constant(seed, tf.int64)]), augment)
        parts = naflex_input.image_to_patches(image, patch_size, budget_table[drawn(index)], rule)
        return index, _patches_dtype(parts, image_dtype), labelled(label)

    ds = ds.map(train_map, num_parallel_calls=AUTOTUNE)
    ds = ds.group_by_window(
        key_func=lambda index, x, y: index,
        reduce_func=lambda key, window: window.batch(max(sizes.values())),
        window_size_func=lambda key: size_table[drawn(key)],
    )
    if drop_remainder:  # a last batch cut short by the end of the data
        ds = ds.filter(lambda index, x, y: tf.equal(tf.shape(index, out_type=tf.int64)[0], size_table[drawn(index[0])]))
    return ds.map(lambda index, x, y: (x, y), num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
