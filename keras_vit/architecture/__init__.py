"""Architecture as data: the variants' table, ``ViTConfig``, its functional graph and the model that carries it.

Below the weights (which read ``model.vit_config``) and above the layers (which the graph is made of):
:mod:`~keras_vit.architecture.variants` (sizes of the paper's models, as data),
:mod:`~keras_vit.architecture.arguments` (argument checks), :mod:`~keras_vit.architecture.config`
(``ViTConfig``), :mod:`~keras_vit.architecture.graph` (the layers a config describes),
:mod:`~keras_vit.architecture.model` (``VisionTransformer``), :mod:`~keras_vit.architecture.legacy`
(files written before the configuration), :mod:`~keras_vit.architecture.params` (parameter counts).
"""
