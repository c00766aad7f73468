"""Hugging Face transformers' ViT (``save_pretrained`` folders) -> the original checkpoint layout.

``ViTModel`` / ``ViTForImageClassification``
(``transformers/models/vit/modeling_vit.py``) keep query, key and value as
separate ``nn.Linear`` (``(out, in)`` weights), the patch embedding as a
``Conv2d`` ``(D, C, P, P)``, ``layernorm_before`` / ``layernorm_after`` in each
layer, ``vit.layernorm`` at the end, ``classifier`` on the class token and, in
``ViTModel`` files (the imagenet21k ports), ``pooler.dense`` + tanh: the
original pre-logits layer (``convert_vit_timm_to_pytorch.py`` maps
``pre_logits.fc`` to it). The LayerNorm epsilon is ``layer_norm_eps`` of
``config.json`` (1e-12 in Google's ports), which the model must use.

Attention kernels come back with merged head axes, as from
:mod:`keras_vit.weights.timm`; missing query/key/value biases
(``qkv_bias: false``) are zeros.
"""

import re

import numpy as np

from keras_vit.weights.npz import CheckpointError
from keras_vit.weights.timm import finish, patch_kernel

FORMAT = "transformers"
LAYER_NORM_EPSILON = 1e-12  # ViTConfig's default layer_norm_eps
MARKERS = ("embeddings.patch_embeddings.projection.weight",)

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_ATT = "MultiHeadDotProductAttention_1"
_LAYER_KEYS = {
    "layernorm_before.weight": "LayerNorm_0/scale",
    "layernorm_before.bias": "LayerNorm_0/bias",
    "attention.attention.query.weight": f"{_ATT}/query/kernel",
    "attention.attention.query.bias": f"{_ATT}/query/bias",
    "attention.attention.key.weight": f"{_ATT}/key/kernel",
    "attention.attention.key.bias": f"{_ATT}/key/bias",
    "attention.attention.value.weight": f"{_ATT}/value/kernel",
    "attention.attention.value.bias": f"{_ATT}/value/bias",
    "attention.output.dense.weight": f"{_ATT}/out/kernel",
    "attention.output.dense.bias": f"{_ATT}/out/bias",
    "layernorm_after.weight": "LayerNorm_2/scale",
    "layernorm_after.bias": "LayerNorm_2/bias",
    "intermediate.dense.weight": "MlpBlock_3/Dense_0/kernel",
    "intermediate.dense.bias": "MlpBlock_3/Dense_0/bias",
    "output.dense.weight": "MlpBlock_3/Dense_1/kernel",
    "output.dense.bias": "MlpBlock_3/Dense_1/bias",
}
_TOP_KEYS = {
    "embeddings.cls_token": "cls",
    "embeddings.position_embeddings": "Transformer/posembed_input/pos_embedding",
    "embeddings.patch_embeddings.projection.bias": "embedding/bias",
    "layernorm.weight": "Transformer/encoder_norm/scale",
    "layernorm.bias": "Transformer/encoder_norm/bias",
    "pooler.dense.weight": "pre_logits/kernel",
    "pooler.dense.bias": "pre_logits/bias",
    "classifier.weight": "head/kernel",
    "classifier.bias": "head/bias",
}
_IGNORED = ("embeddings.mask_token",)  # masked-image-modelling input, unused for classification


def _strip(key):
    return key[len("vit."):] if key.startswith("vit.") else key


def matches(keys):
    """Whether a state dict with these keys is a transformers ViT (with or without the ``vit.`` prefix).

    Example:
    >>> matches(["vit.embeddings.patch_embeddings.projection.weight"]), matches(["patch_embed.proj.weight"])
    (True, False)
    """
    keys = {_strip(k) for k in keys}
    return all(marker in keys for marker in MARKERS)


def to_original(tensors, path="<arrays>"):
    """Rename and transpose a transformers ViT state dict into the original ``.npz`` layout.

    Example:
    >>> out = to_original({"vit.embeddings.patch_embeddings.projection.weight": np.zeros((8, 3, 4, 4)),
    ...                    "classifier.weight": np.zeros((10, 8))})
    >>> out["embedding/kernel"].shape, out["head/kernel"].shape
    ((4, 4, 3, 8), (8, 10))
    """
    out = {}
    unknown = []
    for key, array in tensors.items():
        short = _strip(key)
        layer = _LAYER.match(short)
        if short == "embeddings.patch_embeddings.projection.weight":
            out["embedding/kernel"] = patch_kernel(key, array, path)
        elif short in _TOP_KEYS:
            out[_TOP_KEYS[short]] = array.T if short.endswith("dense.weight") or short == "classifier.weight" else array
        elif layer and layer[2] in _LAYER_KEYS:
            out[f"Transformer/encoderblock_{layer[1]}/{_LAYER_KEYS[layer[2]]}"] = array.T if array.ndim == 2 else array
        elif short not in _IGNORED:
            unknown.append(key)
    return finish(out, unknown, path, "transformers ViT")


def settings(config, path="<config>"):
    """What a transformers ``config.json`` says: heads, epsilon, sizes to check, labels.

    Raises:
        CheckpointError: a ``model_type`` other than ``"vit"``, or a
            ``hidden_act`` other than the exact GELU.

    Example:
    >>> s = settings({"model_type": "vit", "layer_norm_eps": 1e-12, "num_attention_heads": 3,
    ...               "id2label": {"1": "dog", "0": "cat"}})
    >>> s["layer_norm_epsilon"], s["num_heads"], s["class_names"]
    (1e-12, 3, ['cat', 'dog'])
    """
    model_type = config.get("model_type")
    if model_type != "vit":
        raise CheckpointError(
            f"{path!r} describes a transformers model of type {model_type!r}; keras_vit reads model_type 'vit' "
            "(ViTModel, ViTForImageClassification)."
        )
    act = config.get("hidden_act", "gelu")
    if act != "gelu":
        raise CheckpointError(
            f"{path!r} has hidden_act={act!r}; keras_vit's ViT uses the exact (erf) GELU, transformers' 'gelu'."
        )
    labels = config.get("id2label") or {}
    names = [str(labels[k]) for k in sorted(labels, key=int)]
    if all(re.fullmatch(r"LABEL_\d+", name) for name in names):  # transformers' placeholder labels
        names = []
    image_size = config.get("image_size", 224)
    patch_size = config.get("patch_size", 16)
    return {
        "architecture": (config.get("architectures") or ["ViTModel"])[0],
        "num_heads": config.get("num_attention_heads", 12),
        "layer_norm_epsilon": float(config.get("layer_norm_eps", LAYER_NORM_EPSILON)),
        "class_names": names or None,
        "expected": {  # config field -> value the weights must agree with
            "hidden_size": config.get("hidden_size", 768),
            "num_hidden_layers": config.get("num_hidden_layers", 12),
            "intermediate_size": config.get("intermediate_size", 3072),
            "patch_size": patch_size,
            "image_size": image_size,
            "num_channels": config.get("num_channels", 3),
            "qkv_bias": config.get("qkv_bias", True),
        },
    }


def check_config(expected, shapes, has_qkv_bias, path):
    """Refuse weights whose shapes disagree with their ``config.json`` (naming the field and both values).

    Example:
    >>> check_config({"hidden_size": 8}, {"embedding/kernel": (4, 4, 3, 16)}, True, "m")
    Traceback (most recent call last):
    ...
    keras_vit.weights.npz.CheckpointError: 'm': config.json says hidden_size=8 but the weights have 16.
    """
    kernel = shapes.get("embedding/kernel")
    found = {}
    if kernel is not None:
        found.update(patch_size=kernel[0], num_channels=kernel[2], hidden_size=kernel[3])
        posemb = shapes.get("Transformer/posembed_input/pos_embedding")
        if posemb is not None:
            side = int(round(np.sqrt(posemb[1] - 1)))
            found["image_size"] = side * kernel[0]
    found["num_hidden_layers"] = len({k.split("/")[1] for k in shapes if k.startswith("Transformer/encoderblock_")})
    dense = shapes.get("Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel")
    if dense is not None:
        found["intermediate_size"] = dense[-1]
    found["qkv_bias"] = has_qkv_bias
    for field, value in expected.items():
        have = found.get(field)
        want = tuple(value) if isinstance(value, list) else value
        if field == "image_size" and isinstance(want, tuple):
            want = want[0]
        if have is not None and have != want:
            raise CheckpointError(f"{path!r}: config.json says {field}={value!r} but the weights have {have!r}.")
