"""``VisionTransformer``: the functional Keras model every builder returns, carrying its ``ViTConfig``.

It is a ``keras.Model`` built from a functional graph (so ``summary``, ``get_layer``, ``quantize``,
mixed precision and ``.keras`` files work as for any functional model) with one addition: the
architecture it was built from, ``model.vit_config``, which ``get_config`` saves beside the graph and
``from_config`` restores. Files written before the configuration existed hold plain functional models;
:func:`keras_vit.architecture.legacy.upgrade` gives them theirs when they are loaded.
"""

import keras

from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture import naflex
from keras_vit.architecture.graph import build_graph


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformer(keras.Model):
    """A functional keras_vit model and the :class:`ViTConfig` it was built from (``vit_config``).

    Build one with :meth:`from_vit_config` (or a builder: ``keras_vit.ViT``, ``keras_vit.ViTB16``...).
    The constructor has the functional signature, so Keras saves and revives the graph as it does
    for any functional model; ``vit_config`` is keyword-only.

    Example:
    >>> config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)
    >>> model = VisionTransformer.from_vit_config(config)
    >>> model.vit_config.grid, model.name
    ((4, 4), 'vit')
    """

    def __init__(self, inputs, outputs, name=None, *, vit_config, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        self.vit_config = ViTConfig.from_dict(vit_config)

    @classmethod
    def from_vit_config(cls, config, *, input_tensor=None, name=None):
        """A new model of architecture ``config`` (a :class:`ViTConfig` or its dict), randomly initialised."""
        config = ViTConfig.from_dict(config)
        inputs, outputs = (naflex.build_graph if config.input_mode == "naflex" else build_graph)(config, input_tensor)
        return cls(inputs, outputs, name=name or config.default_name, vit_config=config)

    def get_config(self):
        return {**super().get_config(), "vit_config": self.vit_config.to_dict()}


def config_of(model):
    """The :class:`ViTConfig` of a keras_vit model; a ``ValueError`` naming the model for any other.

    Example:
    >>> config_of(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="mlp"))
    Traceback (most recent call last):
    ...
    ValueError: Expected a keras_vit model (built by keras_vit.ViT, a variant builder, HybridViT, conv_stem_vit or from_pretrained, or loaded by keras_vit.load_model). Received: model 'mlp' of class Sequential
    """
    config = getattr(model, "vit_config", None)
    if not isinstance(config, ViTConfig):
        raise ValueError(
            "Expected a keras_vit model (built by keras_vit.ViT, a variant builder, HybridViT, conv_stem_vit or "
            "from_pretrained, or loaded by keras_vit.load_model). "
            f"Received: model {getattr(model, 'name', None)!r} of class {type(model).__name__}"
        )
    return config
