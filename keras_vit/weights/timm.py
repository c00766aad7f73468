"""timm's ViT state dict (``.safetensors``) -> the original checkpoint layout, for the whole ViT family.

timm's own ``_load_weights`` (its reader of the original ``.npz``) defines the correspondence inverted here: the
tables below, PyTorch's layouts undone by :func:`keras_vit.weights.conventions.torch_tensors`, attention kernels
with their head axes merged (the loader splits them with the model's heads), the switches of :class:`Conversion`.
Parts keras_vit does not implement are refused by name.
"""

import re
from typing import NamedTuple

import numpy as np

from keras_vit.errors import CheckpointError
from keras_vit.weights import config as config_lib
from keras_vit.weights import timm_config, timm_eva, timm_hybrid, timm_models, timm_naflex, timm_parallel
from keras_vit.weights.conventions import finish, linear, norm, renamed, torch_tensors
from keras_vit.weights.mapping import POSEMB_KEY
from keras_vit.weights.source import Reading
from keras_vit.weights.state_dict import StateDictSource

POSITION_RESAMPLING = "bicubic_torch_antialias"  # timm's resample_abs_pos_embed (bicubic, antialias=True)

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
_ATT = "MultiHeadDotProductAttention_1"
# inside blocks.{i}: timm name -> original key under encoderblock_{i} (a fused qkv split by conventions.torch_tensors)
_BLOCK_KEYS = {
    **norm("norm1", "LayerNorm_0"), **linear("attn.qkv", f"{_ATT}/qkv"), **linear("attn.proj", f"{_ATT}/out"),
    **norm("norm2", "LayerNorm_2"), **linear("mlp.fc1", "MlpBlock_3/Dense_0"), **linear("mlp.fc2", "MlpBlock_3/Dense_1"),
    **norm("attn.norm", f"{_ATT}/LayerNorm_0"), **norm("mlp.norm", "MlpBlock_3/LayerNorm_0"),  # scale_attn_norm, scale_mlp_norm
    "ls1.gamma": "LayerScale_1/gamma", "ls2.gamma": "LayerScale_3/gamma",
    **{f"attn.{name}": f"{_ATT}/{name}" for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")},  # attn_layer='diff'
    **norm("attn.sub_norm", f"{_ATT}/sub_norm"),
    "gamma_1": "LayerScale_1/gamma", "gamma_2": "LayerScale_3/gamma",  # DeiT-III's own names (timm's adapt_layer_scale)
}
_MAP = "MAPHead_0/"
_TOP_KEYS = {
    "cls_token": "cls", "dist_token": "dist", "reg_token": "reg", "pos_embed": POSEMB_KEY,
    **linear("patch_embed.proj", "embedding"), **norm("patch_embed.norm", "embedding_norm"),
    **norm("norm_pre", "Transformer/pre_norm"),
    **norm("norm", "Transformer/encoder_norm"), **norm("fc_norm", "fc_norm"), **linear("head", "head"),
    **linear("head_dist", "head_dist"), **linear("pre_logits.fc", "pre_logits"), "attn_pool.latent": _MAP + "probe",
    **linear("attn_pool.q", _MAP + "MultiHeadDotProductAttention_0/query"),
    **linear("attn_pool.kv", _MAP + "MultiHeadDotProductAttention_0/kv"),  # [key; value], as AttentionPoolLatent
    **linear("attn_pool.proj", _MAP + "MultiHeadDotProductAttention_0/out"), **norm("attn_pool.norm", _MAP + "LayerNorm_0"),
    **linear("attn_pool.mlp.fc1", _MAP + "MlpBlock_0/Dense_0"), **linear("attn_pool.mlp.fc2", _MAP + "MlpBlock_0/Dense_1"),
    **timm_naflex.POS_EMBED_KEYS,  # NaFlexVit's factorised position tables
}
# parts of timm ViTs that keras_vit has no layer for: key pattern -> what it is
_UNSUPPORTED = {
    r"\.attn\.(q_norm|k_norm)\.|^attn_pool\.(q_norm|k_norm)\.": "query/key normalisation (qk_norm)",
    r"rope|freqs": "rotary position embeddings other than RoPE-ViT's registered ones (EVA-02, DINOv3; a mixed RoPE "
                   "file needs the config.json naming its architecture)",
    r"\.mlp\.fc1_[gx]\.": "an unpacked SwiGLU MLP (fc1_g / fc1_x; keras_vit reads timm's SwiGLUPacked)",
    r"^attn_pool\.pos_embed$": "position embeddings in the attention pooling",
}
# the keys that make a state dict timm's: a patch embedding (NaFlexVit's embeds.proj) and attention (EVA-02 B / L's
# EvaAttention(qkv_fused=False) has q_proj, k_proj, v_proj)
MARKERS = (("patch_embed.proj.weight", "embeds.proj.weight", "patch_embed.backbone.0.conv.weight"),
           ("blocks.0.attn.qkv.weight", "blocks.0.attn.q_proj.weight", timm_parallel.MARKER))


class Conversion(NamedTuple):
    """What :func:`to_original` does beyond renaming (:attr:`Reading.layout` of a timm file): ``head_is_projection``
    (timm's ``head`` with an all-zero bias is CLIP's bias-free projection), ``pre_norm`` (zeros stand in for the
    patch-embedding bias timm's pre-norm models do not have)."""

    head_is_projection: bool = False
    pre_norm: bool = False
    mixed_rope: bool = False  # RoPE-ViT's rope.freqs, split by block (keras_vit.weights.timm_eva)


def vit_layout(tensors, path):
    """timm's ``VisionTransformer`` keys of any family member's state dict: NaFlexVit's ``embeds.*``, Eva's SwiGLU and
    q / v biases, the parallel blocks' fused projections (each module's ``to_vit_layout``)."""
    return timm_parallel.to_vit_layout(timm_eva.to_vit_layout(timm_naflex.to_vit_layout(tensors, path)), path)


def to_original(tensors, path="<arrays>", conversion=None):
    """Rename and transpose a timm ViT state dict (``{timm key: array}``, arrays or stand-ins) into the original
    ``.npz`` layout, as the :class:`Conversion` ``conversion`` says (None: no switch); ``path`` is named in errors.

    Raises:
        CheckpointError: a key that is neither a ViT family weight nor a known unsupported part, or a fused qkv
            weight that is not ``(3D, D)``.

    Example:
    >>> d = 8
    >>> arrays = {"patch_embed.proj.weight": np.zeros((d, 3, 4, 4)), "blocks.0.attn.qkv.weight": np.zeros((3 * d, d))}
    >>> out = to_original(arrays)
    >>> out["embedding/kernel"].shape, out["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"].shape
    ((4, 4, 3, 8), (8, 8))
    """
    conversion = conversion or Conversion()
    tensors = vit_layout(tensors, path)
    freqs = timm_eva.FREQS if conversion.mixed_rope else None  # RoPE-Mixed's, read by timm_eva.to_original
    for pattern, what in _UNSUPPORTED.items():  # named, before any key is called unknown
        found = sorted(k for k in tensors if re.search(pattern, k) and k != freqs)
        if found:
            raise CheckpointError(
                f"Checkpoint {path!r} is a timm model with {what} (keys {', '.join(map(repr, found[:6]))}"
                f"{', ...' if len(found) > 6 else ''}): keras_vit's ViT has no such part, "
                "so these weights cannot be loaded without changing what the model computes."
            )
    out = timm_hybrid.to_original(tensors, path)  # a hybrid's backbone (patch_embed.backbone.*), else nothing
    out.update(timm_eva.to_original(tensors, path) if conversion.mixed_rope else {})

    def rename(key):
        block = _BLOCK.match(key)
        if conversion.head_is_projection and key == "head.weight":
            return "projection/kernel"  # CLIP's bias-free proj: its zero bias skipped
        if block and block[2] in _BLOCK_KEYS:
            return f"Transformer/encoderblock_{block[1]}/{_BLOCK_KEYS[block[2]]}"
        return _TOP_KEYS.get(key)

    names, _, unknown = renamed([k for k in tensors if not k.startswith(timm_hybrid.PREFIX) and k != freqs], rename,
                                {r"^head\.bias$": "CLIP's zero bias"} if conversion.head_is_projection else {})
    for key, name in names.items():
        out.update(torch_tensors(key, name, tensors[key], path))
    if conversion.pre_norm and "embedding/bias" not in out and "embedding/kernel" in out:
        out["embedding/bias"] = np.zeros(out["embedding/kernel"].shape[-1:], np.float32)  # PatchEmbed(bias=not pre_norm)
    return finish(out, unknown, path, "timm")


def settings(config, path="<config>", weights=None, tensors=None, architecture=None):
    """The :class:`~keras_vit.weights.source.Reading` of a timm file: what ``config.json``, timm's registration of
    its ``architecture`` (or of ``architecture``, which replaces the config's) and the state dict (``tensors``, when
    there is one) say beyond the tensors: the sizes it states (``expected``), the architecture it declares
    (``declared``), labels, input normalisation.

    Example:
    >>> s = settings({"architecture": "deit_small_patch16_224", "pretrained_cfg": {"mean": [0.485, 0.456, 0.406]}})
    >>> s.mean, [(quantity, value) for quantity, _, value in s.expected]  # the sizes: timm's registration of the name
    ([0.485, 0.456, 0.406], [('hidden_size', 384), ('num_layers', 12), ('patch_size', 16)])
    """
    config = config_lib.json_object(config or {}, path)
    pretrained = config_lib.json_object(config.get("pretrained_cfg") or {}, path, "pretrained_cfg")
    args = config_lib.json_object(config.get("model_args") or {}, path, "model_args")
    resolved = timm_config.resolve(config, path, architecture)
    expected = timm_hybrid.on_feature_map(_expected(config, args, pretrained, resolved, path), resolved, tensors, path)
    names = config_lib.indexed_names(config.get("label_names"), "label_names", path)
    declared, conversion, notes = _declared(resolved, expected, path, weights, tensors, bool(names))
    timm_hybrid.declare_backbone(declared, tensors, weights, resolved)
    descriptions = config.get("label_descriptions") or {}
    if names and isinstance(descriptions, dict):
        names = [str(descriptions.get(name, name)) for name in names]
    return Reading(declared=declared, expected=expected, architecture=resolved["architecture"][0], tag=pretrained.get("tag"),
                   class_names=names or None, mean=pretrained.get("mean"), std=pretrained.get("std"), notes=notes,
                   layout=conversion,  # NaFlexVit's table is resampled by its registration's rule
                   position_resampling=resolved.get("naflex_resampling", (POSITION_RESAMPLING,))[0])


def _declared(resolved, expected, path, weights, tensors, labelled=False):
    """``(declared record, Conversion, notes)`` of a timm file."""
    act = resolved["act_layer"][0]  # said by someone unless it is the default None
    if act is not None and not isinstance(act, str):
        raise CheckpointError(f"{path!r}: model_args.act_layer={act!r}, expected the name of an activation.")
    mlp_layer = resolved["mlp_layer"]
    if mlp_layer[0] not in timm_config.MLP_LAYERS + timm_config.GLU_LAYERS + timm_config.SWIGLU_LAYERS:
        raise CheckpointError(
            f"{path!r}: {mlp_layer[1]}: keras_vit's MLPs are timm's Mlp, SwiGLUPacked (a gated MLP with fc1 "
            "of 2 x hidden outputs) and SwiGLU (fc1_g and fc1_x)."
        )
    if tensors is None:  # the config alone (no state dict): its sizes (expected) are read, no architecture declared
        return {}, Conversion(), []
    shapes = {k: tuple(v.shape) for k, v in vit_layout(tensors.stand_ins(), path).items()}
    seen = timm_config.observe(shapes, weights)
    timm_config.consistent(resolved, seen, path)
    sizes = [value for quantity, _, value in expected if quantity == "image_size"]
    pool_heads = resolved["attn_pool_num_heads"]  # Eva's (Perception Encoder's 8); None: the blocks', as timm's ViT
    extra = {
        "mlp_activation": timm_config.activation_of(resolved, seen, path),
        "layer_norm_epsilon": timm_config.epsilon_of(resolved, seen, path, weights),
        **timm_config.prefix_positions(resolved, seen, shapes, sizes[0] if sizes else None, weights),
        "pooling": timm_config.pooling_of(resolved, seen, path),
        "map_num_heads": pool_heads if seen["map"][0] and pool_heads[0] is not None else (None, None),
        # what the pooling reads: said by the registration, else timm's default for attention pooling (the patches)
        "pool_include_prefix": resolved["pool_include_prefix"] if resolved["pool_include_prefix"][1] or not seen["map"][0]
        else (False, "timm's VisionTransformer default pool_include_prefix=False (its attention pooling reads the patch tokens)"),
        **timm_eva.declared(resolved, shapes, tensors.shapes),  # RoPE-ViT's rotary and absolute positions
        **timm_naflex.declared(resolved),  # NaFlexVit's input path and position tables
    }
    parallel = _parallel(resolved, tensors, path)
    extra.update(parallel)
    # a head whose classes config.json names is a classifier, even with an all-zero bias (a fine-tuned CLIP tower)
    conv_stem = resolved.get("conv_stem", (None, None))[0] is not None  # MobileCLIP's tower: its head is CLIP's too
    projection = timm_config.head_is_projection(seen, tensors, conv_stem) and not labelled
    notes = []  # "key: what the conversion did", for the load report
    if resolved["architecture"][0] is None:
        notes.append("architecture inferred from the state dict's keys: no config.json names a timm architecture, so "
                     "only what the keys show was read (timm's defaults: exact GELU, LayerNorm eps 1e-6, pre-norm blocks)")
    if parallel:
        notes.append(f"parallel blocks: {parallel['parallel_blocks'][1]}, attention and MLP side by side on one norm")
    if projection:
        extra["projection_dim"] = (int(shapes["head.weight"][0]), f"'head.weight' {tuple(shapes['head.weight'])} "
                                   "with an all-zero 'head.bias' (CLIP's projection, as timm's _convert_openai_clip / _convert_mobileclip store it)")
        notes.append("projection/kernel: timm's 'head' with its all-zero bias is CLIP's bias-free projection (projection_dim)")
    if seen["pre_norm"][0] and "patch_embed.proj.bias" not in shapes:
        notes.append("embedding/bias: zeros: timm's pre-norm models have no patch-embedding bias (PatchEmbed(bias=not pre_norm)); exact")
    record = timm_config.record(resolved, seen, extra, path, weights)
    mixed = record.get("rope") is not None and record["rope"].value == "mixed"
    return record, Conversion(bool(projection), bool(seen["pre_norm"][0]), mixed), notes


def _parallel(resolved, tensors, path):
    """``{"parallel_blocks": (True, said)}`` of a state dict with parallel blocks no config names (their fused
    ``in_proj`` is their trace), else nothing; a registration or config the keys contradict is refused."""
    have = timm_parallel.MARKER in tensors.shapes
    value, said = resolved["parallel_blocks"]
    said = said or (f"architecture={resolved['architecture'][0]!r} (sequential blocks)" if resolved["architecture"][1] else None)
    if said is not None and have != bool(value):
        raise CheckpointError(
            f"{path!r}: config.json says {said} but the weights {'have' if have else 'lack'} "
            f"{timm_parallel.MARKER!r} (a parallel block's fused projection): the config belongs to another model, or "
            "the weights do."
        )
    return {"parallel_blocks": (True, f"{timm_parallel.MARKER!r} (timm's ParallelScalingBlock)")} if have and not value else {}


def _expected(config, args, pretrained, resolved, path):
    """``[(quantity, field, value), ...]``: the sizes a timm config states, as timm builds the model from them."""
    expected = []
    for source, name, quantity in ((args, "embed_dim", "hidden_size"), (config, "num_features", "num_features"),
                                   (args, "depth", "num_layers"), (args, "patch_size", "patch_size")):
        value = config_lib.number(source, name, None, path, integer=True)
        if value is not None:
            expected.append((quantity, f"{'model_args.' if source is args else ''}{name}={value!r}", value))
        elif name in resolved and resolved[name][1] is not None:  # the registration's or the name's
            expected.append((quantity, resolved[name][1], resolved[name][0]))
    for source, label in ((args, "model_args.num_classes"), (config, "num_classes")):
        value = source.get("num_classes")
        if value is not None and value != 0:  # 0: timm's model without a head
            value = config_lib.number(source, "num_classes", None, path, integer=True)
            expected.append(("num_classes", f"{label}={value!r}", value))
    for field in ("qkv_bias", "class_token"):
        if field in args:
            expected.append((field, f"model_args.{field}={args[field]!r}", args[field]))
    if timm_naflex.image_size(resolved):  # NaFlex: the eval size is a budget's, the table's grid the size (timm's
        expected.append(("image_size", *timm_naflex.image_size(resolved)))  # NaFlexVit sizes it by pos_embed_grid_size,
    elif "img_size" in args:                                                # whatever its img_size)
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

    name = "timm"
    label = "timm ViT"

    def matches(self, keys):
        """Whether a state dict with these keys is a timm ViT (:data:`MARKERS`).

        Example:
        >>> SOURCE.matches(["patch_embed.proj.weight", "blocks.0.attn.qkv.weight"]), SOURCE.matches(["cls"])
        (True, False)
        """
        keys = set(keys)
        return all(any(key in keys for key in either) for either in MARKERS)

    def claims(self, opened):
        """timm's keys, unless a transformers ``config.json`` (a ``model_type``, no timm ``architecture``) says the
        folder is a transformers model that writes timm's names (TIPSv2): that one is the transformers source's."""
        if not self.matches(opened.keys()):
            if opened.keys():  # a timm registration whose keys are no ViT's: it says what it has instead
                config, config_path = opened.state_dict()[1:]
                architecture = config.get("architecture") if isinstance(config, dict) else None
                if isinstance(architecture, str) and timm_models.lacking(architecture.partition(".")[0]):
                    timm_config.refuse_unbuildable(architecture, config_path)
            return False
        config = opened.state_dict()[1]
        return not (isinstance(config, dict) and "model_type" in config and "architecture" not in config)

    def reading(self, opened, architecture=None):
        tensors, config, config_path = opened.state_dict()
        stated = [field for field in ("model_args", "pretrained_cfg") if isinstance(config, dict) and config.get(field)]
        if stated and not config.get("architecture"):  # changes to a registration not named (timm's reader needs it)
            raise CheckpointError(f"{config_path!r} has {' and '.join(stated)} but no 'architecture', the timm "
                                  "registration they change, which decides the rest (activation, epsilon, pooling).")
        config = config if (config or {}).get("architecture") else None  # another tool's: the keys, timm's defaults
        return settings(config, config_path or "<config>", weights=opened.path, tensors=tensors, architecture=architecture)

    def convert(self, tensors, reading, path):
        return to_original(tensors, path, reading.layout)


SOURCE = TimmSource()
