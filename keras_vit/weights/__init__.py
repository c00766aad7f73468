"""Pretrained weights: reading checkpoint files, mapping their keys onto a model, resampling position embeddings, the load report.

May import :mod:`keras_vit.layers` (to find the layers a key maps to); never the model builders.
"""
