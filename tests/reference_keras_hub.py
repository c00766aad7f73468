"""An independent NumPy forward pass of keras-hub's ViT, and keras-hub presets written in its own layout.

Written from keras-hub's ``keras_hub/src/models/vit/`` (``vit_layers.py``: ``ViTPatchingAndEmbedding``,
``ViTEncoderBlock``, ``MLP``, ``ViTEncoder``; ``vit_image_classifier.py``; the ``ImageConverter``'s
``x * scale + offset``) and ``keras_hub/src/utils/preset_utils.py`` (the preset's files), with the variable
paths Keras 3's ``save_weights`` gives those layers (``keras/src/saving/saving_lib.py``). It shares no code
with keras_vit (neither its reader nor its writer of presets): it reads ``{h5 path: array}`` and writes the
files itself with h5py. The elementwise functions come from :mod:`reference`.
"""

import json
import math
import os

import numpy as np

from reference import gelu, layer_norm, softmax

EMBED = "layers/vi_t_patching_and_embedding"
ENCODER = "layers/vi_t_encoder"


def block(i):
    return f"{ENCODER}/encoder_layers/vi_t_encoder_block" + (f"_{i}" if i else "")


def random_preset_weights(config, num_classes=5, intermediate_dim=None, seed=0):
    """``(backbone {h5 path: array}, task {h5 path: array})`` of a random ViT of ``config`` (keras-hub's names)."""
    rng = np.random.default_rng(seed)
    d, mlp, heads = config["hidden_dim"], config["mlp_dim"], config["num_heads"]
    hd = d // heads
    h, w, c = config["image_shape"]
    p = config["patch_size"][0] if isinstance(config["patch_size"], list) else config["patch_size"]
    cls = config.get("use_class_token", True)
    tokens = (h // p) * (w // p) + int(cls)
    r = lambda *shape, s=0.2: rng.normal(0, s, shape).astype("float32")  # noqa: E731
    bb = {
        f"{EMBED}/patch_embedding/vars/0": r(p, p, c, d, s=0.05),
        f"{EMBED}/position_embedding/vars/0": r(tokens, d),
        f"{ENCODER}/layer_norm/vars/0": 1 + r(d, s=0.1),
        f"{ENCODER}/layer_norm/vars/1": r(d, s=0.1),
    }
    if config.get("use_patch_bias", True):
        bb[f"{EMBED}/patch_embedding/vars/1"] = r(d)
    if cls:
        bb[f"{EMBED}/vars/0"] = r(1, 1, d)
    for i in range(config["num_layers"]):
        b = block(i)
        for ln in ("layer_norm_1", "layer_norm_2"):
            bb[f"{b}/{ln}/vars/0"], bb[f"{b}/{ln}/vars/1"] = 1 + r(d, s=0.1), r(d, s=0.1)
        for name in ("query_dense", "key_dense", "value_dense"):
            bb[f"{b}/mha/{name}/vars/0"] = r(d, heads, hd)
            if config.get("use_mha_bias", True):
                bb[f"{b}/mha/{name}/vars/1"] = r(heads, hd)
        bb[f"{b}/mha/output_dense/vars/0"] = r(heads, hd, d)
        if config.get("use_mha_bias", True):
            bb[f"{b}/mha/output_dense/vars/1"] = r(d)
        bb[f"{b}/mlp/dense_1/vars/0"], bb[f"{b}/mlp/dense_2/vars/0"] = r(d, mlp), r(mlp, d)
        if config.get("use_mlp_bias", True):
            bb[f"{b}/mlp/dense_1/vars/1"], bb[f"{b}/mlp/dense_2/vars/1"] = r(mlp), r(d)
    task = {}
    width = d
    if intermediate_dim:
        task["layers/dense/vars/0"], task["layers/dense/vars/1"] = r(d, intermediate_dim), r(intermediate_dim)
        width = intermediate_dim
    head = "layers/dense_1" if intermediate_dim else "layers/dense"
    task[f"{head}/vars/0"], task[f"{head}/vars/1"] = r(width, num_classes), r(num_classes)
    return bb, task


def logits(images, config, backbone, task=None, task_config=None, scale=None, offset=None):
    """keras-hub's ``ViTImageClassifier.predict`` on ``[0, 255]`` images (no resize: they have the preset's size)."""
    x = np.asarray(images, np.float64)
    if scale is not None:
        x = x * np.asarray(scale)
    if offset is not None:
        x = x + np.asarray(offset)
    eps = config.get("layer_norm_epsilon", 1e-6)
    heads = config["num_heads"]
    out = []
    for image in x:
        kernel = backbone[f"{EMBED}/patch_embedding/vars/0"]  # (P, P, C, D), Conv2D stride P, "valid"
        p = kernel.shape[0]
        rows, cols = image.shape[0] // p, image.shape[1] // p
        z = np.stack([
            np.einsum("hwc,hwcd->d", image[i * p:(i + 1) * p, j * p:(j + 1) * p], kernel)
            + backbone.get(f"{EMBED}/patch_embedding/vars/1", 0.0)
            for i in range(rows) for j in range(cols)
        ])
        if config.get("use_class_token", True):
            z = np.concatenate([backbone[f"{EMBED}/vars/0"][0], z])
        z = z + backbone[f"{EMBED}/position_embedding/vars/0"]
        for i in range(config["num_layers"]):
            b = block(i)
            y = layer_norm(z, backbone[f"{b}/layer_norm_1/vars/0"], backbone[f"{b}/layer_norm_1/vars/1"], eps)
            q, k, v = (np.einsum("nd,dhk->nhk", y, backbone[f"{b}/mha/{n}_dense/vars/0"])
                       + backbone.get(f"{b}/mha/{n}_dense/vars/1", 0.0) for n in ("query", "key", "value"))
            a = softmax(np.einsum("nhk,mhk->hnm", q / math.sqrt(q.shape[-1]), k))
            att = np.einsum("hnm,mhk->nhk", a, v)
            z = z + np.einsum("nhk,hkd->nd", att, backbone[f"{b}/mha/output_dense/vars/0"]) + backbone.get(f"{b}/mha/output_dense/vars/1", 0.0)
            y = layer_norm(z, backbone[f"{b}/layer_norm_2/vars/0"], backbone[f"{b}/layer_norm_2/vars/1"], eps)
            y = gelu(y @ backbone[f"{b}/mlp/dense_1/vars/0"] + backbone.get(f"{b}/mlp/dense_1/vars/1", 0.0))
            z = z + y @ backbone[f"{b}/mlp/dense_2/vars/0"] + backbone.get(f"{b}/mlp/dense_2/vars/1", 0.0)
        z = layer_norm(z, backbone[f"{ENCODER}/layer_norm/vars/0"], backbone[f"{ENCODER}/layer_norm/vars/1"], eps)
        if task is None:
            out.append(z)
            continue
        pooled = z[0] if task_config.get("pooling", "token") == "token" else z.mean(0)
        head = "layers/dense"
        if task_config.get("intermediate_dim"):
            pooled = np.tanh(pooled @ task["layers/dense/vars/0"] + task["layers/dense/vars/1"])
            head = "layers/dense_1"
        y = pooled @ task[f"{head}/vars/0"] + task[f"{head}/vars/1"]
        out.append(softmax(y) if task_config.get("activation") == "softmax" else y)
    return np.stack(out).astype("float32")


def _serialized(class_name, module, config):
    return {"module": module, "class_name": class_name, "config": config, "registered_name": f"keras_hub>{class_name}"}


def _h5(path, arrays, names):
    import h5py

    with h5py.File(path, "w") as f:
        for group, name in names.items():
            f.require_group(group).attrs["name"] = name
        for key, array in arrays.items():
            f.create_dataset(key, data=array)


# the dtype every keras-hub layer's get_config writes (a serialised DTypePolicy)
FLOAT32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}


def write_preset(folder, config, backbone, task=None, task_config=None, scale=None, offset=None, image_size=None, shards=None):
    """A preset folder as keras-hub's ``save_to_preset`` writes it (``shards``: split ``model.weights.h5`` in two)."""
    os.makedirs(folder, exist_ok=True)
    float32 = FLOAT32
    bb_config = _serialized("ViTBackbone", "keras_hub.src.models.vit.vit_backbone", {
        "name": "vi_t_backbone", "trainable": True, "dtype": float32, "dropout_rate": 0.0, "attention_dropout": 0.0,
        "layer_norm_epsilon": 1e-6, "use_mha_bias": True, "use_mlp_bias": True, "use_class_token": True,
        "use_patch_bias": True, **config})
    dump = lambda name, value: open(os.path.join(folder, name), "w").write(json.dumps(value, indent=4))  # noqa: E731
    dump("config.json", bb_config)
    dump("metadata.json", {"keras_version": "3.15.1", "keras_hub_version": "0.32.0", "parameter_count": 0,
                           "date_saved": "2026-01-01@00:00:00", "tasks": ["ImageClassifier"]})
    names = {"vars": "vi_t_backbone", f"{EMBED}/vars": "vit_patching_and_embedding"}
    if shards:
        keys = sorted(backbone)
        half = {f"model_0000{i}.weights.h5": {k: backbone[k] for k in part} for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:]))}
        weight_map = {}
        for file, part in half.items():
            _h5(os.path.join(folder, file), part, names)
            for key in part:
                weight_map["/" + key.rsplit("/", 1)[0]] = file
        dump("model.weights.json", {"metadata": {"total_size": 0}, "weight_map": weight_map})
    else:
        _h5(os.path.join(folder, "model.weights.h5"), backbone, names)
    converter = _serialized("ViTImageConverter", "keras_hub.src.models.vit.vit_image_converter", {
        "name": "vi_t_image_converter", "trainable": True, "dtype": float32,
        "image_size": list(image_size or config["image_shape"][:2]), "scale": scale, "offset": offset,
        "interpolation": "bilinear", "antialias": False, "crop_to_aspect_ratio": True, "pad_to_aspect_ratio": False,
        "bounding_box_format": "yxyx"})
    dump("image_converter.json", converter)
    if task is None:
        return folder
    preprocessor = _serialized("ViTImageClassifierPreprocessor", "keras_hub.src.models.vit.vit_image_classifier_preprocessor", {
        "name": "vi_t_image_classifier_preprocessor", "trainable": True, "dtype": float32,
        "image_converter": converter, "config_file": "preprocessor.json"})
    dump("preprocessor.json", preprocessor)
    dump("task.json", _serialized("ViTImageClassifier", "keras_hub.src.models.vit.vit_image_classifier", {
        "backbone": bb_config, "preprocessor": preprocessor, "name": "vi_t_image_classifier",
        "num_classes": task_config.get("num_classes", 5), "pooling": task_config.get("pooling", "token"),
        "activation": task_config.get("activation"), "dropout": 0.0, "intermediate_dim": task_config.get("intermediate_dim")}))
    head = {"layers/dense_1/vars": "predictions", "layers/dense/vars": "pre_logits"} if task_config.get("intermediate_dim") else {"layers/dense/vars": "predictions"}
    _h5(os.path.join(folder, "task.weights.h5"), task, {"vars": "vi_t_image_classifier", "layers/dropout/vars": "output_dropout", **head})
    return folder


# ----------------------------------------------------------------- the ViT family: DINOv2, SigLIP's and CLIP's image towers
# Written from keras-hub 0.32's dinov2_layers.py / dinov2_backbone.py, siglip_layers.py / siglip_vision_encoder.py /
# siglip_backbone.py and clip_layers.py / clip_vision_encoder.py / clip_backbone.py; the h5 paths are those keras-hub's
# own save_to_preset writes (checked by benchmarks/keras_hub_presets.py --family).

DINO_EMBED, DINO_BLOCK = "layers/dinov2_embedding", "layers/dinov2_encoder/layers/dinov2_layer"
SIG = "layers/sig_lip_vision_encoder/layers"
CLIPV = "layers/clip_vision_encoder/layers"
DEIT_EMBED, DEIT_BLOCK = "layers/dei_t_embeddings", "layers/dei_t_encoder/encoder_layers/dei_t_encoder_block"


def _nth(prefix, i):
    return prefix + (f"_{i}" if i else "")


def _mha_weights(r, group, d, heads):
    hd = d // heads
    out = {}
    for name in ("query", "key", "value"):
        out[f"{group}/{name}_dense/vars/0"], out[f"{group}/{name}_dense/vars/1"] = r(d, heads, hd), r(heads, hd)
    out[f"{group}/output_dense/vars/0"], out[f"{group}/output_dense/vars/1"] = r(heads, hd, d), r(d)
    return out


def _ln(r, group, d):
    return {f"{group}/vars/0": 1 + r(d, s=0.1), f"{group}/vars/1": r(d, s=0.1)}


def _dense(r, group, i, o):
    return {f"{group}/vars/0": r(i, o), f"{group}/vars/1": r(o)}


def family_weights(kind, config, seed=0):
    """``{h5 path: array}`` of a random keras-hub ``DINOV2Backbone`` / ``SigLIPBackbone`` / ``CLIPBackbone`` (text towers too)."""
    rng = np.random.default_rng(seed)
    r = lambda *shape, s=0.2: rng.normal(0, s, shape).astype("float32")  # noqa: E731
    v = config if kind in ("DINOV2Backbone", "DeiTBackbone") else config["vision_encoder"]["config"]
    d, heads, inner, p = v["hidden_dim"], v["num_heads"], v["intermediate_dim"], v["patch_size"]
    n = (v["image_shape"][0] // p) * (v["image_shape"][1] // p)
    w = {}
    if kind == "DINOV2Backbone":
        m = (config["position_embedding_shape"][0] // p) * (config["position_embedding_shape"][1] // p)
        regs, i = config.get("num_register_tokens", 0), 0
        w[f"{DINO_EMBED}/vars/0"] = r(1, 1, d)
        if config.get("use_mask_token", True):
            i += 1
            w[f"{DINO_EMBED}/vars/{i}"] = np.zeros((1, d), "float32")
        if regs:
            i += 1
            w[f"{DINO_EMBED}/vars/{i}"] = r(1, regs, d)
        w[f"{DINO_EMBED}/vars/{i + 1}"] = r(1, n + 1, d, s=5.0)  # interpolated_position_embeddings: recomputed on load
        w[f"{DINO_EMBED}/vars/{i + 2}"] = r(1, m + 1, d)
        w.update(_dense(r, f"{DINO_EMBED}/patch_embeddings/projection", p * p * 3, d))
        w[f"{DINO_EMBED}/patch_embeddings/projection/vars/0"] = r(p, p, 3, d, s=0.05)
        w.update(_ln(r, "layers/layer_normalization", d))
        glu = config.get("use_swiglu_ffn", False)
        h = (int(inner * 2 / 3) + 7) // 8 * 8
        for b in range(config["num_layers"]):
            blk = _nth(DINO_BLOCK, b)
            w.update({**_ln(r, f"{blk}/norm1", d), **_ln(r, f"{blk}/norm2", d), **_mha_weights(r, f"{blk}/attention/attention", d, heads),
                      f"{blk}/layer_scale1/vars/0": r(d, s=0.5), f"{blk}/layer_scale2/vars/0": r(d, s=0.5)})
            w.update({**_dense(r, f"{blk}/mlp/weights_in", d, 2 * h), **_dense(r, f"{blk}/mlp/weights_out", h, d)} if glu else
                     {**_dense(r, f"{blk}/mlp/fc1", d, inner), **_dense(r, f"{blk}/mlp/fc2", inner, d)})
        return w
    if kind == "DeiTBackbone":  # deit_layers.py: DeiTEmbeddings' class_token, distillation_token, position_embedding
        bias = config.get("use_mha_bias", True)
        w.update({f"{DEIT_EMBED}/vars/0": r(1, 1, d), f"{DEIT_EMBED}/vars/1": r(1, 1, d), f"{DEIT_EMBED}/vars/2": r(1, n + 2, d),
                  f"{DEIT_EMBED}/patch_embedding/vars/0": r(p, p, 3, d, s=0.05), f"{DEIT_EMBED}/patch_embedding/vars/1": r(d),
                  **_ln(r, "layers/dei_t_encoder/layer_norm", d)})
        for b in range(config["num_layers"]):
            blk = _nth(DEIT_BLOCK, b)
            mha = _mha_weights(r, f"{blk}/mha", d, heads)
            w.update({**_ln(r, f"{blk}/layer_norm_1", d), **_ln(r, f"{blk}/layer_norm_2", d),
                      **{k: a for k, a in mha.items() if bias or k.endswith("/0")},
                      **_dense(r, f"{blk}/mlp/dense", d, inner), **_dense(r, f"{blk}/output_layer/dense", inner, d)})
        return w
    if kind == "SigLIPBackbone":
        e, hd = f"{SIG}/sig_lip_vision_embedding", f"{SIG}/sig_lip_multi_head_attention_pooling"
        w.update({f"{e}/vars/0": np.arange(n)[None], f"{e}/patch_embedding/vars/0": r(p, p, 3, d, s=0.05),
                  f"{e}/patch_embedding/vars/1": r(d), f"{e}/position_embedding/vars/0": r(n, d), **_ln(r, f"{SIG}/layer_normalization", d),
                  f"{hd}/vars/0": r(1, 1, d), **_mha_weights(r, f"{hd}/attention", d, heads), **_ln(r, f"{hd}/layer_norm", d),
                  **_dense(r, f"{hd}/mlp/fc1", d, inner), **_dense(r, f"{hd}/mlp/fc2", inner, d),
                  "layers/sig_lip_head/vars/0": np.float32(2.3), "layers/sig_lip_head/vars/1": np.float32(-10.0),
                  "layers/sig_lip_text_encoder/layers/dense/vars/0": r(d, d)})
        for b in range(v["num_layers"]):
            blk = _nth(f"{SIG}/sig_lip_encoder_layer", b)
            w.update({**_ln(r, f"{blk}/layer_norm1", d), **_ln(r, f"{blk}/layer_norm2", d), **_mha_weights(r, f"{blk}/self_attn", d, heads),
                      **_dense(r, f"{blk}/mlp/fc1", d, inner), **_dense(r, f"{blk}/mlp/fc2", inner, d)})
        return w
    e = f"{CLIPV}/clip_vision_embedding"
    w.update({f"{e}/vars/0": r(d), f"{e}/vars/1": np.arange(n + 1)[None], f"{e}/patch_embedding/vars/0": r(p, p, 3, d, s=0.05),
              f"{e}/position_embedding/vars/0": r(n + 1, d), **_ln(r, f"{CLIPV}/layer_normalization", d),
              **_ln(r, f"{CLIPV}/layer_normalization_1", d), "layers/dense/vars/0": r(d, config["projection_dim"]),
              "layers/dense_1/vars/0": r(d, config["projection_dim"]), "layers/clip_head/vars/0": np.float32(4.6),
              "layers/clip_text_encoder/layers/layer_normalization/vars/0": r(d)})
    for b in range(v["num_layers"]):
        blk = _nth(f"{CLIPV}/clip_encoder_layer", b)
        w.update({**_ln(r, f"{blk}/layer_norm_1", d), **_ln(r, f"{blk}/layer_norm_2", d), **_mha_weights(r, f"{blk}/attention", d, heads),
                  **_dense(r, f"{blk}/dense_1", d, inner), **_dense(r, f"{blk}/dense_2", inner, d)})
    return w


def _keras_mha(x, w, g, kv=None):
    """Keras MultiHeadAttention (EinsumDense kernels (D, heads, hd); no biases with use_bias=False), query ``x`` over ``kv``."""
    kv = x if kv is None else kv
    q, k, v = (np.einsum("nd,dhk->nhk", a, w[f"{g}/{n}_dense/vars/0"]) + w.get(f"{g}/{n}_dense/vars/1", 0.0)
               for a, n in ((x, "query"), (kv, "key"), (kv, "value")))
    a = softmax(np.einsum("nhk,mhk->hnm", q / math.sqrt(q.shape[-1]), k))
    return np.einsum("nhk,hkd->nd", np.einsum("hnm,mhk->nhk", a, v), w[f"{g}/output_dense/vars/0"]) + w.get(f"{g}/output_dense/vars/1", 0.0)


def _conv(image, kernel, bias=0.0):
    p = kernel.shape[0]
    return np.stack([np.einsum("hwc,hwcd->d", image[i * p:(i + 1) * p, j * p:(j + 1) * p], kernel) + bias
                     for i in range(image.shape[0] // p) for j in range(image.shape[1] // p)])


def _ln_of(x, w, g, eps):
    return layer_norm(x, w[f"{g}/vars/0"], w[f"{g}/vars/1"], eps)


def family_forward(images, kind, config, w, scale=None, offset=None, resized_positions=None):
    """keras-hub's output on ``[0, 255]`` images through the image converter's ``x * scale + offset``: DINOv2's
    every token after ``layernorm``; SigLIP's ``vision_encoder`` (the attention-pooled embedding); CLIP's
    ``get_vision_embeddings`` (the class token after ``layer_norm``, through ``vision_projection``).
    ``resized_positions``: DINOv2's table for ``image_shape`` when it is resampled (what keras-hub computes with
    ``keras.ops.image.resize``; the test passes that call's result)."""
    x = np.asarray(images, np.float64) * np.asarray(1.0 if scale is None else scale) + np.asarray(0.0 if offset is None else offset)
    out = []
    for image in x:
        if kind == "DINOV2Backbone":
            regs = config.get("num_register_tokens", 0)
            last = max(int(k.rsplit("/", 1)[1]) for k in w if k.startswith(f"{DINO_EMBED}/vars/"))
            pos = w[f"{DINO_EMBED}/vars/{last}"][0] if resized_positions is None else resized_positions
            z = _conv(image, w[f"{DINO_EMBED}/patch_embeddings/projection/vars/0"], w[f"{DINO_EMBED}/patch_embeddings/projection/vars/1"])
            z = np.concatenate([w[f"{DINO_EMBED}/vars/0"][0], z]) + pos
            if regs:
                z = np.concatenate([z[:1], w[f"{DINO_EMBED}/vars/{last - 2}"][0], z[1:]])
            glu = config.get("use_swiglu_ffn", False)
            for b in range(config["num_layers"]):
                blk = _nth(DINO_BLOCK, b)
                z = z + _keras_mha(_ln_of(z, w, f"{blk}/norm1", 1e-6), w, f"{blk}/attention/attention") * w[f"{blk}/layer_scale1/vars/0"]
                y = _ln_of(z, w, f"{blk}/norm2", 1e-6)
                if glu:
                    y = y @ w[f"{blk}/mlp/weights_in/vars/0"] + w[f"{blk}/mlp/weights_in/vars/1"]
                    a, g = np.split(y, 2, axis=-1)
                    y = (a / (1 + np.exp(-a))) * g @ w[f"{blk}/mlp/weights_out/vars/0"] + w[f"{blk}/mlp/weights_out/vars/1"]
                else:
                    y = gelu(y @ w[f"{blk}/mlp/fc1/vars/0"] + w[f"{blk}/mlp/fc1/vars/1"]) @ w[f"{blk}/mlp/fc2/vars/0"] + w[f"{blk}/mlp/fc2/vars/1"]
                z = z + y * w[f"{blk}/layer_scale2/vars/0"]
            out.append(_ln_of(z, w, "layers/layer_normalization", 1e-6))
        elif kind == "DeiTBackbone":  # DeiTEmbeddings, DeiTEncoderBlock (ln_1, mha, ln_2, Dense gelu, Dense + residual), ln
            eps = config.get("layer_norm_epsilon", 1e-6)
            z = _conv(image, w[f"{DEIT_EMBED}/patch_embedding/vars/0"], w[f"{DEIT_EMBED}/patch_embedding/vars/1"])
            z = np.concatenate([w[f"{DEIT_EMBED}/vars/0"][0], w[f"{DEIT_EMBED}/vars/1"][0], z]) + w[f"{DEIT_EMBED}/vars/2"][0]
            for b in range(config["num_layers"]):
                blk = _nth(DEIT_BLOCK, b)
                z = z + _keras_mha(_ln_of(z, w, f"{blk}/layer_norm_1", eps), w, f"{blk}/mha")
                y = gelu(_ln_of(z, w, f"{blk}/layer_norm_2", eps) @ w[f"{blk}/mlp/dense/vars/0"] + w[f"{blk}/mlp/dense/vars/1"])
                z = z + y @ w[f"{blk}/output_layer/dense/vars/0"] + w[f"{blk}/output_layer/dense/vars/1"]
            out.append(_ln_of(z, w, "layers/dei_t_encoder/layer_norm", eps))
        elif kind == "SigLIPBackbone":
            v = config["vision_encoder"]["config"]
            eps = v.get("layer_norm_epsilon", 1e-6)
            act = lambda t: 0.5 * t * (1 + np.tanh(math.sqrt(2 / math.pi) * (t + 0.044715 * t ** 3)))  # noqa: E731 gelu_approximate
            mlp = lambda t, g: act(t @ w[f"{g}/fc1/vars/0"] + w[f"{g}/fc1/vars/1"]) @ w[f"{g}/fc2/vars/0"] + w[f"{g}/fc2/vars/1"]  # noqa: E731
            e = f"{SIG}/sig_lip_vision_embedding"
            z = _conv(image, w[f"{e}/patch_embedding/vars/0"], w[f"{e}/patch_embedding/vars/1"]) + w[f"{e}/position_embedding/vars/0"][w[f"{e}/vars/0"][0]]
            for b in range(v["num_layers"]):
                blk = _nth(f"{SIG}/sig_lip_encoder_layer", b)
                z = z + _keras_mha(_ln_of(z, w, f"{blk}/layer_norm1", eps), w, f"{blk}/self_attn")
                z = z + mlp(_ln_of(z, w, f"{blk}/layer_norm2", eps), f"{blk}/mlp")
            z = _ln_of(z, w, f"{SIG}/layer_normalization", 1e-6)  # post_layer_norm: epsilon fixed at 1e-6
            hd = f"{SIG}/sig_lip_multi_head_attention_pooling"
            h = _keras_mha(w[f"{hd}/vars/0"][0], w, f"{hd}/attention", z)
            out.append((h + mlp(_ln_of(h, w, f"{hd}/layer_norm", eps), f"{hd}/mlp"))[0])
        else:
            v = config["vision_encoder"]["config"]
            e = f"{CLIPV}/clip_vision_embedding"
            z = np.concatenate([w[f"{e}/vars/0"][None], _conv(image, w[f"{e}/patch_embedding/vars/0"])])
            z = _ln_of(z + w[f"{e}/position_embedding/vars/0"][w[f"{e}/vars/1"][0]], w, f"{CLIPV}/layer_normalization", 1e-5)
            quick = lambda t: t / (1 + np.exp(-1.702 * t))  # noqa: E731
            for b in range(v["num_layers"]):
                blk = _nth(f"{CLIPV}/clip_encoder_layer", b)
                z = z + _keras_mha(_ln_of(z, w, f"{blk}/layer_norm_1", 1e-5), w, f"{blk}/attention")
                y = quick(_ln_of(z, w, f"{blk}/layer_norm_2", 1e-5) @ w[f"{blk}/dense_1/vars/0"] + w[f"{blk}/dense_1/vars/1"])
                z = z + y @ w[f"{blk}/dense_2/vars/0"] + w[f"{blk}/dense_2/vars/1"]
            out.append(_ln_of(z, w, f"{CLIPV}/layer_normalization_1", 1e-5)[0] @ w["layers/dense/vars/0"])
    return np.stack(out).astype("float32")


_FAMILY = {
    "DINOV2Backbone": ("keras_hub.src.models.dinov2.dinov2_backbone", "DINOV2ImageConverter", "dinov2"),
    "SigLIPBackbone": ("keras_hub.src.models.siglip.siglip_backbone", "SigLIPImageConverter", "siglip"),
    "CLIPBackbone": ("keras_hub.src.models.clip.clip_backbone", "CLIPImageConverter", "clip"),
    "DeiTBackbone": ("keras_hub.src.models.deit.deit_backbone", "DeiTImageConverter", "deit"),
}


def family_config(kind, **vision):
    """A tiny config of ``kind`` as keras-hub's ``get_config`` writes it (vision fields overridden by ``vision``)."""
    sizes = dict(patch_size=8, hidden_dim=32, num_layers=2, num_heads=4, intermediate_dim=64, image_shape=[32, 32, 3])
    if kind == "DeiTBackbone":
        return {"name": "dei_t_backbone", "trainable": True, "dtype": FLOAT32, **sizes, "dropout_rate": 0.0, "attention_dropout": 0.0,
                "layer_norm_epsilon": 1e-6, "use_mha_bias": True, **vision}
    if kind == "DINOV2Backbone":
        return {"name": "dinov2_backbone", "trainable": True, "dtype": FLOAT32, **sizes, "layer_scale_init_value": 1.0, "num_register_tokens": 0,
                "use_mask_token": True, "use_swiglu_ffn": False, "dropout_rate": 0.0, "drop_path_rate": 0.0,
                "position_embedding_shape": [32, 32, 3], "antialias_in_interpolation": False, "apply_layernorm": False, **vision}
    short = "siglip" if kind == "SigLIPBackbone" else "clip"
    encoder = "SigLIP" if short == "siglip" else "CLIP"
    extra = {"intermediate_activation": "gelu_approximate", "layer_norm_epsilon": 1e-6} if short == "siglip" else {
        "intermediate_activation": "quick_gelu", "intermediate_output_index": None}
    tower = lambda part, fields: _serialized(f"{encoder}{part}Encoder", f"keras_hub.src.models.{short}.{short}_{part.lower()}_encoder", fields)  # noqa: E731
    config = {"name": f"{short}_backbone", "trainable": True, "dtype": FLOAT32,
              "vision_encoder": tower("Vision", {"name": f"{short}_vision_encoder", "trainable": True, "dtype": FLOAT32,
                                                 **sizes, **extra, **vision}),
              "text_encoder": tower("Text", {"vocabulary_size": 50, "embedding_dim": 32, "hidden_dim": 32, "num_layers": 1, "num_heads": 4,
                                             "intermediate_dim": 64, "max_sequence_length": 8})}
    if short == "clip":
        config["projection_dim"] = 16
    return config


def write_family_preset(folder, kind, config, weights, scale=None, offset=None, task=None):
    """A backbone preset folder as keras-hub's ``save_to_preset`` (and the converter's) write it; ``task``
    (``{"pooling", "num_classes"}``): a ``DeiTImageClassifier``'s ``task.json`` and ``task.weights.h5`` beside it."""
    os.makedirs(folder, exist_ok=True)
    module, converter, short = _FAMILY[kind]
    dump = lambda name, value: open(os.path.join(folder, name), "w").write(json.dumps(value, indent=4))  # noqa: E731
    dump("config.json", _serialized(kind, module, config))
    dump("metadata.json", {"keras_version": "3.15.1", "keras_hub_version": "0.32.0", "parameter_count": 0,
                           "date_saved": "2026-01-01@00:00:00", "tasks": []})
    names = {"layers/dense/vars": "vision_projection", "layers/dense_1/vars": "text_projection"} if short == "clip" else {}
    _h5(os.path.join(folder, "model.weights.h5"), weights, {"vars": f"{short}_backbone", **names})
    size = (config if kind in ("DINOV2Backbone", "DeiTBackbone") else config["vision_encoder"]["config"])["image_shape"][:2]
    if task is not None:
        d, classes = config["hidden_dim"], task.get("num_classes", 5)
        dump("task.json", _serialized("DeiTImageClassifier", "keras_hub.src.models.deit.deit_image_classifier", {
            "backbone": _serialized(kind, module, config), "name": "dei_t_image_classifier", "num_classes": classes,
            "pooling": task.get("pooling", "token"), "activation": None, "dropout": 0.0,
            "preprocessor": _serialized("DeiTImageClassifierPreprocessor",
                                        "keras_hub.src.models.deit.deit_image_classifier_preprocessor",
                                        {"name": "dei_t_image_classifier_preprocessor", "trainable": True, "dtype": FLOAT32,
                                         "config_file": "preprocessor.json"})}))
        head = np.random.default_rng(1).normal(0, 0.2, (d + 1, classes)).astype("float32")
        _h5(os.path.join(folder, "task.weights.h5"), {"layers/dense/vars/0": head[:d], "layers/dense/vars/1": head[d],
                                                     "optimizer/vars/0": np.int64(0)},
            {"vars": "dei_t_image_classifier", "layers/dense/vars": "predictions"})
    dump("image_converter.json", _serialized(converter, f"keras_hub.src.models.{short}.{short}_image_converter", {
        "name": f"{short}_image_converter", "image_size": list(size), "scale": scale, "offset": offset,
        "interpolation": "bilinear", "antialias": False, "crop_to_aspect_ratio": True, "pad_to_aspect_ratio": False}))
    return folder
