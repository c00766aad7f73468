"""timm's ViT state dict (``.safetensors``) -> the original checkpoint layout, for the whole ViT family.

timm's ``VisionTransformer`` (``timm/models/vision_transformer.py``) stores a
ViT as PyTorch tensors: ``patch_embed.proj.weight`` ``(D, C, P, P)``, one fused
``blocks.{i}.attn.qkv.weight`` ``(3D, D)`` (query, key, value stacked, heads
inside each), ``nn.Linear`` weights as ``(out, in)``, ``norm`` the final
LayerNorm, ``head`` the classifier. timm's own ``_load_weights``
(the reader of the original ``.npz``) defines the correspondence this module
inverts: ``qkv.weight = concat(kernel.reshape(D, D).T for query, key, value)``,
``proj.weight = out_kernel.reshape(D, D).T``, conv kernels ``(P, P, C, D)``
transposed to ``(D, C, P, P)``.

The family's parts go to keras_vit's canonical keys (:mod:`keras_vit.weights.mapping`): ``dist_token`` ->
``dist``, ``reg_token`` -> ``reg``, ``blocks.{i}.ls1.gamma`` / ``ls2.gamma`` (DeiT-III's original
``gamma_1`` / ``gamma_2``) -> ``LayerScale_1`` / ``LayerScale_3``, ``norm_pre`` -> ``Transformer/pre_norm``,
``fc_norm`` -> ``fc_norm``, ``head_dist`` -> ``head_dist``, ``attn_pool.{latent,q,kv,proj,norm,mlp}`` ->
``MAPHead_0/...`` (``kv`` split into its key and value halves, keys first, as timm's ``AttentionPoolLatent``
reshapes it), a gated MLP's ``fc1`` (timm's ``SwiGLUPacked``: ``2 * hidden`` outputs, ``act(x1) * x2``) as
``Dense_0`` of ``(D, 2 * hidden)``. A CLIP tower's ``head`` with an all-zero bias is CLIP's projection
(:func:`keras_vit.weights.timm_config.head_is_projection`) -> ``projection/kernel``; its patch embedding has
no bias (timm: ``bias=not pre_norm``): a zero bias stands in, exactly, and the load report says so.

The attention kernels are returned with their head axes merged
(``query/kernel`` ``(D, heads * head_dim)``): a state dict does not store the
number of heads, and the loader splits the merged axes with the model's.
A model without query/key/value biases (``qkv_bias=False``) has none in the converted layout either.
Parts keras_vit does not implement are refused by name (q/k norms, a normalised patch embedding,
RoPE, scaled attention/MLP norms, timm's unpacked SwiGLU).
"""

import re
from typing import NamedTuple

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import timm_config, timm_eva, timm_hybrid
from keras_vit.weights.conventions import finish, patch_kernel
from keras_vit.weights.declared import activation, declare
from keras_vit.weights.source import Reading
from keras_vit.weights.state_dict import StateDictSource

FORMAT = "timm"
LAYER_NORM_EPSILON = 1e-6  # timm's VisionTransformer: partial(nn.LayerNorm, eps=1e-6) unless registered otherwise
POSITION_RESAMPLING = "bicubic_torch_antialias"  # timm's resample_abs_pos_embed (bicubic, antialias=True)

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
# inside blocks.{i}: timm name -> (original key under encoderblock_{i}, transpose a Linear weight)
_BLOCK_KEYS = {
    "norm1.weight": ("LayerNorm_0/scale", False),
    "norm1.bias": ("LayerNorm_0/bias", False),
    "attn.proj.weight": ("MultiHeadDotProductAttention_1/out/kernel", True),
    "attn.proj.bias": ("MultiHeadDotProductAttention_1/out/bias", False),
    "norm2.weight": ("LayerNorm_2/scale", False),
    "norm2.bias": ("LayerNorm_2/bias", False),
    "mlp.fc1.weight": ("MlpBlock_3/Dense_0/kernel", True),
    "mlp.fc1.bias": ("MlpBlock_3/Dense_0/bias", False),
    "mlp.fc2.weight": ("MlpBlock_3/Dense_1/kernel", True),
    "mlp.fc2.bias": ("MlpBlock_3/Dense_1/bias", False),
    "ls1.gamma": ("LayerScale_1/gamma", False),
    "ls2.gamma": ("LayerScale_3/gamma", False),
    "gamma_1": ("LayerScale_1/gamma", False),  # DeiT-III's own names (timm's checkpoint_filter_fn adapt_layer_scale)
    "gamma_2": ("LayerScale_3/gamma", False),
}
_MAP = "MAPHead_0/"
_TOP_KEYS = {
    "cls_token": ("cls", False),
    "dist_token": ("dist", False),
    "reg_token": ("reg", False),
    "pos_embed": ("Transformer/posembed_input/pos_embedding", False),
    "patch_embed.proj.bias": ("embedding/bias", False),
    "norm_pre.weight": ("Transformer/pre_norm/scale", False),
    "norm_pre.bias": ("Transformer/pre_norm/bias", False),
    "norm.weight": ("Transformer/encoder_norm/scale", False),
    "norm.bias": ("Transformer/encoder_norm/bias", False),
    "fc_norm.weight": ("fc_norm/scale", False),
    "fc_norm.bias": ("fc_norm/bias", False),
    "head.weight": ("head/kernel", True),
    "head.bias": ("head/bias", False),
    "head_dist.weight": ("head_dist/kernel", True),
    "head_dist.bias": ("head_dist/bias", False),
    "pre_logits.fc.weight": ("pre_logits/kernel", True),
    "pre_logits.fc.bias": ("pre_logits/bias", False),
    "attn_pool.latent": (_MAP + "probe", False),
    "attn_pool.q.weight": (_MAP + "MultiHeadDotProductAttention_0/query/kernel", True),
    "attn_pool.q.bias": (_MAP + "MultiHeadDotProductAttention_0/query/bias", False),
    "attn_pool.proj.weight": (_MAP + "MultiHeadDotProductAttention_0/out/kernel", True),
    "attn_pool.proj.bias": (_MAP + "MultiHeadDotProductAttention_0/out/bias", False),
    "attn_pool.norm.weight": (_MAP + "LayerNorm_0/scale", False),
    "attn_pool.norm.bias": (_MAP + "LayerNorm_0/bias", False),
    "attn_pool.mlp.fc1.weight": (_MAP + "MlpBlock_0/Dense_0/kernel", True),
    "attn_pool.mlp.fc1.bias": (_MAP + "MlpBlock_0/Dense_0/bias", False),
    "attn_pool.mlp.fc2.weight": (_MAP + "MlpBlock_0/Dense_1/kernel", True),
    "attn_pool.mlp.fc2.bias": (_MAP + "MlpBlock_0/Dense_1/bias", False),
}
# parts of timm ViTs that keras_vit has no layer for: key pattern -> what it is
_UNSUPPORTED = {
    r"\.attn\.(q_norm|k_norm)\.|^attn_pool\.(q_norm|k_norm)\.": "query/key normalisation (qk_norm)",
    r"\.attn\.norm\.": "a norm inside attention (scale_attn_norm)",
    r"\.mlp\.norm\.": "a norm inside the MLP (scale_mlp_norm)",
    r"^patch_embed\.norm\.": "a normalised patch embedding (embed_norm_layer)",
    r"rope|freqs": "rotary position embeddings other than RoPE-ViT's registered ones (EVA-02, DINOv3; a mixed RoPE "
                   "file needs the config.json naming its architecture)",
    r"\.mlp\.fc1_[gx]\.": "an unpacked SwiGLU MLP (fc1_g / fc1_x; keras_vit reads timm's SwiGLUPacked)",
    r"^attn_pool\.pos_embed$": "position embeddings in the attention pooling",
}
MARKERS = ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight")


def matches(keys):
    """Whether a state dict with these keys is a timm ViT.

    Example:
    >>> matches(["cls_token", "patch_embed.proj.weight", "blocks.0.attn.qkv.weight"]), matches(["cls"])
    (True, False)
    """
    return all(marker in keys for marker in MARKERS)


def refuse_unsupported(keys, path):
    """Raise a ``CheckpointError`` naming the first timm feature in ``keys`` that keras_vit does not implement."""
    for pattern, what in _UNSUPPORTED.items():
        found = sorted(k for k in keys if re.search(pattern, k))
        if found:
            raise CheckpointError(
                f"Checkpoint {path!r} is a timm model with {what} (keys {', '.join(map(repr, found[:6]))}"
                f"{', ...' if len(found) > 6 else ''}): keras_vit's ViT has no such part, "
                "so these weights cannot be loaded without changing what the model computes."
            )


def _linear(array, transpose):
    return array.T if transpose and array.ndim == 2 else array


class Conversion(NamedTuple):
    """What :func:`to_original` does beyond renaming (:attr:`Reading.layout` of a timm file): ``head_is_projection``
    (timm's ``head`` with an all-zero bias is CLIP's bias-free projection), ``pre_norm`` (zeros stand in for the
    patch-embedding bias timm's pre-norm models do not have)."""

    head_is_projection: bool = False
    pre_norm: bool = False
    mixed_rope: bool = False  # RoPE-ViT's rope.freqs, split by block (keras_vit.weights.timm_eva)


def to_original(tensors, path="<arrays>", conversion=None):
    """Rename and transpose a timm ViT state dict into the original ``.npz`` layout.

    Args:
        tensors: ``{timm key: array}`` (arrays, or stand-ins with the right shape).
        path: named in errors.
        conversion: the :class:`Conversion` :func:`settings` read; None: neither switch.

    Returns:
        ``{original key: array}``; attention kernels have merged head axes.

    Raises:
        CheckpointError: a key that is neither a ViT family weight nor a known
            unsupported part, or a fused qkv weight that is not ``(3D, D)``.

    Example:
    >>> d = 8
    >>> arrays = {"patch_embed.proj.weight": np.zeros((d, 3, 4, 4)), "blocks.0.attn.qkv.weight": np.zeros((3 * d, d))}
    >>> out = to_original(arrays)
    >>> out["embedding/kernel"].shape, out["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"].shape
    ((4, 4, 3, 8), (8, 8))
    """
    conversion = conversion or Conversion()
    refuse_unsupported([k for k in tensors if not (conversion.mixed_rope and k == timm_eva.FREQS)], path)
    out = timm_hybrid.to_original(tensors, path)  # a hybrid's backbone (patch_embed.backbone.*), else nothing
    out.update(timm_eva.to_original(tensors, path) if conversion.mixed_rope else {})
    unknown = []
    for key, array in tensors.items():
        block = _BLOCK.match(key)
        if key.startswith(timm_hybrid.PREFIX) or (conversion.mixed_rope and key == timm_eva.FREQS):
            continue
        elif key == "patch_embed.proj.weight":
            out["embedding/kernel"] = patch_kernel(key, array, path)
        elif conversion.head_is_projection and key in ("head.weight", "head.bias"):
            if key == "head.weight":  # CLIP's proj, bias-free (timm's zero head.bias is dropped)
                out["projection/kernel"] = array.T
        elif key in ("attn_pool.kv.weight", "attn_pool.kv.bias"):
            out.update(_split(key, array, ("key", "value"), _MAP + "MultiHeadDotProductAttention_0", path))
        elif key in _TOP_KEYS:
            name, transpose = _TOP_KEYS[key]
            out[name] = _linear(array, transpose)
        elif block and block[2] in ("attn.qkv.weight", "attn.qkv.bias"):
            prefix = f"Transformer/encoderblock_{block[1]}/MultiHeadDotProductAttention_1"
            out.update(_split(key, array, ("query", "key", "value"), prefix, path))
        elif block and block[2] in _BLOCK_KEYS:
            name, transpose = _BLOCK_KEYS[block[2]]
            out[f"Transformer/encoderblock_{block[1]}/{name}"] = _linear(array, transpose)
        else:
            unknown.append(key)
    if conversion.pre_norm and "embedding/bias" not in out and "embedding/kernel" in out:
        out["embedding/bias"] = _zeros(out["embedding/kernel"].shape[-1])  # timm: PatchEmbed(bias=not pre_norm)
    return finish(out, unknown, path, "timm")


def _zeros(width):
    return np.zeros((width,), np.float32)


def _split(key, array, parts, prefix, path):
    """A fused ``(n * D, D)`` weight or ``(n * D,)`` bias -> ``n`` (D, D) kernels (transposed) or biases."""
    weight = key.endswith("weight")
    n = len(parts)
    width = array.shape[-1] if weight else array.shape[0] // n
    if array.shape[0] != n * width or (weight and array.ndim != 2):
        raise CheckpointError(
            f"Checkpoint {path!r}: {key!r} has shape {array.shape}, expected a fused "
            f"{'/'.join(parts)} tensor of {n} x the width."
        )
    return {
        f"{prefix}/{part}/{'kernel' if weight else 'bias'}": _linear(array[i * width:(i + 1) * width], weight)
        for i, part in enumerate(parts)
    }


def settings(config, path="<config>", weights=None, tensors=None, architecture=None):
    """What a timm file says beyond its tensors: heads, epsilon, activation, the family's switches, labels,
    input normalisation; read from ``config.json``, timm's registration of its ``architecture``
    (:mod:`keras_vit.weights.timm_models`) and the state dict (``tensors``, a
    :class:`~keras_vit.weights.safetensors_files.Tensors`, when there is one).

    Returns a :class:`~keras_vit.weights.source.Reading`: the sizes it states go to ``expected``, to be checked
    against the weights (:func:`keras_vit.weights.config.check_against_weights`); what it declares about the
    architecture goes to ``declared``, to be compared with the model's (:func:`keras_vit.weights.declared.check`).
    ``architecture`` replaces the config's (a preset naming timm's quick_gelu registration of a Hub repository).

    Example:
    >>> s = settings({"architecture": "deit_small_patch16_224", "pretrained_cfg": {"mean": [0.485, 0.456, 0.406]}})
    >>> s.num_heads, s.layer_norm_epsilon, s.mean
    (6, 1e-06, [0.485, 0.456, 0.406])
    >>> [(quantity, value) for quantity, _, value in s.expected]  # from timm's registration of the name
    [('hidden_size', 384), ('num_layers', 12), ('patch_size', 16)]
    >>> settings({"model_args": {"act_layer": "quick_gelu"}}).declared["mlp_activation"]
    Declaration(value='quick_gelu', said="model_args.act_layer='quick_gelu'", origin='<config>')
    """
    config = config_lib.json_object(config or {}, path)
    pretrained = config_lib.json_object(config.get("pretrained_cfg") or {}, path, "pretrained_cfg")
    args = config_lib.json_object(config.get("model_args") or {}, path, "model_args")
    timm_hybrid.refuse_switches(args, path)
    resolved = timm_config.resolve(config, path, architecture)
    architecture = resolved["architecture"][0]
    expected = timm_hybrid.on_feature_map(_expected(config, args, pretrained, resolved, path), resolved, tensors, path)
    names = config_lib.indexed_names(config.get("label_names"), "label_names", path)
    declared, conversion, notes = _declared(resolved, pretrained, expected, path, weights, tensors, bool(names))
    timm_hybrid.declare_backbone(declared, tensors, weights)
    descriptions = config.get("label_descriptions") or {}
    if names and isinstance(descriptions, dict):
        names = [str(descriptions.get(name, name)) for name in names]
    return Reading(declared=declared, expected=expected, architecture=architecture, tag=pretrained.get("tag"),
                   class_names=names or None, mean=pretrained.get("mean"), std=pretrained.get("std"), notes=notes,
                   position_resampling=POSITION_RESAMPLING, layout=conversion)


def _declared(resolved, pretrained, expected, path, weights, tensors, labelled=False):
    """``(declared record, Conversion, notes)`` of a timm file."""
    if "act_layer" in resolved and resolved["act_layer"][1] is not None:
        act = resolved["act_layer"][0]
        if act is not None and not isinstance(act, str):
            raise CheckpointError(f"{path!r}: model_args.act_layer={act!r}, expected the name of an activation.")
    mlp_layer = resolved["mlp_layer"]
    if mlp_layer[0] not in timm_config.MLP_LAYERS + timm_config.GLU_LAYERS:
        raise CheckpointError(
            f"{path!r}: {mlp_layer[1]}: keras_vit's MLPs are timm's Mlp and SwiGLUPacked (a gated MLP with fc1 "
            "of 2 x hidden outputs)."
        )
    if tensors is None:  # the config alone (no state dict): what it states, as before any weights are seen
        record = {}
        if resolved["num_heads"][1] is not None:
            declare(record, "num_heads", resolved["num_heads"][0], resolved["num_heads"][1], path)
        width = resolved["embed_dim"]
        if width[1] is not None:
            declare(record, "hidden_size", width[0], width[1], path)
        if resolved["act_layer"][1] is not None:
            act = resolved["act_layer"][0]
            declare(record, "mlp_activation", activation(act), resolved["act_layer"][1], path)
        if resolved["norm_eps"][1] is not None:
            declare(record, "layer_norm_epsilon", resolved["norm_eps"][0], resolved["norm_eps"][1], path)
        return record, Conversion(), []
    shapes = tensors.shapes
    seen = timm_config.observe(shapes, weights)
    timm_config.consistent(resolved, seen, path)
    sizes = [value for quantity, _, value in expected if quantity == "image_size"]
    extra = {
        "mlp_activation": timm_config.activation_of(resolved, seen, path),
        "layer_norm_epsilon": timm_config.epsilon_of(resolved, seen, path, weights),
        "prefix_positions": timm_config.prefix_positions(resolved, seen, shapes, sizes[0] if sizes else None, weights),
        "pooling": timm_config.pooling_of(resolved, seen, path),
        **timm_eva.declared(resolved, shapes),  # RoPE-ViT's rotary and absolute positions
    }
    # a head whose classes config.json names is a classifier, even with an all-zero bias (a fine-tuned CLIP tower)
    projection = timm_config.head_is_projection(seen, tensors) and not labelled
    notes = []  # "key: what the conversion did", for the load report
    if resolved["architecture"][0] is None:
        notes.append("architecture inferred from the state dict's keys: no config.json names a timm architecture, so "
                     "only what the keys show was read (timm's defaults: exact GELU, LayerNorm eps 1e-6, pre-norm blocks)")
    if projection:
        extra["projection_dim"] = (int(shapes["head.weight"][0]), f"'head.weight' {tuple(shapes['head.weight'])} "
                                   "with an all-zero 'head.bias' (CLIP's projection, as timm's _convert_openai_clip stores it)")
        notes.append("projection/kernel: timm's 'head' with its all-zero bias is CLIP's bias-free projection (projection_dim)")
    if seen["pre_norm"][0] and "patch_embed.proj.bias" not in shapes:
        notes.append("embedding/bias: zeros: timm's pre-norm models have no patch-embedding bias (PatchEmbed(bias=not pre_norm)); exact")
    record = timm_config.record(resolved, seen, extra, path, weights)
    mixed = record.get("rope") is not None and record["rope"].value == "mixed"
    return record, Conversion(bool(projection), bool(seen["pre_norm"][0]), mixed), notes


def _expected(config, args, pretrained, resolved, path):
    """``[(quantity, field, value), ...]``: the sizes a timm config states, as timm builds the model from them."""
    expected = []

    def integer(source, field, quantity, label):
        value = config_lib.number(source, field, None, path, integer=True)
        if value is not None:
            expected.append((quantity, f"{label}={value!r}", value))

    def stated(name, quantity):  # the registration's or the name's, where model_args does not override it
        value, said = resolved[name]
        if said is not None and name not in args:
            expected.append((quantity, said, value))

    integer(args, "embed_dim", "hidden_size", "model_args.embed_dim")
    stated("embed_dim", "hidden_size")
    integer(config, "num_features", "num_features", "num_features")
    integer(args, "depth", "num_layers", "model_args.depth")
    stated("depth", "num_layers")
    integer(args, "patch_size", "patch_size", "model_args.patch_size")
    stated("patch_size", "patch_size")
    for source, label in ((args, "model_args.num_classes"), (config, "num_classes")):
        value = source.get("num_classes")
        if value is not None and value != 0:  # 0: timm's model without a head
            value = config_lib.number(source, "num_classes", None, path, integer=True)
            expected.append(("num_classes", f"{label}={value!r}", value))
    for field in ("qkv_bias", "class_token"):
        if field in args:
            expected.append((field, f"model_args.{field}={args[field]!r}", args[field]))
    if "img_size" in args:
        expected.append(("image_size", f"model_args.img_size={args['img_size']!r}",
                         config_lib.size_pair(args["img_size"], path, "model_args.img_size")))
    elif isinstance(pretrained.get("input_size"), list) and len(pretrained["input_size"]) == 3:
        size = pretrained["input_size"]
        expected.append(("image_size", f"pretrained_cfg.input_size={size!r}",
                         config_lib.size_pair(size[1:], path, "pretrained_cfg.input_size")))
    return expected


class TimmSource(StateDictSource):
    """timm's ViT-family state dicts: a ``.safetensors`` file, or a Hub repository folder (``config.json`` with
    ``"architecture"``, ``model.safetensors``), recognised by :data:`MARKERS`."""

    name = FORMAT
    label = "timm ViT"

    def matches(self, keys):
        return matches(keys)

    def claims(self, opened):
        """timm's keys, unless a transformers ``config.json`` (a ``model_type``, no timm ``architecture``) says the
        folder is a transformers model that writes timm's names (TIPSv2): that one is the transformers source's."""
        if not self.matches(opened.keys()):
            return False
        config = opened.state_dict()[1]
        return not (isinstance(config, dict) and "model_type" in config and "architecture" not in config)

    def reading(self, opened, architecture=None):
        tensors, config, config_path = opened.state_dict()
        config = config if (config or {}).get("architecture") else None
        return settings(config, config_path or "<config>", weights=opened.path, tensors=tensors, architecture=architecture)

    def convert(self, tensors, reading, path):
        return to_original(tensors, path, reading.layout)


SOURCE = TimmSource()
