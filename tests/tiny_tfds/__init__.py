"""Tiny TensorFlow Datasets builders, prepared offline from generated images (see :mod:`tiny_tfds.levels`)."""
