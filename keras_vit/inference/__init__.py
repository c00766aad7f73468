"""Using a trained model: reading images, class names, and predictors for ``.keras``, SavedModel and TFLite files.

May import :mod:`keras_vit.models` (to load ``.keras`` files); never the training code.
"""
