"""``trainable=False`` in a layer's config reaches the sublayers that layer creates itself.

Keras' ``Layer.trainable`` setter freezes a layer, its own variables and its sublayers. A layer revived from
a config (``.keras`` files, ``from_config``, ``model_from_json``) only gets ``trainable=False`` passed to its
constructor: Keras sets the flag and freezes the variables the layer tracks itself, but the ``Dense``,
``EinsumDense``, ``LayerNormalization`` and ``StdConv2D`` layers it creates come back trainable. A model's
``trainable_weights`` list every variable whose own flag is set, so a partly frozen model (``keras_vit.freeze``,
``layer.trainable = False``) or a frozen backbone inside a larger model trained every weight again after a save
and a load (Keras' own ``MultiHeadAttention`` behaves the same in Keras 3.15).

:class:`FrozenSublayers` applies the setter once the layer is built, so the sublayers follow its flag.

Example:
>>> import keras
>>> from keras_vit.layers import TransformerBlock
>>> block = TransformerBlock(num_heads=2, mlp_dim=16, trainable=False)
>>> _ = block(keras.ops.ones((1, 3, 8)))
>>> [v.path for v in block.weights if v.trainable]
[]
"""


class FrozenSublayers:
    """Mixin (listed before ``keras.layers.Layer``) of the keras_vit layers that create sublayers: a layer built
    with ``trainable=False`` freezes those sublayers too."""

    def _post_build(self):  # Keras' hook after build (keras.src.ops.operation.Operation._post_build)
        super()._post_build()
        if not self.trainable:  # Keras' setter, called directly: `self.trainable = False` is a no-op on TensorFlow
            type(self).trainable.fset(self, False)  # when the flag is already False (its attribute tracking skips it)
