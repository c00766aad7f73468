"""A classic ViT's weights read as the NaFlex model timm builds from them with ``timm.create_model(..., use_naflex=True)``.

timm 1.0.31 turns a ``VisionTransformer`` or an ``Eva`` registration into a ``NaFlexVit``
(``naflexvit.py``: ``_create_naflexvit_from_classic``, ``_create_naflexvit_from_eva``) and converts its state dict
with ``checkpoint_filter_fn``. What that conversion does, and keras_vit's reading of it (:func:`convert`, on the
architecture :func:`keras_vit.weights.architecture.infer` reads, so an ``.npz``, a timm, transformers or keras-hub
file and a keras_vit ``.keras`` image model all get the same):

* the position table ``pos_embed`` ``(1, [prefix +] rows * cols, D)`` becomes the learned ``(1, rows, cols, D)``
  table of the grid ``img_size // patch_size`` (``pos_embed_grid_size=None``); where it holds the class token's
  position (``no_embed_class=False``), that row is added to ``cls_token`` and dropped. keras_vit keeps the row
  (``prefix_positions=True``) and adds it to the class token as the model runs: the same sum;
* each image's table is resampled by ``NaFlexVitCfg``'s defaults, ``pos_embed_interp_mode='bicubic'``,
  ``pos_embed_antialias=True``, ``align_corners=False`` (``position_resampling="bicubic_torch_antialias"``),
  whatever the classic model resampled with; C-RADIO's classic registrations (``vit_*_radio_*``) keep RADIO's
  128 x 128 table, bilinear without antialiasing, aspect preserving (``_create_vision_transformer``);
* ``global_pool`` is kept, with ``fc_norm`` defaulting as the classic model's (``global_pool in ('avg', 'avgmax',
  'max')``, EVA's ``global_pool == 'avg'``) and the final norm where ``fc_norm`` is not: keras_vit's reading of the
  classic model already holds them. The pooling reads the valid patch tokens only (``pool_include_prefix=False``),
  attention pooling (``map``) included, which in the classic model also attends to the prefix tokens;
* the class and register tokens, the blocks and the head are the classic model's.

What keras_vit's NaFlex path lacks (:func:`lacking`: RoPE, a distillation token, a hybrid's ResNet stem, a norm of
the patch embedding, transformers' class-token-and-mean head) is refused by name, before anything is built; so is
what timm's own conversion cannot load (a classic C-RADIO table that is not RADIO's 128 x 128). EVA with both a
final norm and ``fc_norm`` (which timm's ``_create_naflexvit_from_eva`` refuses) is refused by keras_vit's reading
of the classic model already.
"""

import dataclasses

# NaFlexVitCfg's pos_embed_interp_mode='bicubic', pos_embed_antialias=True, pos_embed_align_corners=False
TIMM_RESAMPLING = "bicubic_torch_antialias"
# vision_transformer.py's _create_vision_transformer(use_naflex=True) for 'radio' variants: pos_embed_grid_size
# (128, 128), bilinear without antialiasing, aspect preserving, align_corners=True for these two (_RADIO_ALIGN_CORNERS)
RADIO_GRID = (128, 128)
RADIO_ALIGN_CORNERS = ("base_patch16_radio_v3", "huge_patch16_radio_v3")
TIMM = "timm.create_model(..., use_naflex=True)"


def asked(info, arch, overrides):
    """Whether ``from_pretrained(source, **overrides)`` asks for the NaFlex model of a classic source: ``max_patches``
    or ``input_mode="naflex"`` given, and the source's model takes images of one size (no NaFlex form of its own,
    as SigLIP 2's has)."""
    wants = overrides.get("max_patches") is not None or overrides.get("input_mode") == "naflex"
    return wants and overrides.get("input_mode", "naflex") == "naflex" and info.naflex is None and arch["input_mode"] == "image"


def lacking(arch, architecture=None):
    """What keeps the classic architecture ``arch`` (an :func:`~keras_vit.weights.architecture.infer` dict) from
    keras_vit's NaFlex model, each naming its switch; ``architecture``: the timm registration the file names.

    Example:
    >>> arch = dict(image_size=224, patch_size=16, rope="axial", distillation_token=True, pooling="token")
    >>> lacking(arch)  # doctest: +NORMALIZE_WHITESPACE
    ["RoPE (rope='axial'): keras_vit's NaFlex path has no rotary positions on each image's own grid yet",
     "DeiT's distillation token (distillation_token=True)"]
    >>> lacking(dict(arch, rope=None, distillation_token=False))
    []
    """
    out = []
    if arch.get("rope") is not None:
        out.append(f"RoPE (rope={arch['rope']!r}): keras_vit's NaFlex path has no rotary positions on each image's "
                   "own grid yet")
    if arch.get("distillation_token"):
        out.append("DeiT's distillation token (distillation_token=True)")
    if arch.get("register_positions"):
        out.append("register tokens with rows of their own in the position table (register_positions=True, timm's SBB "
                   "so150m models): the NaFlex table has the class token's row at most")
    if arch.get("pool_include_prefix") and arch.get("pooling") != "map":
        out.append(f"a mean over the prefix tokens too (pool_include_prefix=True with pooling={arch.get('pooling')!r})")
    if "block_units" in arch:
        out.append(f"a hybrid's ResNet stem (stem='resnet', block_units={tuple(arch['block_units'])!r}): NaFlex cuts "
                   "the image into patches itself")
    if arch.get("patch_norm"):
        out.append("a norm of the patch embedding (patch_norm=True, AIMv2's)")
    if arch.get("pooling") == "token_gap_concat":
        out.append("the class token and the mean of the patches side by side (pooling='token_gap_concat', "
                   "transformers' Dinov2ForImageClassification)")
    grid = _grid(arch)
    if architecture and "radio" in architecture and grid != RADIO_GRID:
        out.append(f"a C-RADIO table of {grid or 'any'} (timm builds C-RADIO's NaFlex model with RADIO's "
                   f"{RADIO_GRID[0]} x {RADIO_GRID[1]} pos_embed_grid_size, which this table does not fill: timm's load "
                   "fails too; load its naflexvit_*_radio_* registration instead)")
    return out


def convert(arch, info, source, overrides):
    """``(arch, info)`` of a classic source read as timm's ``use_naflex=True`` model: the architecture with
    ``input_mode="naflex"`` and timm's position rule, the :class:`~keras_vit.weights.source.CheckpointInfo` with that
    rule and the load report's sentences. Raises a ``ValueError`` naming each switch keras_vit's NaFlex path lacks."""
    refused = lacking(arch, info.architecture)
    if refused:
        raise ValueError(
            f"{source!r} cannot be read as a NaFlex model (input_mode='naflex' / max_patches, timm's use_naflex=True): "
            f"keras_vit's NaFlex path lacks {'; '.join(refused)}."
        )
    arch = dict(arch, input_mode="naflex", grid_rule="timm", factorized_positions=False, position_aspect_preserving=False)
    resampling, said = TIMM_RESAMPLING, ("NaFlexVitCfg's pos_embed_interp_mode='bicubic', pos_embed_antialias=True, "
                                         "align_corners=False")
    if info.architecture and "radio" in info.architecture:
        aligned = any(name in info.architecture for name in RADIO_ALIGN_CORNERS)
        resampling = "linear_aligned" if aligned else "bilinear_torch"
        said = f"C-RADIO's: bilinear without antialiasing, align_corners={aligned}, to the square of the longer side"
        arch["position_aspect_preserving"] = True
    if arch.pop("crop_remainder", False):  # timm's So400m/14 at 384: NaFlex takes whole patches; the table is 27 x 27
        (rows, cols), (ph, pw) = _grid(arch), _pair(arch["patch_size"])
        size = (rows * ph, cols * pw)
        arch["image_size"] = size[0] if size[0] == size[1] else size
    notes = [f"input_mode='naflex': the classic model's weights read as the NaFlex model {TIMM} builds from them "
             "(naflexvit.py _create_naflexvit_from_classic / _from_eva, checkpoint_filter_fn)"]
    if "position_resampling" in overrides:
        notes.append(f"position_resampling={overrides['position_resampling']!r} as given (timm's conversion: {resampling!r}, {said})")
    else:
        notes.append(f"position_resampling={resampling!r}: each image's table resampled as timm's NaFlex model does ({said})")
    if arch["class_token"] and arch["prefix_positions"]:
        notes.append("the class token's stored position is added to it, as checkpoint_filter_fn folds pos_embed[:, 0] "
                     "into cls_token")
    prefix = int(arch["class_token"]) + int(arch["num_register_tokens"])
    pooling = overrides.get("pooling", arch["pooling"])
    pooled = {"map": "attention pooling of the valid patch tokens only (NaFlexVit's pool_include_prefix=False)",
              "token": "the class token", "gap": "the mean of the valid patch tokens"}.get(pooling)
    if pooled and "pooling" not in overrides:
        notes.append(f"pooling={pooling!r} ({pooled}), fc_norm={arch['fc_norm']!r}, final_norm={arch['final_norm']!r}: "
                     f"the classic model's global_pool and norms, which timm's conversion keeps"
                     + (f" ({prefix} prefix token(s) no longer attended to by the pooling)" if pooling == "map" and prefix else ""))
    info = dataclasses.replace(info, position_resampling=resampling, notes=[*info.notes, *notes])
    return arch, info


def _grid(arch):
    """``(rows, cols)`` of the stored table, or None for a saved model of any size."""
    size, patch = arch["image_size"], arch["patch_size"]
    if size is None:
        return None
    (h, w), (ph, pw) = (_pair(size), _pair(patch))
    return h // ph, w // pw


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)
