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


def write_preset(folder, config, backbone, task=None, task_config=None, scale=None, offset=None, image_size=None, shards=None):
    """A preset folder as keras-hub's ``save_to_preset`` writes it (``shards``: split ``model.weights.h5`` in two)."""
    os.makedirs(folder, exist_ok=True)
    float32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
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
