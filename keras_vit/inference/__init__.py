"""Using a trained model: the one image reader, class names, each model format, and ``predict``.

- :mod:`~keras_vit.inference.images`: image files to RGB pixels and the one resize; imports nothing of
  keras_vit, so training, export and inspection read files through it too;
- :mod:`~keras_vit.inference.labels`: class names stored with a model, label files, the ImageNet names
  of an ImageNet-sized head (the lists live in :mod:`keras_vit.weights.imagenet`);
- :mod:`~keras_vit.inference.runtimes`: ``.keras``, SavedModel and ``.onnx`` files loaded and run;
- :mod:`~keras_vit.inference.tflite_files`: ``.tflite`` files in LiteRT (their int8 tensors' (de)quantisation too);
- :mod:`~keras_vit.inference.predictors`: ``predict``, ``load_predictor`` and the ``keras.applications``-style helpers.

Below training, export and inspection, above the models. What it may import is the floors' contract (``[importlinter]`` in setup.cfg, docs/architecture.md), checked by ``make test``.
"""
