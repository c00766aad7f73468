"""The builders: ``ViT`` and the variants, ``HybridViT`` and the hybrids, ``conv_stem_vit``, ``build_model``,
``from_pretrained`` and ``resize_model``.

Each builder is a row of data for :func:`keras_vit.models.build.make_builder`; the architecture itself is
:mod:`keras_vit.architecture`. Nothing here imports TensorFlow, tf.data or the training code, so the models
build on every Keras backend. What it may import is the floors' contract (``[importlinter]`` in setup.cfg, docs/architecture.md), checked by ``make test``.
"""
