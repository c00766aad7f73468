"""Training: datasets and pipelines, augmentation, optimizers and schedules, callbacks and backups, the one training job, distribution, recipes.

``data`` (sources, :func:`~keras_vit.train.data.make_pipeline`), ``augment``,
``optimizers``, ``model_setup`` (precision, freezing, compiling, evaluation),
``callbacks`` (backups, resumable fit), ``distribute`` (the multi-worker loop
and its backups), ``recipes`` (named models and their settings) and ``job``
(:func:`~keras_vit.train.job.run`: the job behind ``keras-vit train`` for one
device, mirrored and multi-worker runs).

May import :mod:`keras_vit.models`, :mod:`keras_vit.weights` and :mod:`keras_vit.layers`. TensorFlow-only (tf.data, tf.distribute).
"""
