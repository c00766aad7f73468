"""Importing this module registers every serialisable keras_vit class with Keras.

``keras.saving.load_model`` finds a custom layer only once its class is
registered; the library imports this before loading a ``.keras`` file.
"""

from keras_vit import hybrid, layers, training  # noqa: F401
