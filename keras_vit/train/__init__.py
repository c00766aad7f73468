"""Training: tf.data pipelines and augmentation, optimizers and schedules, callbacks and backups, the training job, distribution, recipes.

May import :mod:`keras_vit.models`, :mod:`keras_vit.weights` and :mod:`keras_vit.layers`. TensorFlow-only (tf.data, tf.distribute).
"""
