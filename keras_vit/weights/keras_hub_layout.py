"""keras-hub's ViT presets on disk: file names, class names, and where each weight lies in the ``.weights.h5`` files.

A keras-hub preset (``keras_hub/src/utils/preset_utils.py``) is a folder: ``config.json`` (the backbone,
``keras.saving.serialize_keras_object``), ``model.weights.h5`` (``backbone.save_weights``; or
``model.weights.json`` with shards ``model_00000.weights.h5``...), ``metadata.json``, and for a task
``task.json``, ``task.weights.h5`` (the task's weights that are not the backbone's), ``preprocessor.json``
and ``image_converter.json``.

The variable paths are those Keras 3 writes (``keras/src/saving/saving_lib.py``: ``_save_state`` walks a
functional model's ``layers`` first, then every attribute in sorted order, private ones last, and names a
layer inside a list by its class name in snake case, ``_get_unique_name`` adding ``_1``, ``_2``...; a layer's
own variables go to ``<path>/vars/<i>`` in creation order, ``H5IOStore``, with the layer's name as the attribute
``name``). keras-hub's ``ViTBackbone`` (``keras_hub/src/models/vit/vit_backbone.py``, ``vit_layers.py``) is a
functional model of ``InputLayer``, ``ViTPatchingAndEmbedding`` and ``ViTEncoder`` (:func:`backbone_groups`);
``ViTImageClassifier`` (``vit_image_classifier.py``) a functional model whose ``save_task_weights`` skips the
backbone's layers (:func:`task_groups`). Its tensors are the original checkpoint's in the original layouts (Flax's
``(in, out)`` kernels, the attention's heads apart), so the mapping is a renaming.
"""

from keras_vit.weights.mapping import POSEMB_KEY

CONFIG_FILE = "config.json"
MODEL_WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
TASK_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
PREPROCESSOR_FILE = "preprocessor.json"
IMAGE_CONVERTER_FILE = "image_converter.json"
METADATA_FILE = "metadata.json"
README_FILE = "README.md"

BACKBONE = "ViTBackbone"
TASK = "ViTImageClassifier"
PREPROCESSOR = "ViTImageClassifierPreprocessor"
IMAGE_CONVERTER = "ViTImageConverter"
MODULES = {
    BACKBONE: "keras_hub.src.models.vit.vit_backbone",
    TASK: "keras_hub.src.models.vit.vit_image_classifier",
    PREPROCESSOR: "keras_hub.src.models.vit.vit_image_classifier_preprocessor",
    IMAGE_CONVERTER: "keras_hub.src.models.vit.vit_image_converter",
}

_EMBED = "layers/vi_t_patching_and_embedding"
_ENCODER = "layers/vi_t_encoder"
_ATT = "MultiHeadDotProductAttention_1"


def block_path(i):
    """The group of encoder block ``i`` (0-based): Keras names the list's layers ``vi_t_encoder_block``, ``_1``...

    Example:
    >>> block_path(0), block_path(2)
    ('layers/vi_t_encoder/encoder_layers/vi_t_encoder_block', 'layers/vi_t_encoder/encoder_layers/vi_t_encoder_block_2')
    """
    return f"{_ENCODER}/encoder_layers/vi_t_encoder_block" + (f"_{i}" if i else "")


def backbone_groups(num_layers, *, class_token=True, mha_bias=True, mlp_bias=True, patch_bias=True):
    """``[(group, layer name, [canonical key, ...]), ...]``: every ``vars`` group of a ``ViTBackbone``'s
    ``model.weights.h5`` (those without variables too, as Keras writes them), the name Keras stores with it, and the
    original checkpoint keys of its variables in order: the class token, the patch ``Conv2D``, the position
    ``Embedding`` ``(tokens, D)``; in each block two LayerNorms, ``MultiHeadAttention``'s ``EinsumDense``
    (``(D, heads, head_dim)``, ``(heads, head_dim, D)``) and the MLP; the final LayerNorm.

    Example:
    >>> groups = backbone_groups(1)
    >>> [g for g in groups if g[0].endswith("query_dense/vars")]  # doctest: +NORMALIZE_WHITESPACE
    [('layers/vi_t_encoder/encoder_layers/vi_t_encoder_block/mha/query_dense/vars', 'query',
      ['Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel',
       'Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/bias'])]
    """
    groups = [
        ("vars", "vi_t_backbone", []),
        ("layers/input_layer/vars", "images", []),
        (f"{_EMBED}/vars", "vit_patching_and_embedding", ["cls"] if class_token else []),
        (f"{_EMBED}/patch_embedding/vars", "patch_embedding", ["embedding/kernel"] + (["embedding/bias"] if patch_bias else [])),
        (f"{_EMBED}/position_embedding/vars", "position_embedding", [POSEMB_KEY]),
        (f"{_ENCODER}/vars", "vit_encoder", []),
        (f"{_ENCODER}/dropout/vars", "dropout", []),
    ]
    for i in range(num_layers):
        block, key = block_path(i), f"Transformer/encoderblock_{i}"
        groups += [
            (f"{block}/vars", f"transformer_block_{i + 1}", []),
            (f"{block}/dropout/vars", "dropout", []),
            (f"{block}/layer_norm_1/vars", "ln_1", [f"{key}/LayerNorm_0/scale", f"{key}/LayerNorm_0/bias"]),
            (f"{block}/layer_norm_2/vars", "ln_2", [f"{key}/LayerNorm_2/scale", f"{key}/LayerNorm_2/bias"]),
            (f"{block}/mha/vars", "mha", []),
            (f"{block}/mha/_dropout_layer/vars", "dropout", []),
            (f"{block}/mha/_softmax/vars", "softmax", []),
        ]
        for dense, name, part in (("query_dense", "query", "query"), ("key_dense", "key", "key"),
                                  ("value_dense", "value", "value"), ("output_dense", "attention_output", "out")):
            keys = [f"{key}/{_ATT}/{part}/kernel"] + ([f"{key}/{_ATT}/{part}/bias"] if mha_bias else [])
            groups.append((f"{block}/mha/{dense}/vars", name, keys))
        groups += [
            (f"{block}/mlp/vars", "mlp", []),
            (f"{block}/mlp/dense_1/vars", "dense_1",
             [f"{key}/MlpBlock_3/Dense_0/kernel"] + ([f"{key}/MlpBlock_3/Dense_0/bias"] if mlp_bias else [])),
            (f"{block}/mlp/dense_2/vars", "dense_2",
             [f"{key}/MlpBlock_3/Dense_1/kernel"] + ([f"{key}/MlpBlock_3/Dense_1/bias"] if mlp_bias else [])),
            (f"{block}/mlp/dropout/vars", "dropout", []),
        ]
    groups.append((f"{_ENCODER}/layer_norm/vars", "ln", ["Transformer/encoder_norm/scale", "Transformer/encoder_norm/bias"]))
    return groups


def task_groups(pre_logits):
    """The groups of a ``ViTImageClassifier``'s ``task.weights.h5``: its ``Dense`` layers by class name in graph
    order, ``layers/dense`` (the tanh pre-logits, with ``intermediate_dim``) and ``layers/dense_1``, else
    ``layers/dense``, the ``predictions`` head.

    Example:
    >>> [(g, n) for g, n, keys in task_groups(True) if keys]
    [('layers/dense/vars', 'pre_logits'), ('layers/dense_1/vars', 'predictions')]
    """
    dense = ["layers/dense/vars", "layers/dense_1/vars"] if pre_logits else ["layers/dense/vars"]
    groups = [("vars", "vi_t_image_classifier", [])]
    if pre_logits:
        groups.append((dense[0], "pre_logits", ["pre_logits/kernel", "pre_logits/bias"]))
    groups += [
        (dense[-1], "predictions", ["head/kernel", "head/bias"]),
        ("layers/dropout/vars", "output_dropout", []),
        ("preprocessor/vars", "vi_t_image_classifier_preprocessor", []),
        ("preprocessor/image_converter/vars", "vi_t_image_converter", []),
        ("preprocessor/image_converter/resizing/vars", "resizing", []),
    ]
    return groups


def scale_offset(mean, std):
    """keras-hub's ``ImageConverter`` ``scale`` and ``offset`` per channel for inputs ``(x / 255 - mean) / std``.

    ``x * scale + offset == (x / 255 - mean) / std``: ``scale = 1 / (255 std)``, ``offset = -mean / std``
    (keras-hub's own ``convert_vit_checkpoints.py``: ``scale = rescale_factor / std``, ``offset = -mean / std``).

    Example:
    >>> scale_offset([0.5] * 3, [0.5] * 3)
    ([0.00784313725490196, 0.00784313725490196, 0.00784313725490196], [-1.0, -1.0, -1.0])
    """
    return [1.0 / (255.0 * s) for s in std], [-m / s for m, s in zip(mean, std)]


def mean_std(scale, offset):
    """The inverse of :func:`scale_offset`: ``std = 1 / (255 scale)``, ``mean = -offset / (255 scale)``.

    Example:
    >>> mean, std = mean_std(*scale_offset([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
    >>> [round(v, 6) for v in mean + std]
    [0.485, 0.456, 0.406, 0.229, 0.224, 0.225]
    """
    return [-o / (255.0 * s) for s, o in zip(scale, offset)], [1.0 / (255.0 * s) for s in scale]
