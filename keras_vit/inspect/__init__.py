"""Looking inside a trained model: attention maps and rollout, intermediate features, figures.

May import :mod:`keras_vit.layers`; matplotlib only inside the figure functions.
"""
