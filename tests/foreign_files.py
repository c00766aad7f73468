"""Writers of timm and transformers files (``.safetensors``, ``config.json``) for the tests, offline and torch-free."""

import json
import os

import numpy as np
import safetensors.numpy as safetensors_numpy

from helpers import TINY

def timm_state_dict(p, num_layers=2, d=32, qkv_bias=True):
    """The original arrays in timm's layout, as timm's own ``_load_weights`` maps them (``qkv_bias=False``: no q/k/v bias)."""
    t = {"cls_token": p["cls"], "pos_embed": p["Transformer/posembed_input/pos_embedding"],
         "patch_embed.proj.weight": p["embedding/kernel"].transpose(3, 2, 0, 1), "patch_embed.proj.bias": p["embedding/bias"],
         "norm.weight": p["Transformer/encoder_norm/scale"], "norm.bias": p["Transformer/encoder_norm/bias"],
         "head.weight": p["head/kernel"].T, "head.bias": p["head/bias"]}
    for i in range(num_layers):
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        t[f"blocks.{i}.attn.qkv.weight"] = np.concatenate([p[a + n + "/kernel"].reshape(d, d).T for n in ("query", "key", "value")])
        if qkv_bias:
            t[f"blocks.{i}.attn.qkv.bias"] = np.concatenate([p[a + n + "/bias"].reshape(-1) for n in ("query", "key", "value")])
        t[f"blocks.{i}.attn.proj.weight"] = p[a + "out/kernel"].reshape(d, d).T
        t[f"blocks.{i}.attn.proj.bias"] = p[a + "out/bias"]
        for n, k in (("norm1", "LayerNorm_0"), ("norm2", "LayerNorm_2")):
            t[f"blocks.{i}.{n}.weight"], t[f"blocks.{i}.{n}.bias"] = p[b + k + "/scale"], p[b + k + "/bias"]
        for n, k in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            t[f"blocks.{i}.mlp.{n}.weight"] = p[b + "MlpBlock_3/" + k + "/kernel"].T
            t[f"blocks.{i}.mlp.{n}.bias"] = p[b + "MlpBlock_3/" + k + "/bias"]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in t.items()}


def transformers_folder(folder, p, num_layers=2, d=32, heads=4, mlp=64, num_classes=5, eps=1e-12, qkv_bias=True, **config):
    """A ``save_pretrained`` folder of ``ViTForImageClassification``, written from modeling_vit's key names.

    ``qkv_bias=False`` leaves out the query/key/value biases (and says so in config.json); ``config`` sets
    (or, with None, removes) other fields of config.json (``hidden_act="gelu_new"``, ``image_size=[32, 48]``).
    """
    t = {"vit.embeddings.cls_token": p["cls"],
         "vit.embeddings.position_embeddings": p["Transformer/posembed_input/pos_embedding"],
         "vit.embeddings.patch_embeddings.projection.weight": p["embedding/kernel"].transpose(3, 2, 0, 1),
         "vit.embeddings.patch_embeddings.projection.bias": p["embedding/bias"],
         "vit.layernorm.weight": p["Transformer/encoder_norm/scale"], "vit.layernorm.bias": p["Transformer/encoder_norm/bias"],
         "classifier.weight": p["head/kernel"].T, "classifier.bias": p["head/bias"]}
    for i in range(num_layers):
        b, e = f"Transformer/encoderblock_{i}/", f"vit.encoder.layer.{i}."
        a = b + "MultiHeadDotProductAttention_1/"
        for n in ("query", "key", "value"):  # nn.Linear stores (out, in)
            t[e + f"attention.attention.{n}.weight"] = p[a + n + "/kernel"].reshape(d, d).T
            if qkv_bias:
                t[e + f"attention.attention.{n}.bias"] = p[a + n + "/bias"].reshape(-1)
        t[e + "attention.output.dense.weight"] = p[a + "out/kernel"].reshape(d, d).T
        t[e + "attention.output.dense.bias"] = p[a + "out/bias"]
        for n, k in (("layernorm_before", "LayerNorm_0"), ("layernorm_after", "LayerNorm_2")):
            t[e + n + ".weight"], t[e + n + ".bias"] = p[b + k + "/scale"], p[b + k + "/bias"]
        t[e + "intermediate.dense.weight"] = p[b + "MlpBlock_3/Dense_0/kernel"].T
        t[e + "intermediate.dense.bias"] = p[b + "MlpBlock_3/Dense_0/bias"]
        t[e + "output.dense.weight"] = p[b + "MlpBlock_3/Dense_1/kernel"].T
        t[e + "output.dense.bias"] = p[b + "MlpBlock_3/Dense_1/bias"]
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file({k: np.ascontiguousarray(v, np.float32) for k, v in t.items()},
                                os.path.join(folder, "model.safetensors"))
    written = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": d,
               "num_hidden_layers": num_layers, "num_attention_heads": heads, "intermediate_size": mlp,
               "patch_size": TINY["patch_size"], "image_size": TINY["image_size"], "num_channels": 3, "qkv_bias": qkv_bias,
               "layer_norm_eps": eps, "hidden_act": "gelu", "id2label": {str(i): f"class {i}" for i in range(num_classes)}}
    written.update(config)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({k: v for k, v in written.items() if v is not None}, f)
    return str(folder)


# timm's registration of the paper's ViT-B/16 with the sizes of helpers.vit_checkpoint() over it, as a timm
# config.json's model_args does: a real architecture name (keras_vit refuses the names timm does not register)
TINY_TIMM_ARGS = {"embed_dim": 32, "depth": 2, "num_heads": 4, "patch_size": 8, "img_size": 32, "mlp_ratio": 2.0}
TINY_TIMM_CONFIG = {"architecture": "vit_base_patch16_224", "model_args": TINY_TIMM_ARGS}


def transformers5_vision_model(state_dict):
    """A transformers 4.x ``CLIPVisionModel`` / ``SiglipVisionModel`` / ``Siglip2VisionModel`` state dict in the layout
    transformers 5 writes: no ``vision_model.`` prefix (its ``*VisionModel`` holds ``embeddings``, ``encoder``,
    ``post_layernorm``, ``head`` itself, where 4.x wrapped a ``*VisionTransformer`` as ``vision_model``)."""
    return {key.removeprefix("vision_model."): value for key, value in state_dict.items()}


def timm_file(folder, params, config=None, qkv_bias=True, num_layers=2, d=32):
    """A timm ``model.safetensors`` of ``params``, with ``config.json`` beside it when ``config`` is given."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.safetensors")
    safetensors_numpy.save_file(timm_state_dict(params, num_layers=num_layers, d=d, qkv_bias=qkv_bias), path)
    if config is not None:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
    return path



def timm_hybrid_state_dict(p, block_units, num_layers=2, d=32):
    """An original hybrid's arrays in timm's layout (``HybridEmbed`` with ``_resnetv2(block_units)``), as timm's
    ``vision_transformer._load_weights`` maps them: ``patch_embed.backbone.stem.*`` (``patch_embed.backbone.*`` for
    ``block_units=()``, timm's stem-only backbone), ``stages.{i}.blocks.{j}.*``, conv kernels ``(O, I, kh, kw)``."""
    t = timm_state_dict(p, num_layers=num_layers, d=d)
    backbone = "patch_embed.backbone." + ("stem." if block_units else "")
    t[backbone + "conv.weight"] = p["conv_root/kernel"].transpose(3, 2, 0, 1)
    t[backbone + "norm.weight"], t[backbone + "norm.bias"] = p["gn_root/scale"], p["gn_root/bias"]
    for i, units in enumerate(block_units):
        for j in range(units):
            u, b = f"block{i + 1}/unit{j + 1}/", f"patch_embed.backbone.stages.{i}.blocks.{j}."
            names = [(f"conv{r}", f"gn{r}", f"conv{r}", f"norm{r}") for r in (1, 2, 3)]
            if u + "conv_proj/kernel" in p:
                names.append(("conv_proj", "gn_proj", "downsample.conv", "downsample.norm"))
            for conv, gn, timm_conv, timm_norm in names:
                t[b + timm_conv + ".weight"] = p[u + conv + "/kernel"].transpose(3, 2, 0, 1)
                t[b + timm_norm + ".weight"], t[b + timm_norm + ".bias"] = p[u + gn + "/scale"], p[u + gn + "/bias"]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in t.items()}


def timm_hybrid_folder(folder, p, block_units, architecture, image_size, num_classes=5, extra=None, **model_args):
    """A timm Hub folder of a hybrid as ``timm.models.save_for_hf`` writes it: ``model.safetensors`` in timm's key
    names and ``config.json`` (``architecture``, ``model_args`` with the tiny sizes, ``pretrained_cfg``); ``extra``:
    more tensors (``{timm key: array}``) written with them."""
    os.makedirs(folder, exist_ok=True)
    state = timm_hybrid_state_dict(p, block_units)
    state.update(extra or {})
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    if architecture is None:  # a bare state dict: keras_vit reads what its keys show, and says so
        return str(folder)
    config = {"architecture": architecture, "num_classes": num_classes, "num_features": 32, "global_pool": "token",
              "model_args": {"in_chans": 3, "num_classes": num_classes, "global_pool": "token",
                             "img_size": [image_size, image_size], "embed_dim": 32, "depth": 2, "num_heads": 4,
                             "mlp_ratio": 2.0, **model_args},
              "pretrained_cfg": {"tag": "test", "input_size": [3, image_size, image_size], "mean": [0.5] * 3,
                                 "std": [0.5] * 3, "num_classes": num_classes,
                                 "first_conv": "patch_embed.backbone." + ("stem.conv" if block_units else "conv")}}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    return str(folder)
