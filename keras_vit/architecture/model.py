"""``VisionTransformer``: the functional Keras model every builder returns, carrying its ``ViTConfig``.

It is a ``keras.Model`` built from a functional graph (so ``summary``, ``get_layer``, ``quantize``,
mixed precision and ``.keras`` files work as for any functional model) with one addition: the
architecture it was built from, ``model.vit_config``, which ``get_config`` saves beside the graph and
``from_config`` restores. Files written before the configuration existed hold plain functional models;
:func:`keras_vit.architecture.legacy.upgrade` gives them theirs when they are loaded.

``keras.models.clone_model`` builds its copy with the functional constructor alone (``cls(inputs, outputs,
name=...)``, no ``vit_config``); the copy takes the configuration of a live keras_vit model whose graph it
reproduces layer for layer (``_config_of_same_graph``), and a clone that changed the graph is refused by name.
"""

import json
import weakref

import keras

from keras_vit.architecture.config import ViTConfig
from keras_vit.architecture import naflex
from keras_vit.architecture.graph import build_graph
from keras_vit.architecture.state import model_state


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

    def __init__(self, inputs, outputs, name=None, *, vit_config=None, **kwargs):
        super().__init__(inputs=inputs, outputs=outputs, name=name, **kwargs)
        self.vit_config = ViTConfig.from_dict(self._config_of_same_graph() if vit_config is None else vit_config)
        _LIVE.add(self)

    def _config_of_same_graph(self):
        """The ``vit_config`` of a live model with this model's graph (``keras.models.clone_model``'s copies)."""
        graph = _graph(self)
        same = [model for model in list(_LIVE) if model is not self and _graph(model) == graph]
        own = bool(model_state(self).lora_layers)
        for model in same:  # a model of this graph whose LoRA factors the copy has too (or neither has)
            if bool(model_state(model).lora_layers) == own:
                return model.vit_config
        if same:  # factors that no layer config holds: a clone of a LoRA model would be a plain one
            adapted = model_state(same[0]).lora_layers
            raise ValueError(
                f"Model {same[0].name!r} has LoRA factors ({len(adapted)} layers, e.g. {adapted[0]!r}) that "
                "keras.models.clone_model does not copy (they are not in the layers' configs): the copy would be a "
                "plain model, every weight trainable. Clone it before keras_vit.enable_lora and enable LoRA on the "
                "copy, or clone keras_vit.merge_lora(model)."
            )
        raise ValueError(
            f"A VisionTransformer needs its `vit_config`; model {self.name!r} was built without one (as "
            "keras.models.clone_model builds its copy) and its graph is that of no keras_vit model in this process "
            "(a clone_function or call_function that changes layers gives a new architecture). Pass "
            "`vit_config=`, or rebuild it with keras_vit.build_model(config) and copy the weights."
        )

    @classmethod
    def from_vit_config(cls, config, *, input_tensor=None, name=None):
        """A new model of architecture ``config`` (a :class:`ViTConfig` or its dict), randomly initialised."""
        config = ViTConfig.from_dict(config)
        inputs, outputs = (naflex.build_graph if config.input_mode == "naflex" else build_graph)(config, input_tensor)
        return cls(inputs, outputs, name=name or config.default_name, vit_config=config)

    def get_config(self):
        return {**super().get_config(), "vit_config": self.vit_config.to_dict()}


_LIVE = weakref.WeakSet()  # the VisionTransformers of this process, for the copies keras.models.clone_model makes


def _graph(model):
    """``model``'s functional graph (its layers' configs and connections), without its name, its trainable flag and
    the names of its input layers (clone_model names each new ``keras.Input`` after the tensor, not the layer)."""
    config = super(VisionTransformer, model).get_config()
    graph = json.dumps({k: v for k, v in config.items() if k not in ("name", "trainable")}, sort_keys=True, default=str)
    inputs = [layer["config"]["name"] for layer in config["layers"] if layer["class_name"] == "InputLayer"]
    for i, name in enumerate(inputs):
        graph = graph.replace(json.dumps(name), f'"<input {i}>"')
    return graph


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
