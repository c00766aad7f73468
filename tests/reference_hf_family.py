"""An independent NumPy forward pass of transformers' ViT family, and writers of random weights in its layout.

Written from ``transformers/models/{dinov2,dinov2_with_registers,deit,vit_mae,vit_msn,ijepa,tipsv2,clip,siglip,
siglip2}/modeling_*.py`` (MetaCLIP 2, Chinese-CLIP and AltCLIP have CLIP's vision tower)
(no keras_vit code, none of its layout conversion): the state dict as ``save_pretrained`` writes it
(``nn.Linear`` ``(out, in)``, ``Conv2d`` ``(D, C, P, P)`` on channels-first pixels, ``nn.Embedding`` positions
``(N, D)``, ``nn.MultiheadAttention``'s ``in_proj_weight`` ``[q; k; v]``), the processor's
``(x / 255 - image_mean) / image_std``, and what each class returns:

* ``Dinov2Model`` / ``Dinov2WithRegistersModel``: ``pooler_output`` = the final-normed class token;
  ``...ForImageClassification``: ``classifier([cls; mean of the patch tokens])`` (registers left out);
  ``layer_scale{1,2}``, ``Dinov2MLP`` or ``Dinov2SwiGLUFFN`` (``silu(x1) * x2``); registers inserted after the
  class token once the positions are added.
* ``DeiTForImageClassificationWithTeacher``: ``(cls_classifier(x[:, 0]) + distillation_classifier(x[:, 1])) / 2``.
* ``ViTMAEModel`` with ``mask_ratio=0`` (no patch dropped; the class token's output does not depend on
  MAE's shuffle): ``last_hidden_state[:, 0]``.
* ``ViTMSNModel``: ``last_hidden_state[:, 0]``; ``ViTMSNForImageClassification``: ``classifier`` of it.
  ``IJepaModel``: no class token, the mean of ``last_hidden_state`` (what ``IJepaForImageClassification`` classifies).
* ``Tipsv2VisionModel`` / ``Tipsv2Model``'s image features before the L2 norm: ``pooler_output``, the final-normed
  class token (registers inserted after it once the positions are added).
* ``CLIPVisionModel``: ``post_layernorm(x[:, 0])`` after ``pre_layrnorm``; ``CLIPModel.get_image_features`` /
  ``CLIPVisionModelWithProjection``: ``visual_projection`` of it (no bias); ``quick_gelu``.
* ``SiglipVisionModel`` / ``SiglipModel.get_image_features``: ``SiglipMultiheadAttentionPoolingHead`` after
  ``post_layernorm``; ``gelu_pytorch_tanh``. ``Siglip2VisionModel`` at its native grid: the same with an
  ``nn.Linear`` patch embedding over patches flattened as ``(P, P, C)``.
* ``SiglipForImageClassification`` / ``Siglip2ForImageClassification``: ``classifier`` of the mean of every token
  of ``last_hidden_state`` (after ``post_layernorm``; the head's weights are there, unread);
  ``CLIPForImageClassification``: ``classifier`` of the mean of ``last_hidden_state[:, 1:]``, the encoder's
  output without ``post_layernorm`` (which only the pooled class token gets).
"""

import math

import numpy as np

_erf = np.vectorize(math.erf)
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])


def act(x, name):
    """transformers' ACT2FN entries used here."""
    if name == "gelu":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if name in ("gelu_pytorch_tanh", "gelu_new"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "quick_gelu":
        return x / (1.0 + np.exp(-1.702 * x))
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    raise ValueError(name)


def linear(x, sd, name):
    y = x @ sd[name + ".weight"].T
    return y + sd[name + ".bias"] if name + ".bias" in sd else y


def layer_norm(x, sd, name, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * sd[name + ".weight"] + sd[name + ".bias"]


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attend(q, k, v, heads):
    """Scaled dot-product attention, heads as consecutive slices of the width (view(..., heads, head_dim))."""
    size = q.shape[-1] // heads
    out = [softmax(q[:, h * size:(h + 1) * size] @ k[:, h * size:(h + 1) * size].T / math.sqrt(size))
           @ v[:, h * size:(h + 1) * size] for h in range(heads)]
    return np.concatenate(out, axis=-1)


def conv_patches(chw, weight, bias=None):
    """``Conv2d(kernel=stride=P)`` then ``flatten(2).transpose(1, 2)``: patches in row-major order."""
    p = weight.shape[-1]
    rows, cols = chw.shape[1] // p, chw.shape[2] // p
    out = np.stack([np.einsum("chw,dchw->d", chw[:, i * p:(i + 1) * p, j * p:(j + 1) * p], weight)
                    for i in range(rows) for j in range(cols)])
    return out + bias if bias is not None else out


def linear_patches(chw, weight, bias, p):
    """SigLIP2: ``convert_image_to_patches`` ((C, H, W) -> (N, P * P * C), each patch flattened as (P, P, C)) + Linear."""
    c, h, w = chw.shape
    patches = chw.reshape(c, h // p, p, w // p, p).transpose(1, 3, 2, 4, 0).reshape((h // p) * (w // p), p * p * c)
    return patches @ weight.T + bias


# ---------------------------------------------------------------------------------------------- the forward passes


def _dinov2(x, sd, c, pre, registers, classify):
    e = pre + "embeddings."
    z = conv_patches(x, sd[e + "patch_embeddings.projection.weight"], sd[e + "patch_embeddings.projection.bias"])
    z = np.concatenate([sd[e + "cls_token"][0], z]) + sd[e + "position_embeddings"][0]
    if registers:
        z = np.concatenate([z[:1], sd[e + "register_tokens"][0], z[1:]])
    eps, heads = c["layer_norm_eps"], c["num_attention_heads"]
    i = 0
    while f"{pre}encoder.layer.{i}.norm1.weight" in sd:
        b = f"{pre}encoder.layer.{i}."
        h = layer_norm(z, sd, b + "norm1", eps)
        a = attend(*(linear(h, sd, b + f"attention.attention.{n}") for n in ("query", "key", "value")), heads)
        z = z + linear(a, sd, b + "attention.output.dense") * sd[b + "layer_scale1.lambda1"]
        h = layer_norm(z, sd, b + "norm2", eps)
        if c.get("use_swiglu_ffn"):
            x12 = linear(h, sd, b + "mlp.weights_in")
            x1, x2 = np.split(x12, 2, axis=-1)
            m = linear(act(x1, "silu") * x2, sd, b + "mlp.weights_out")
        else:
            m = linear(act(linear(h, sd, b + "mlp.fc1"), c["hidden_act"]), sd, b + "mlp.fc2")
        z = z + m * sd[b + "layer_scale2.lambda1"]
        i += 1
    z = layer_norm(z, sd, pre + "layernorm", eps)
    if not classify:
        return z[0]
    return linear(np.concatenate([z[0], z[1 + registers:].mean(0)]), sd, "classifier")


def _vit_layers(z, sd, pre, c):
    eps, heads = c["layer_norm_eps"], c["num_attention_heads"]
    i = 0
    while f"{pre}encoder.layer.{i}.layernorm_before.weight" in sd:
        b = f"{pre}encoder.layer.{i}."
        h = layer_norm(z, sd, b + "layernorm_before", eps)
        a = attend(*(linear(h, sd, b + f"attention.attention.{n}") for n in ("query", "key", "value")), heads)
        z = z + linear(a, sd, b + "attention.output.dense")
        h = layer_norm(z, sd, b + "layernorm_after", eps)
        z = z + linear(act(linear(h, sd, b + "intermediate.dense"), c["hidden_act"]), sd, b + "output.dense")
        i += 1
    return layer_norm(z, sd, pre + "layernorm", eps)


def _deit(x, sd, c):
    e = "deit.embeddings."
    z = conv_patches(x, sd[e + "patch_embeddings.projection.weight"], sd[e + "patch_embeddings.projection.bias"])
    z = np.concatenate([sd[e + "cls_token"][0], sd[e + "distillation_token"][0], z]) + sd[e + "position_embeddings"][0]
    z = _vit_layers(z, sd, "deit.", c)
    return (linear(z[0], sd, "cls_classifier") + linear(z[1], sd, "distillation_classifier")) / 2


def _vit_mae(x, sd, c):
    e = "vit.embeddings."
    pos = sd[e + "position_embeddings"][0]
    z = conv_patches(x, sd[e + "patch_embeddings.projection.weight"], sd[e + "patch_embeddings.projection.bias"]) + pos[1:]
    z = np.concatenate([sd[e + "cls_token"][0] + pos[:1], z])  # mask_ratio=0: every patch kept
    return _vit_layers(z, sd, "vit.", c)[0]


def _vit(x, sd, c, pre, cls, classify):
    """ViT-MSN (a class token; ViTMSNModel: its last_hidden_state[:, 0]) and I-JEPA (none: the mean of the tokens)."""
    e = pre + "embeddings."
    z = conv_patches(x, sd[e + "patch_embeddings.projection.weight"], sd[e + "patch_embeddings.projection.bias"])
    z = (np.concatenate([sd[e + "cls_token"][0], z]) if cls else z) + sd[e + "position_embeddings"][0]
    z = _vit_layers(z, sd, pre, c)
    pooled = z[0] if cls else z.mean(0)
    return linear(pooled, sd, "classifier") if classify else pooled


def _tipsv2(x, sd, c, pre):
    """Tipsv2VisionModel's pooler_output (the final-normed class token; Tipsv2Model's image embedding before its
    L2 norm) under TIPSv2's original names: fused qkv, ls1 / ls2, c_fc / c_proj or SwiGLU w12 / w3."""
    z = conv_patches(x, sd[pre + "patch_embed.proj.weight"], sd[pre + "patch_embed.proj.bias"])
    z = np.concatenate([sd[pre + "cls_token"][0], z]) + sd[pre + "pos_embed"][0]
    z = np.concatenate([z[:1], sd[pre + "register_tokens"][0], z[1:]])
    eps, heads, i = c["layer_norm_eps"], c["num_attention_heads"], 0
    while f"{pre}blocks.{i}.norm1.weight" in sd:
        b = f"{pre}blocks.{i}."
        a = attend(*np.split(linear(layer_norm(z, sd, b + "norm1", eps), sd, b + "attn.qkv"), 3, axis=-1), heads)
        z = z + linear(a, sd, b + "attn.proj") * sd[b + "ls1.gamma"]
        h = layer_norm(z, sd, b + "norm2", eps)
        if c.get("use_swiglu_ffn"):
            x1, x2 = np.split(linear(h, sd, b + "mlp.w12"), 2, axis=-1)
            m = linear(act(x1, "silu") * x2, sd, b + "mlp.w3")
        else:
            m = linear(act(linear(h, sd, b + "mlp.c_fc"), c["hidden_act"]), sd, b + "mlp.c_proj")
        z = z + m * sd[b + "ls2.gamma"]
        i += 1
    return layer_norm(z, sd, pre + "norm", eps)[0]


def _clip_layers(z, sd, c):
    eps, heads = c["layer_norm_eps"], c["num_attention_heads"]
    i = 0
    while f"vision_model.encoder.layers.{i}.layer_norm1.weight" in sd:
        b = f"vision_model.encoder.layers.{i}."
        h = layer_norm(z, sd, b + "layer_norm1", eps)
        a = attend(*(linear(h, sd, b + f"self_attn.{n}_proj") for n in ("q", "k", "v")), heads)
        z = z + linear(a, sd, b + "self_attn.out_proj")
        h = layer_norm(z, sd, b + "layer_norm2", eps)
        z = z + linear(act(linear(h, sd, b + "mlp.fc1"), c["hidden_act"]), sd, b + "mlp.fc2")
        i += 1
    return z


def _clip(x, sd, c):
    e = "vision_model.embeddings."
    z = conv_patches(x, sd[e + "patch_embedding.weight"])  # bias=False
    z = np.concatenate([sd[e + "class_embedding"][None], z]) + sd[e + "position_embedding.weight"]
    z = _clip_layers(layer_norm(z, sd, "vision_model.pre_layrnorm", c["layer_norm_eps"]), sd, c)
    if "classifier.weight" in sd:  # CLIPForImageClassification: the patch tokens of last_hidden_state
        return linear(z[1:].mean(0), sd, "classifier")
    pooled = layer_norm(z[0], sd, "vision_model.post_layernorm", c["layer_norm_eps"])
    return linear(pooled, sd, "visual_projection") if "visual_projection.weight" in sd else pooled


def _siglip(x, sd, c, linear_patch=False):
    e = "vision_model.embeddings."
    if linear_patch:
        z = linear_patches(x, sd[e + "patch_embedding.weight"], sd[e + "patch_embedding.bias"], c["patch_size"])
    else:
        z = conv_patches(x, sd[e + "patch_embedding.weight"], sd[e + "patch_embedding.bias"])
    z = _clip_layers(z + sd[e + "position_embedding.weight"], sd, c)
    eps, heads = c["layer_norm_eps"], c["num_attention_heads"]
    z = layer_norm(z, sd, "vision_model.post_layernorm", eps)
    if "classifier.weight" in sd:  # Siglip(2)ForImageClassification: every token of last_hidden_state
        return linear(z.mean(0), sd, "classifier")
    h = "vision_model.head."
    w, bias = sd[h + "attention.in_proj_weight"], sd[h + "attention.in_proj_bias"]
    d = z.shape[-1]
    q = sd[h + "probe"][0] @ w[:d].T + bias[:d]
    k, v = z @ w[d:2 * d].T + bias[d:2 * d], z @ w[2 * d:].T + bias[2 * d:]
    y = linear(attend(q, k, v, heads), sd, h + "attention.out_proj")
    y = y + linear(act(linear(layer_norm(y, sd, h + "layernorm", eps), sd, h + "mlp.fc1"), c["hidden_act"]), sd, h + "mlp.fc2")
    return y[0]


# CLIP's vision tower (a model_type starting with one of these: "clipseg", each *_vision_model); a two-tower
# model_type's config.json has its vision settings in vision_config
CLIP_LIKE = ("clip", "metaclip_2", "chinese_clip", "altclip")


def forward(model_type, images, sd, config, mean, std):
    """The output of the repository's class for RGB ``images`` in [0, 255] (logits, or the pooled embedding)."""
    c = config.get("vision_config", config)
    classify = any(name.endswith("ForImageClassification") for name in config.get("architectures", []))
    out = []
    for image in np.asarray(images, np.float64):
        x = ((image / 255.0 - np.asarray(mean)) / np.asarray(std)).transpose(2, 0, 1)
        if model_type == "dinov2":
            pre = "dinov2." if classify else ""
            out.append(_dinov2(x, sd, c, pre, 0, classify))
        elif model_type == "dinov2_with_registers":
            pre = "dinov2_with_registers." if classify else ""
            out.append(_dinov2(x, sd, c, pre, c["num_register_tokens"], classify))
        elif model_type == "deit":
            out.append(_deit(x, sd, c))
        elif model_type == "vit_mae":
            out.append(_vit_mae(x, sd, c))
        elif model_type in ("vit_msn", "ijepa"):
            pre = {"vit_msn": "vit.", "ijepa": "ijepa."}[model_type] if classify else ""
            out.append(_vit(x, sd, c, pre, model_type == "vit_msn", classify))
        elif model_type.startswith("tipsv2"):
            out.append(_tipsv2(x, sd, c, "vision_encoder." if model_type == "tipsv2" else ""))
        elif model_type.startswith(CLIP_LIKE):
            out.append(_clip(x, sd, c))
        elif model_type in ("siglip", "siglip_vision_model"):
            out.append(_siglip(x, sd, c))
        else:
            out.append(_siglip(x, sd, c, linear_patch=True))
    return np.stack(out)


# ---------------------------------------------------------------------------------------------- random weights


class _Writer:
    def __init__(self, seed):
        self.rng, self.sd = np.random.default_rng(seed), {}

    def r(self, *shape, scale=0.3):
        return (scale * self.rng.standard_normal(shape)).astype(np.float32)

    def lin(self, name, out, inp, bias=True):
        self.sd[name + ".weight"] = self.r(out, inp, scale=1.0 / math.sqrt(inp))
        if bias:
            self.sd[name + ".bias"] = self.r(out, scale=0.1)

    def norm(self, name, d):
        self.sd[name + ".weight"] = (1.0 + self.r(d, scale=0.1)).astype(np.float32)
        self.sd[name + ".bias"] = self.r(d, scale=0.1)


def state_dict(model_type, config, seed=0, text_tower=True):
    """Random weights of the class ``config["architectures"][0]`` under the keys transformers writes."""
    w = _Writer(seed)
    architecture = config["architectures"][0]
    c = config.get("vision_config", config)
    d, p, layers = c["hidden_size"], c["patch_size"], c["num_hidden_layers"]
    grid = (c["num_patches"] if "num_patches" in c else (c["image_size"] // p) ** 2)
    classify = architecture.endswith("ForImageClassification")
    if model_type.startswith("dinov2"):
        pre = f"{model_type}." if classify else ""
        e = pre + "embeddings."
        w.sd[e + "cls_token"], w.sd[e + "mask_token"] = w.r(1, 1, d), w.r(1, d)
        if model_type == "dinov2_with_registers":
            w.sd[e + "register_tokens"] = w.r(1, c["num_register_tokens"], d)
        w.sd[e + "position_embeddings"] = w.r(1, grid + 1, d)
        w.lin(e + "patch_embeddings.projection", d, 3 * p * p)
        w.sd[e + "patch_embeddings.projection.weight"] = w.sd[e + "patch_embeddings.projection.weight"].reshape(d, 3, p, p)
        hidden = int(d * c["mlp_ratio"])
        for i in range(layers):
            b = f"{pre}encoder.layer.{i}."
            w.norm(b + "norm1", d)
            for n in ("query", "key", "value"):
                w.lin(b + f"attention.attention.{n}", d, d, bias=c.get("qkv_bias", True))
            w.lin(b + "attention.output.dense", d, d)
            w.sd[b + "layer_scale1.lambda1"] = (1.0 + w.r(d, scale=0.2)).astype(np.float32)
            w.norm(b + "norm2", d)
            if c.get("use_swiglu_ffn"):
                h = (int(hidden * 2 / 3) + 7) // 8 * 8
                w.lin(b + "mlp.weights_in", 2 * h, d)
                w.lin(b + "mlp.weights_out", d, h)
            else:
                w.lin(b + "mlp.fc1", hidden, d)
                w.lin(b + "mlp.fc2", d, hidden)
            w.sd[b + "layer_scale2.lambda1"] = (1.0 + w.r(d, scale=0.2)).astype(np.float32)
        w.norm(pre + "layernorm", d)
        if classify:
            w.lin("classifier", len(config["id2label"]), 2 * d)
    elif model_type.startswith("tipsv2"):
        _tipsv2_weights(w, c, "vision_encoder." if model_type == "tipsv2" else "", d, p, layers, grid)
    elif model_type in ("deit", "vit_mae", "vit_msn", "ijepa"):
        pre = {"deit": "deit.", "vit_mae": "vit.", "vit_msn": "vit." if classify else "",
               "ijepa": "ijepa." if classify else ""}[model_type]
        e = pre + "embeddings."
        if model_type != "ijepa":
            w.sd[e + "cls_token"] = w.r(1, 1, d)
        if model_type == "deit":
            w.sd[e + "distillation_token"] = w.r(1, 1, d)
        w.sd[e + "position_embeddings"] = w.r(1, grid + {"deit": 2, "ijepa": 0}.get(model_type, 1), d)
        w.lin(e + "patch_embeddings.projection", d, 3 * p * p)
        w.sd[e + "patch_embeddings.projection.weight"] = w.sd[e + "patch_embeddings.projection.weight"].reshape(d, 3, p, p)
        m = c["intermediate_size"]
        for i in range(layers):
            b = f"{pre}encoder.layer.{i}."
            w.norm(b + "layernorm_before", d)
            for n in ("query", "key", "value"):
                w.lin(b + f"attention.attention.{n}", d, d, bias=c.get("qkv_bias", True))
            w.lin(b + "attention.output.dense", d, d)
            w.norm(b + "layernorm_after", d)
            w.lin(b + "intermediate.dense", m, d)
            w.lin(b + "output.dense", d, m)
        w.norm(pre + "layernorm", d)
        if model_type == "deit":
            w.lin("cls_classifier", len(config["id2label"]), d)
            w.lin("distillation_classifier", len(config["id2label"]), d)
        elif classify:
            w.lin("classifier", len(config["id2label"]), d)
        elif model_type == "vit_mae":  # ViTMAEForPreTraining's decoder (a few of its keys)
            w.sd["decoder.mask_token"] = w.r(1, 1, 16)
            w.lin("decoder.decoder_embed", 16, d)
            w.sd["decoder.decoder_pos_embed"] = w.r(1, grid + 1, 16)
            w.norm("decoder.decoder_norm", 16)
            w.lin("decoder.decoder_pred", p * p * 3, 16)
    else:  # clip, siglip, siglip2
        e = "vision_model.embeddings."
        clip = model_type.startswith(CLIP_LIKE)
        if clip:
            w.sd[e + "class_embedding"] = w.r(d)
            w.sd[e + "patch_embedding.weight"] = w.r(d, 3, p, p, scale=0.1)
            w.sd[e + "position_embedding.weight"] = w.r(grid + 1, d)
            w.norm("vision_model.pre_layrnorm", d)
        else:
            w.lin(e + "patch_embedding", d, 3 * p * p)
            if model_type.startswith("siglip") and not model_type.startswith("siglip2"):
                w.sd[e + "patch_embedding.weight"] = w.sd[e + "patch_embedding.weight"].reshape(d, 3, p, p)
            w.sd[e + "position_embedding.weight"] = w.r(grid, d)
        m = c["intermediate_size"]
        for i in range(layers):
            b = f"vision_model.encoder.layers.{i}."
            for n in ("k", "v", "q", "out"):
                w.lin(b + f"self_attn.{n}_proj", d, d)
            w.norm(b + "layer_norm1", d)
            w.lin(b + "mlp.fc1", m, d)
            w.lin(b + "mlp.fc2", d, m)
            w.norm(b + "layer_norm2", d)
        w.norm("vision_model.post_layernorm", d)
        if clip and (architecture.endswith("VisionModelWithProjection") or "vision_config" in config) and not classify:
            dim = c["projection_dim"] if architecture.endswith("VisionModelWithProjection") else config["projection_dim"]
            w.lin("visual_projection", dim, d, bias=False)
        if architecture.endswith("ForImageClassification"):
            w.lin("classifier", len(config["id2label"]), d)
        if not clip and c.get("vision_use_head", True):
            h = "vision_model.head."
            w.sd[h + "probe"] = w.r(1, 1, d)
            w.sd[h + "attention.in_proj_weight"] = w.r(3 * d, d, scale=1.0 / math.sqrt(d))
            w.sd[h + "attention.in_proj_bias"] = w.r(3 * d, scale=0.1)
            w.lin(h + "attention.out_proj", d, d)
            w.norm(h + "layernorm", d)
            w.lin(h + "mlp.fc1", m, d)
            w.lin(h + "mlp.fc2", d, m)
        if text_tower and "vision_config" in config and not classify:
            w.sd["text_model.embeddings.token_embedding.weight"] = w.r(50, 16)
            w.sd["text_model.embeddings.position_embedding.weight"] = w.r(8, 16)
            w.lin("text_model.encoder.layers.0.self_attn.q_proj", 16, 16)
            w.norm("text_model.final_layer_norm", 16)
            w.sd["logit_scale"] = np.array([2.6592], np.float32)
            if clip:
                w.lin("text_projection", config["projection_dim"], 16, bias=False)
            else:
                w.sd["logit_bias"] = np.array([-10.0], np.float32)
    return w.sd


def _tipsv2_weights(w, c, pre, d, p, layers, grid):
    """Tipsv2VisionModel's weights under TIPSv2's original names (what transformers 5's save_pretrained writes)."""
    w.sd[pre + "cls_token"], w.sd[pre + "mask_token"] = w.r(1, 1, d), w.r(1, d)
    w.sd[pre + "register_tokens"] = w.r(1, c["num_register_tokens"], d)
    w.sd[pre + "pos_embed"] = w.r(1, grid + 1, d)
    w.lin(pre + "patch_embed.proj", d, 3 * p * p)
    w.sd[pre + "patch_embed.proj.weight"] = w.sd[pre + "patch_embed.proj.weight"].reshape(d, 3, p, p)
    hidden = int(d * c["mlp_ratio"])
    for i in range(layers):
        b = f"{pre}blocks.{i}."
        w.norm(b + "norm1", d)
        w.lin(b + "attn.qkv", 3 * d, d)
        w.lin(b + "attn.proj", d, d)
        w.sd[b + "ls1.gamma"], w.sd[b + "ls2.gamma"] = (1.0 + w.r(2, d, scale=0.2)).astype(np.float32)
        w.norm(b + "norm2", d)
        if c.get("use_swiglu_ffn"):
            h = (int(hidden * 2 / 3) + 7) // 8 * 8
            w.lin(b + "mlp.w12", 2 * h, d)
            w.lin(b + "mlp.w3", d, h)
        else:
            w.lin(b + "mlp.c_fc", hidden, d)
            w.lin(b + "mlp.c_proj", d, hidden)
    w.norm(pre + "norm", d)
    if pre:  # Tipsv2Model's text tower (a few of its keys)
        w.sd["text_encoder.token_embedding.weight"] = w.r(50, d)
        w.norm("text_encoder.ln_final", d)
        w.sd["temperature"] = np.array([0.005], np.float32)
