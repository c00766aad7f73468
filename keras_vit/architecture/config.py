"""``ViTConfig``: everything that decides a keras_vit model's graph and weight shapes, as one frozen value.

Every builder (``ViT``, ``ViTB16``, ``HybridViT``, ``conv_stem_vit``, ``from_pretrained``) turns its
arguments into a ``ViTConfig`` and hands it to one generic constructor; the built model carries it
(``model.vit_config``, saved in and restored from ``.keras``), and resizing, inspection, export, weight
loading and ``keras-vit info`` read it instead of probing layers. In the manner of keras-hub's backbones
(every constructor argument stored) and timm's ``pretrained_cfg`` (the model knows what it is).

Example:
>>> config = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128)
>>> config.grid, config.num_tokens, config.class_token
((4, 4), 17, True)
>>> ViTConfig.from_dict(config.to_dict()) == config
True
>>> config.replace(image_size=None).native_image_size
(32, 32)
"""

import dataclasses

from keras_vit.architecture import arguments, family, naflex, stems, variants
from keras_vit.layers.checks import LAYER_NORM_EPSILON, check_rate
from keras_vit.layers.embedding import position_prefix

OUTPUTS = ("probabilities", "logits", "embedding", "tokens", "feature_map")  # ViTConfig.output: what a model returns


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """The architecture of a keras_vit model (plain ViT, hybrid or conv stem), validated when created.

    Attributes:
        image_size: ``(height, width)`` of the input; None for a model that takes any size (its position
            embeddings are stored for ``native_image_size`` and resampled in the graph). An int is read
            as a square.
        native_image_size: ``(height, width)`` whose patch grid the position embeddings are stored for:
            ``image_size`` itself, or for ``image_size=None`` the size given (default 224; 28 for a conv
            stem). Giving one with a fixed ``image_size`` is refused.
        patch_size: ``(ph, pw)`` on the image, or on the stem's feature map. An int is read as a square.
        hidden_size, num_layers, num_heads, mlp_dim: the Transformer's shape; ``hidden_size`` divisible
            by ``num_heads``.
        layer_norm_epsilon: of every LayerNorm (1e-6 in the original checkpoints, 1e-12 in
            transformers' ports).
        stem: None (patches of the image), ``"resnet"`` (the paper's hybrid: ResNet-v2 with GroupNorm
            and weight-standardised convolutions, ``block_units`` and ``width``) or ``"conv"``
            (3x3 convolutions with BatchNorm and GELU of ``stem_channels``).
        block_units, width: ResNet stages and width multiplier (``stem="resnet"`` only).
        crop_remainder: an image size the patches do not divide is cropped to the whole patches it holds (the last
            rows and columns dropped), as a stride-P convolution does: timm's So400m/14 at 384 sees 27 x 14 = 378
            pixels of its 384-pixel input. A fixed ``image_size`` and ``stem=None`` only; False (the default)
            refuses such a size, naming it.
        resnet_norms: the ResNet's normalisation constants (``stem="resnet"`` only): ``"original"`` (the
            paper's code: weight standardisation ``(w - mean) / (std + 1e-5)``, GroupNorm epsilon 1e-6) or
            ``"timm"`` (timm's hybrids: ``(w - mean) / sqrt(var + 1e-8)``, GroupNorm epsilon 1e-5).
        stem_channels: channels of the conv stem's convolutions (``stem="conv"`` only).
        stem_strides, stem_norm_epsilon: patchify convolutions (kernel = stride; MobileCLIP's ``(4, 2)``; empty: 3 x 3,
            stride 1 then 2), and the BatchNorms' epsilon (Keras' 1e-3; timm's 1e-5).
        num_classes: outputs of the head (``include_top`` only).
        include_top: a classification head; without it the model returns the pooled representation
            (``(batch, hidden_size)``), every token with ``pooling=None`` (``(batch, tokens, hidden_size)``),
            or the patch tokens on their grid with ``pooling="feature_map"`` (``(batch, rows, cols,
            hidden_size)``, what ``keras.applications`` returns with ``include_top=False, pooling=None``).
        pooling: ``"token"`` (class token), ``"gap"`` (mean of the patch tokens; the paper's GAP models, no
            class token), ``"avg"`` and ``"max"`` (``keras.applications``' spellings: the mean and the
            maximum of the patch tokens, the class token kept, so a class-token checkpoint loads), or, with
            ``include_top=False`` only, None or ``"feature_map"``.
        representation_size: width of the tanh pre-logits layer, or None.
        classifier_activation: of the head: ``"softmax"``, ``"sigmoid"`` (each class's own probability: multi-label)
            or None (``"linear"``), which returns logits (as does any other Keras activation, for predict and exports).
        include_preprocessing: the model scales [0, 255] RGB inputs to [-1, 1] itself.
        dropout, attention_dropout, drop_path_rate: regularisation rates (training only).

    The ViT family's switches (DINOv2, SigLIP, CLIP, DeiT, DeiT-III, MAE, timm's register models); their
    defaults are the paper's architecture:

    Attributes:
        class_token: a class token before the patches; None: one unless ``pooling="gap"`` (the paper's
            GAP models have none).
        distillation_token: DeiT's distillation token after the class token; the model's output is the
            mean of the two heads (or of the two tokens without a head), as DeiT does at inference.
        num_register_tokens: register tokens after the class (and distillation) token, without
            position embeddings unless ``register_positions`` (DINOv2 with registers, timm's ``reg_tokens``).
        prefix_positions: the class and distillation tokens have position embeddings (False: timm's
            ``no_embed_class``).
        register_positions: the register tokens have position embeddings too, after the class token's (timm's
            ``reg_tokens`` with ``no_embed_class=False``: its SBB ``vit_so150m*_reg*`` models).
        layer_scale_init: initial LayerScale gamma of both residual branches, or None (no LayerScale).
        mlp_activation: ``"gelu"`` (exact), ``"gelu_tanh"`` (SigLIP), ``"quick_gelu"`` (OpenAI CLIP) or
            ``"silu"`` (with ``mlp_type="glu"``: SwiGLU).
        mlp_type: ``"mlp"`` or ``"glu"`` (gated: ``mlp_dim`` is the width after the gate).
        qkv_bias: biases on the query, key and value projections.
        pre_norm: a LayerNorm before the blocks (CLIP's ``ln_pre``, timm's ``norm_pre``).
        final_norm: the LayerNorm after the blocks (``encoder_norm``).
        fc_norm: a LayerNorm after pooling (timm's ``fc_norm``, with average pooling instead of the final norm).
        projection_dim: a bias-free projection of the pooled vector (CLIP's ``visual_projection``), or None.
        position_resampling: how the position embeddings are resampled for another grid (at load, by
            ``resize_model`` and in the graph of an ``image_size=None`` model): ``"linear_aligned"`` (the
            paper's code, ``scipy.ndimage.zoom(order=1)``; also torch's bilinear with ``align_corners=True``),
            ``"bicubic_torch"`` (transformers' ``interpolate_pos_encoding``), ``"bicubic_torch_antialias"`` (timm's
            ``resample_abs_pos_embed``), ``"bicubic_tf"`` (``tf.image.resize``'s bicubic: keras-hub's DINOv2 on
            TensorFlow), ``"bilinear_torch_antialias"`` (SigLIP 2 NaFlex) or ``"bilinear_torch"`` (torch's bilinear
            without antialiasing, ``align_corners=False``: C-RADIO); a NaFlex model resamples per image with
            ``"linear_aligned"`` or one of the bilinear ones or ``"bicubic_torch_antialias"``.
        input_mean, input_std: per channel, in [0, 1] units: the model scales [0, 255] pixels to
            ``(x / 255 - mean) / std`` (``include_preprocessing``). 0.5 and 0.5 give the paper's [-1, 1].

    ``pooling`` also takes ``"map"`` (SigLIP's attention pooling head; ``map_num_heads`` and ``map_mlp_dim``, None:
    the blocks' ``num_heads`` and ``mlp_dim``, are its own where they differ: Perception Encoder's 8 heads) and
    ``"token_gap_concat"`` (the class
    token and the mean of the patch tokens side by side, ``2 * hidden_size`` wide: the input of transformers'
    ``Dinov2ForImageClassification`` classifier); ``"gap"`` averages the patch
    tokens only (class and register tokens left out, as timm does), and ``"map"`` attends to them only;
    ``pool_include_prefix=True`` pools the class and register tokens too (timm's ``pool_include_prefix``; EVA's and
    big_vision's attention pooling, keras-hub's ``"gap"`` with a class token).

    Positions by rotation (RoPE-ViT, Heo et al. 2024, arXiv:2403.13298; timm's ``vit_*_patch16_rope_*`` in ``eva.py``;
    DINOv3, Simeoni et al. 2025, arXiv:2508.10104, timm's ``vit_*_patch16_dinov3*``):

    Attributes:
        rope: None, ``"axial"`` (fixed frequencies per axis, timm's ``rope_type='cat'``), ``"mixed"`` (learnable
            frequencies per layer and head, ``(2, heads, head_dim / 2)`` in each layer) or ``"dinov3"`` (fixed
            periods on coordinates normalised to ``[-1, 1]``, rotating the head's halves: DINOv3's): 2-D rotary position
            embeddings of every attention's queries and keys (the prefix tokens unrotated,
            :mod:`keras_vit.layers.rope`). Needs a fixed ``image_size`` and a head width divisible by 4.
        rope_temperature: the frequencies' base (the mixed ones' at initialisation); None: RoPE-ViT's, 100 axial
            and 10 mixed; DINOv3's 100.
        rope_grid_indexing: ``"xy"`` (a patch's first coordinate is its column: RoPE-ViT's) or ``"ij"`` (its row).
        rope_grid_offset: added to the patch coordinates (axial and dinov3; timm's ``rope_grid_offset``).
        rope_reference_grid: None, or ``(rows, cols)``: axial RoPE's coordinates scaled to this grid, ``(i + offset) / n
            * ref`` on each axis (timm's ``ref_feat_shape``; EVA-02's ``(16, 16)`` at every resolution).
        position_embedding: learned absolute position embeddings; False: none (RoPE-ViT's models without ``_ape``).

    AIMv2's switches (Fini et al. 2024, arXiv:2411.14402; checked by :mod:`keras_vit.architecture.norm_bias`):

    Attributes:
        norm_type: ``"layernorm"`` or ``"rmsnorm"`` (every norm of the model, of ``layer_norm_epsilon``).
        patch_norm: a norm of the projected patches before the positions (timm's ``embed_norm_layer``).
        proj_bias, mlp_bias: biases on the attention's output projection, and on the MLP's layers.

    NaFlex (:mod:`keras_vit.architecture.naflex`): ``input_mode`` ``"image"`` (the default) or ``"naflex"``, each
    image at its own aspect ratio under a budget of ``max_patches`` patches, with ``position_aspect_preserving`` and
    ``factorized_positions`` for timm's other position tables, and ``grid_rule``, the rule that gives an image its
    grid under the budget as the weights were trained (``"timm"`` or ``"siglip2"``:
    :data:`keras_vit.layers.naflex_grid.GRID_RULES`).

    NormFormer's sub-LayerNorms (EVA-02 B / L and its CLIP towers, timm's ``scale_mlp`` / ``scale_attn_inner``; BEiT-3's
    ``scale_mlp_norm`` / ``scale_attn_norm``), each a LayerNorm of ``layer_norm_epsilon`` in every block:

    Attributes:
        mlp_norm: of the MLP's ``mlp_dim`` hidden activations, before its second Dense.
        attention_norm: of the attention's joined heads, before its output projection.

    Attributes:
        res_post_norm: residual post-norm blocks, ``x + LN(MSA(x))`` and ``x + LN(MLP(x))`` (Swin-v2's; timm's
            ``ResPostBlock``, ``vit_base_patch16_rpn_224``, and EVA's ``use_post_norm``, EVA-02-CLIP-E), no LayerScale.
        parallel_blocks: ``x + gamma * (MSA(LN(x)) + MLP(LN(x)))`` (ViT-22B's; timm's ``ParallelScalingBlock``).
        differential_attention: :mod:`keras_vit.layers.diff_attention` (timm's ``attn_layer='diff'``, ``vit_dwee_*``).
    """

    image_size: tuple | int | None = 224
    native_image_size: tuple | int | None = None
    patch_size: tuple | int = 16
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    layer_norm_epsilon: float = LAYER_NORM_EPSILON
    stem: str | None = None
    block_units: tuple = ()
    width: float = 1
    resnet_norms: str = "original"
    stem_channels: tuple = ()
    stem_strides: tuple = ()
    stem_norm_epsilon: float = 1e-3
    num_classes: int = 1000
    include_top: bool = True
    pooling: str | None = "token"
    representation_size: int | None = None
    classifier_activation: str | None = "softmax"
    include_preprocessing: bool = True
    dropout: float = 0.0
    attention_dropout: float = 0.0
    drop_path_rate: float = 0.0
    class_token: bool | None = None
    distillation_token: bool = False
    num_register_tokens: int = 0
    prefix_positions: bool = True
    register_positions: bool = False
    layer_scale_init: float | None = None
    mlp_activation: str = "gelu"
    mlp_type: str = "mlp"
    qkv_bias: bool = True
    pre_norm: bool = False
    final_norm: bool = True
    fc_norm: bool = False
    projection_dim: int | None = None
    map_num_heads: int | None = None
    map_mlp_dim: int | None = None
    input_mean: tuple = (0.5, 0.5, 0.5)
    input_std: tuple = (0.5, 0.5, 0.5)
    position_resampling: str = "linear_aligned"
    crop_remainder: bool = False
    rope: str | None = None
    rope_temperature: float | None = None
    rope_grid_indexing: str = "xy"
    rope_grid_offset: float = 0.0
    rope_reference_grid: tuple | None = None
    position_embedding: bool = True
    norm_type: str = "layernorm"
    patch_norm: bool = False
    proj_bias: bool = True
    mlp_bias: bool = True
    input_mode: str = "image"
    max_patches: int | None = None
    position_aspect_preserving: bool = False
    factorized_positions: bool = False
    mlp_norm: bool = False
    attention_norm: bool = False
    res_post_norm: bool = False
    parallel_blocks: bool = False
    differential_attention: bool = False
    pool_include_prefix: bool = False
    grid_rule: str = "timm"

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (a frozen dataclass)
        stems.validate(self, set_)
        naflex.normalise(self, set_)  # a NaFlex model's image_size names its stored grid: the native size
        default = 28 if self.stem == "conv" else arguments.DEFAULT_IMAGE_SIZE
        native = self.native_image_size
        if self.image_size is not None and native is not None and arguments.positive_pair(native, "native_image_size") == arguments.positive_pair(self.image_size, "image_size"):
            native = None  # what to_dict writes for a fixed size: the size itself
        size, name = arguments.stored_image_size(self.image_size, native, default=default)
        set_("crop_remainder", self._crop_remainder(size))
        whole = arguments.whole_patches(size, self.patch_size) if self.crop_remainder else size
        _, patch = arguments.validate_grid(whole, self.patch_size, self.stride, context=self._stem_context, name=name)
        h, w = arguments.positive_pair(size, name)
        set_("image_size", None if self.image_size is None else (h, w))
        set_("native_image_size", (h, w))
        set_("patch_size", patch)
        arguments.validate_transformer(self.hidden_size, self.num_layers, self.num_heads, self.mlp_dim)
        arguments.validate_top(self.num_classes, self.include_top, self.pooling, self.classifier_activation)
        if self.representation_size is not None:
            arguments.positive_int(self.representation_size, "representation_size")
        for rate in ("dropout", "attention_dropout", "drop_path_rate"):
            set_(rate, check_rate(getattr(self, rate), rate))
        epsilon = self.layer_norm_epsilon
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < 1:
            raise ValueError(f"`layer_norm_epsilon` must be a float in (0, 1). Received: layer_norm_epsilon={epsilon!r}")
        set_("layer_norm_epsilon", float(epsilon))
        for flag in ("include_top", "include_preprocessing"):
            set_(flag, bool(getattr(self, flag)))
        family.validate(self, set_)
        naflex.validate(self, set_)

    def _crop_remainder(self, size):
        """``crop_remainder`` checked: True only where it crops something (a size the patches divide: False)."""
        if not isinstance(self.crop_remainder, bool):
            raise ValueError(f"`crop_remainder` must be True or False. Received: crop_remainder={self.crop_remainder!r}")
        if not self.crop_remainder:
            return False
        if self.stem is not None or self.image_size is None:
            raise ValueError(
                "crop_remainder=True crops a fixed image size to whole patches of the image: it needs stem=None and an "
                f"image_size. Received: stem={self.stem!r}, image_size={self.image_size!r}"
            )
        (h, w), (ph, pw) = arguments.positive_pair(size, "image_size"), arguments.positive_pair(self.patch_size, "patch_size")
        return bool(h % ph or w % pw)

    @property
    def _stem_context(self):
        return f" for block_units={self.block_units}" if self.stem == "resnet" else ""

    # ------------------------------------------------------------------ what follows from the fields

    @property
    def stride(self):
        """Total stride of the stem: 1 without one, 4 x 2 per ResNet stage after the first, 2 per conv after the first."""
        return stems.stem_stride(self.stem, self.block_units, self.stem_channels, self.stem_strides)

    def feature_map_size(self, image_size=None):
        """``(rows, cols)`` of what the patches are cut from, for ``image_size`` (default: the native size).

        Every stem pads ``"same"``: ``ceil(size / stride)`` pixels.

        Example:
        >>> ViTConfig(image_size=64, stem="resnet", block_units=(1,), width=0.5, patch_size=1).feature_map_size()
        (16, 16)
        """
        h, w = self.native_image_size if image_size is None else arguments.positive_pair(image_size, "image_size")
        return -(-h // self.stride), -(-w // self.stride)

    def grid_for(self, image_size):
        """``(rows, cols)`` of patches for an image of ``image_size``; a size the patches do not divide is refused
        (with ``crop_remainder``, cropped to the whole patches it holds)."""
        rows, cols = self.feature_map_size(image_size)
        ph, pw = self.patch_size
        if self.crop_remainder and rows >= ph and cols >= pw:
            return rows // ph, cols // pw
        if rows % ph or cols % pw:
            stem = "" if self.stride == 1 else f" (a {rows}x{cols} feature map)"
            raise ValueError(
                f"The image size must be divisible by the patch size{stem}. "
                f"Received: image_size={tuple(arguments.positive_pair(image_size, 'image_size'))}, "
                f"patch_size={self.patch_size}"
            )
        return rows // ph, cols // pw

    @property
    def grid(self):
        """``(rows, cols)`` of the patch grid the position embeddings are stored for."""
        return self.grid_for(self.native_image_size)

    @property
    def pooled(self):
        """The model computes a pooled vector (every ``pooling`` but None and ``"feature_map"``)."""
        return self.pooling not in arguments.NO_TOP_OUTPUTS

    @property
    def output(self):
        """What the model returns, one of :data:`OUTPUTS`: what predict and the exports call its output.

        ``"probabilities"`` (a head ending in softmax, a distribution over the classes, or in sigmoid, each class's own
        probability: multi-label), ``"logits"`` (a head without an activation, or with another),
        ``"embedding"`` (no head: the pooled vector, projected where ``projection_dim`` is set, as CLIP's
        image embedding), ``"tokens"`` (``pooling=None``) or ``"feature_map"``.

        Example:
        >>> clip = ViTConfig(image_size=32, patch_size=16, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        ...                  include_top=False, projection_dim=8)
        >>> clip.output, clip.replace(include_top=True, num_classes=3).output
        ('embedding', 'probabilities')
        """
        if self.include_top:
            return "probabilities" if self.classifier_activation in ("softmax", "sigmoid") else "logits"
        if self.pooled:
            return "embedding"
        return "tokens" if self.pooling is None else "feature_map"

    @property
    def num_patches(self):
        return self.grid[0] * self.grid[1]

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: the class, distillation and register tokens."""
        return int(self.class_token) + int(self.distillation_token) + self.num_register_tokens

    @property
    def num_position_prefix(self):
        """Position embeddings stored before the patches' (the class and distillation tokens', if they have any; the
        registers' with ``register_positions``)."""
        return position_prefix(int(self.class_token) + int(self.distillation_token), self.num_register_tokens,
                               self.prefix_positions, self.register_positions)

    @property
    def num_tokens(self):
        """Length of the token sequence at the native size."""
        return self.num_prefix_tokens + self.num_patches

    @property
    def variant(self):
        """The registry name of this shape (``"B/16"``, ``"R50+B/16"``), or None: what preset tags are looked up by."""
        sizes = dict(hidden_size=self.hidden_size, num_layers=self.num_layers, mlp_dim=self.mlp_dim, num_heads=self.num_heads)
        if not family.is_paper(self):
            return None  # the paper's presets do not fit another member of the family
        ph, pw = self.patch_size
        if self.stem is None:
            return next((f"{size}/{ph}" for size, entry in variants.VARIANTS.items() if entry == sizes and ph == pw), None)
        if self.stem == "resnet":
            for name, entry in variants.HYBRID_VARIANTS.items():
                same_stem = (self.block_units, self.width, self.patch_size) == (entry["block_units"], 1, (1, 1))
                if same_stem and variants.VARIANTS[entry["size"]] == sizes:
                    return name
        return None

    @property
    def default_name(self):
        """The model name a builder gives: ``vit_b16``, ``r50_vit_b16``, ``vit``, ``hybrid_vit``, ``vit_conv_stem``."""
        if self.variant:
            return variants.model_name(self.variant)
        return {None: "vit", "resnet": "hybrid_vit", "conv": "vit_conv_stem"}[self.stem]

    def describe_size(self):
        """``"384x384, patch 16x16"`` or ``"any size (native 224x224), patch 16x16"``, for messages.

        Example:
        >>> ViTConfig(image_size=(32, 48), patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64).describe_size()
        '32x48, patch 8x8'
        >>> ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
        ...           input_mode="naflex", max_patches=64).describe_size()
        'NaFlex, up to 64 patches (native 32x32), patch 8x8'
        """
        patch = "x".join(map(str, self.patch_size))
        if self.input_mode == "naflex":  # each image at its own aspect: the budget of patches is its size
            native = "x".join(map(str, self.native_image_size))
            budget = f"up to {self.max_patches} patches" if self.max_patches else "any number of patches"
            return f"NaFlex, {budget} (native {native}), patch {patch}"
        if self.image_size is None:
            return f"any size (native {'x'.join(map(str, self.native_image_size))}), patch {patch}"
        return f"{self.image_size[0]}x{self.image_size[1]}, patch {patch}"

    # ------------------------------------------------------------------ (de)serialisation

    def replace(self, **changes):
        """A new config with ``changes`` (validated): e.g. ``config.replace(num_classes=10)``.

        For ``image_size=None`` the native size stays, unless ``native_image_size`` is given; for a fixed
        ``image_size``, ``native_image_size`` follows it.
        """
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            raise ValueError(f"Unknown ViTConfig field(s) {unknown}; the fields are: {', '.join(field_names())}")
        if "pooling" in changes and "class_token" not in changes and self.class_token == (self.pooling != "gap"):
            changes["class_token"] = None  # the class token followed the pooling: it still does
        if changes.get("image_size", self.image_size) is not None and "native_image_size" not in changes:
            changes["native_image_size"] = None
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        """The fields as JSON-ready values (tuples as lists), what ``.keras`` files store."""
        return {name: _jsonable(getattr(self, name)) for name in field_names()}

    @classmethod
    def from_dict(cls, values):
        """A config from :meth:`to_dict`'s output; an unknown field is refused by name."""
        if isinstance(values, cls):
            return values
        if not isinstance(values, dict):
            raise TypeError(f"A ViTConfig is read from a dict. Received: {type(values).__name__}")
        unknown = sorted(set(values) - set(field_names()))
        if unknown:
            raise ValueError(f"Unknown ViTConfig field(s) {unknown}; the fields are: {', '.join(field_names())}")
        values = dict(values)
        if "pool_include_prefix" not in values and values.get("pooling") == "map" and values.get("input_mode") != "naflex":
            values["pool_include_prefix"] = True  # written before the field: the attention pooling read every token
        return cls(**{name: _tuples(value) for name, value in values.items()})


def field_names():
    """The names of :class:`ViTConfig`'s fields, in order."""
    return tuple(field.name for field in dataclasses.fields(ViTConfig))


def _jsonable(value):
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tuples(value):
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
