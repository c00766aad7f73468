"""The ViT building blocks, each a registered, serialisable Keras layer.

Every layer is registered for safe ``.keras`` (de)serialisation, stores each
constructor argument under its own name, returns exactly those arguments from
``get_config``, creates its sub-layers in ``__init__`` (or in ``build`` where
their shapes depend on the input's width) and its weights in ``build``, is
built when created if it has no weights (``Patches``, ``StochasticDepth``,
``TokenPooling``, ``TokenGrid``), uses only Keras' public API, and computes with
``keras.ops``, so it is backend-neutral; the dense layers, LayerNorms and
attention products go through :mod:`keras_vit.layers.kernels`, which on
TensorFlow emits the subgraphs oneDNN fuses (same weights, same numerics).
Each passes Keras' own layer harness (tests/layers/test_keras_layer_harness.py).
"""

from keras_vit.layers.attention import SelfAttention
from keras_vit.layers.checks import LAYER_NORM_EPSILON
from keras_vit.layers.diff_attention import DifferentialAttention
from keras_vit.layers.embedding import PatchEncoder
from keras_vit.layers.patching import Patches, TokenGrid
from keras_vit.layers.resnet import ResidualUnit, StdConv2D
from keras_vit.layers.transformer import StochasticDepth, TokenPooling, TransformerBlock

__all__ = ["LAYER_NORM_EPSILON", "PatchEncoder", "Patches", "SelfAttention", "StochasticDepth", "TokenGrid", "TokenPooling", "TransformerBlock"]
__all__ += ["ResidualUnit", "StdConv2D", "DifferentialAttention"]
