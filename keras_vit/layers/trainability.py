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


FROZEN = "frozen_sublayers"  # the config key, saved only when set


def _frozen_paths(layer, prefix=""):
    """The ``/``-joined names of ``layer``'s frozen sublayers (below a trainable one; a frozen one covers its own)."""
    paths = []
    for sub in layer._flatten_layers(include_self=False, recursive=False):
        if not sub.trainable:
            paths.append(prefix + sub.name)
        else:
            paths += _frozen_paths(sub, prefix + sub.name + "/")
    return paths


def _freeze(layer):
    type(layer).trainable.fset(layer, False)  # Keras' setter, called directly: `layer.trainable = False` is a no-op
    # on TensorFlow when the flag is already False (its attribute tracking skips it)


class FrozenSublayers:
    """Mixin (listed before ``keras.layers.Layer``) of the keras_vit layers that create sublayers: a layer built
    with ``trainable=False`` freezes those sublayers too, and a trainable one records the sublayers frozen in it
    (``block.attention.trainable = False``: ``frozen_sublayers`` in its config) and freezes them again once built."""

    def __init__(self, *args, frozen_sublayers=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._frozen_sublayer_paths = tuple(frozen_sublayers or ())

    def get_config(self):
        config = super().get_config()
        frozen = _frozen_paths(self) if self.trainable else []
        if frozen:
            config[FROZEN] = frozen
        return config

    def _post_build(self):  # Keras' hook after build (keras.src.ops.operation.Operation._post_build)
        super()._post_build()
        if not self.trainable:
            _freeze(self)
            return
        for path in getattr(self, "_frozen_sublayer_paths", ()):
            layer = self
            for name in path.split("/"):
                layer = next((sub for sub in layer._flatten_layers(include_self=False, recursive=False)
                              if sub.name == name), None)
                if layer is None:
                    break
            if layer is not None:
                _freeze(layer)
