"""Looking inside a trained model: attention maps and rollout, intermediate features, figures.

May import :mod:`keras_vit.layers` and :mod:`keras_vit.inference.images` (the one resize); matplotlib only
inside the figure functions.
"""
