"""Architectures: the table of variants, the generic ViT and its builders, the R50 hybrid, small models.

May import :mod:`keras_vit.layers` and :mod:`keras_vit.weights`; nothing here imports
TensorFlow, tf.data or the training code, so the models build on every Keras backend.
"""
