"""Augmentation for the training pipelines: per-image crops and affine maps, per-batch RandAugment, MixUp, CutMix.

Every random choice is stateless and derived from a seed, so a seeded
pipeline (:func:`keras_vit.train.data.make_pipeline`) gives the same batches
each time it is built. Images are float32 in [0, 255].

Example:
>>> import tensorflow as tf
>>> digit = tf.zeros((28, 28, 3))
>>> tuple(random_affine(digit, tf.constant([1, 2], tf.int64)).shape)
(28, 28, 3)
>>> tuple(center_crop(tf.zeros((40, 30, 3)), (16, 16)).shape)
(16, 16, 3)
"""

import math

import keras
import tensorflow as tf

from keras_vit.inference import decoding
from keras_vit.train.choices import AUGMENTATIONS  # noqa: F401  (one tuple for TrainConfig and make_pipeline)


def resize(image, size):
    """``image`` as float32, resized by the one rule (:func:`keras_vit.inference.decoding.resize`) unless it has that size already."""
    if tuple(image.shape[:2]) == tuple(size):
        return tf.cast(image, tf.float32)
    return decoding.resize(image, size)


def one_hot(label, num_classes):
    """One-hot ``float32`` of an int label, refused at iteration when it is outside ``[0, num_classes)`` (tf.one_hot
    would give a row of zeros: an image that counts as no class)."""
    label = tf.cast(label, tf.int32)
    check = tf.debugging.Assert(tf.reduce_all((label >= 0) & (label < num_classes)), [
        f"make_pipeline(num_classes={num_classes}): a label is outside [0, {num_classes}); label:", label])
    with tf.control_dependencies([check]):
        return tf.one_hot(label, num_classes)


def center_crop(image, size, crop_fraction=1.0):
    """Evaluation transform: the largest central box of ``size``'s aspect ratio (a square for a square model), its
    sides ``crop_fraction`` of that, resized to ``size``: a model of another aspect ratio sees its own, undistorted."""
    if None not in image.shape[:2] and image.shape[0] * size[1] == image.shape[1] * size[0] and crop_fraction == 1.0:
        return resize(image, size)
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    target = tf.constant(size, tf.float32)
    box = tf.cast(tf.round(target * tf.reduce_min(shape / target) * crop_fraction), tf.int32)
    box = tf.clip_by_value(box, 1, tf.shape(image)[:2])
    corner = (tf.shape(image)[:2] - box) // 2
    image = tf.image.crop_to_bounding_box(image, corner[0], corner[1], box[0], box[1])
    return resize(image, size)


def random_resized_crop(image, size, seed, *, area_range=(0.08, 1.0), flip=True):
    """Inception-style crop (area 8-100 %, aspect 3/4-4/3), resized, optional flip."""
    begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image),
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.0,
        aspect_ratio_range=(3 / 4, 4 / 3),
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    image = tf.slice(image, begin, crop)
    image = tf.image.resize(tf.cast(image, tf.float32), size, antialias=True)
    if flip:
        image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
    return image


def random_affine(image, seed, *, max_rotation=10.0, max_shift=0.1, scale_range=(0.9, 1.1), max_shear=0.1):
    """Small random rotation, scale, shear and translation (for digits: no flips).

    ``max_rotation`` in degrees; ``max_shift`` as a fraction of the size.
    """
    h = tf.cast(tf.shape(image)[0], tf.float32)
    w = tf.cast(tf.shape(image)[1], tf.float32)
    u = tf.random.stateless_uniform((5,), seed=seed, minval=-1.0, maxval=1.0)
    angle = u[0] * max_rotation * math.pi / 180.0
    scale = scale_range[0] + (u[1] + 1.0) / 2.0 * (scale_range[1] - scale_range[0])
    shear = u[2] * max_shear
    tx, ty = u[3] * max_shift * w, u[4] * max_shift * h
    cos, sin = tf.cos(angle), tf.sin(angle)
    # forward map A = R(angle) @ [[1, shear], [0, 1]] * scale, about the centre,
    # then shifted; ImageProjectiveTransform wants the inverse (output -> input).
    a00, a01, a10, a11 = cos * scale, (cos * shear - sin) * scale, sin * scale, (sin * shear + cos) * scale
    det = a00 * a11 - a01 * a10
    i00, i01, i10, i11 = a11 / det, -a01 / det, -a10 / det, a00 / det
    cx, cy = (w - 1.0) / 2.0, (h - 1.0) / 2.0
    ox, oy = cx + tx, cy + ty  # where the centre goes
    b0 = cx - (i00 * ox + i01 * oy)
    b1 = cy - (i10 * ox + i11 * oy)
    transform = tf.stack([i00, i01, b0, i10, i11, b1, 0.0, 0.0])[None]
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=tf.cast(image, tf.float32)[None],
        transforms=transform,
        output_shape=tf.shape(image)[:2],
        fill_value=0.0,
        interpolation="BILINEAR",
        fill_mode="CONSTANT",
    )[0]
    out.set_shape(image.shape)
    return out


def batch_augmenter(randaugment, mixup, cutmix, *, seed):
    """A ``map`` function ``(images, labels, batch_seed)`` for batches: ``keras.layers.RandAugment``, then MixUp or
    CutMix with their probabilities, chosen by a stateless draw from ``batch_seed`` (a ``(2,)`` int64 tensor)."""
    # float32 whatever the global policy: under mixed_bfloat16 they cast the batch to bfloat16 and MixUp / CutMix
    # failed on the float32 labels (the model casts its inputs itself)
    rand = keras.layers.RandAugment(value_range=(0, 255), seed=seed, dtype="float32") if randaugment else None
    mix = keras.layers.MixUp(seed=seed, dtype="float32") if mixup else None
    cut = keras.layers.CutMix(seed=seed + 1, dtype="float32") if cutmix else None

    def apply(images, labels, batch_seed):
        if rand is not None:
            images = rand(images)
        u = tf.random.stateless_uniform((), seed=batch_seed)
        if mix is not None:
            mixed = mix({"images": images, "labels": labels})
            take = u < mixup
            images = tf.where(take, mixed["images"], images)
            labels = tf.where(take, mixed["labels"], labels)
        if cut is not None:
            cutted = cut({"images": images, "labels": labels})
            take = u >= 1.0 - cutmix
            images = tf.where(take, cutted["images"], images)
            labels = tf.where(take, cutted["labels"], labels)
        return images, labels

    return apply
