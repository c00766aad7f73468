"""Importing this module registers every serialisable keras_vit class with Keras.

``keras.saving.load_model`` finds a custom layer or optimizer only once its
class is registered; the library imports this before loading a ``.keras`` file.
"""

from keras_vit import layers  # noqa: F401  (with keras_vit.layers.resnet: StdConv2D, ResidualUnit)
from keras_vit.train import optimizers  # noqa: F401  (the layer-decay optimizers)
