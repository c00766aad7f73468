"""The dtype policies of a layer's own sublayers in its config, so ``model.quantize(...)`` survives ``.keras`` files.

``model.quantize("int8" | "float8" | "int4")`` quantizes Keras' leaf layers that implement ``quantize``
(``Dense``, ``EinsumDense``, ``Embedding``) in place: each gets a quantized dtype policy
(``"int8_from_float32"``...) and new variables (an integer kernel and its scale). A ``Dense`` of the
functional graph (the head) saves that policy in its own config. A ``Dense`` or ``EinsumDense`` that a
keras_vit layer creates itself (the attention projections, the MLP, the patch projection, the MAP head's
projections) is created again by that layer when the file is loaded, from the layer's config: unless that
config says which of them were quantized, they come back as float layers that cannot take the quantized
variables, and the file does not load.

:class:`SublayerPolicies` puts that in the config: the layer's ``dtype`` becomes a
``keras.dtype_policies.DTypePolicyMap`` from each quantized sublayer's path to its policy (the mechanism
Keras documents in ``DTypePolicyMap`` and keras-hub's backbones use), whose default is the layer's own
policy. The sublayers are created with ``dtype=self.dtype_policy`` (the map), and each looks up its own
path when it is built, so it is built quantized and takes the saved variables.

Example:
>>> import keras
>>> from keras_vit.layers import SelfAttention
>>> layer = SelfAttention(num_heads=2, key_dim=4, name="attention")
>>> _ = layer(keras.ops.ones((1, 3, 8)))
>>> layer.query_dense.quantize("int8")
>>> sorted(quantized_policies(layer))
['attention/query']
>>> restored = SelfAttention.from_config(layer.get_config())
>>> _ = restored(keras.ops.ones((1, 3, 8)))
>>> restored.query_dense.quantization_mode, restored.key_dense.quantization_mode
('int8', None)
"""

import keras

from keras_vit.layers.trainability import FrozenSublayers

_DTypePolicyMap = keras.dtype_policies.DTypePolicyMap


def own_policy(layer):
    """The dtype policy ``layer`` computes with: its own, or its entry in the map it was created with."""
    policy = layer.dtype_policy
    if isinstance(policy, _DTypePolicyMap):
        return policy[layer.path] if layer.path else policy.default_policy
    return policy


def quantized_policies(layer):
    """``{path: policy}`` of the quantized layers inside ``layer`` (not ``layer`` itself)."""
    return {
        sub.path: own_policy(sub)
        for sub in layer._flatten_layers(include_self=False)
        if sub.path and own_policy(sub).quantization_mode is not None
    }


class SublayerPolicies(FrozenSublayers):
    """Mixin of the keras_vit layers that create their own ``Dense``/``EinsumDense`` sublayers (listed first among
    the bases): ``get_config`` records the quantized ones, as a ``DTypePolicyMap`` under ``dtype``.

    Once built, each sublayer created with the map holds the policy it looked up: Keras 3.15's ``Dense`` and
    ``EinsumDense`` read ``self.dtype_policy.quantization_mode`` (the map's default) when they save their
    variables, so a quantized layer still holding the map would save its scale as None.
    """

    def _post_build(self):  # Keras' hook after build (keras.src.ops.operation.Operation._post_build)
        super()._post_build()
        for sub in self._flatten_layers(include_self=False):
            if isinstance(sub._dtype_policy, _DTypePolicyMap) and sub.path:
                sub._dtype_policy = own_policy(sub)

    def get_config(self):
        config = super().get_config()
        quantized = quantized_policies(self)
        if quantized:
            policy = self.dtype_policy
            default = policy.default_policy if isinstance(policy, _DTypePolicyMap) else policy
            config["dtype"] = keras.dtype_policies.serialize(_DTypePolicyMap(default, quantized))
        return config
