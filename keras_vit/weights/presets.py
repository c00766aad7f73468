"""Named pretrained weights as tables of data: the original Google checkpoints, and the ViT family's Hub presets.

A preset is (variant, tag, resolution) -> a file in the ``vit_models`` bucket of google-research/vision_transformer,
found by :func:`find`, fetched and verified by :func:`keras_vit.weights.sources.fetch`; ``KERAS_VIT_WEIGHTS_URL``
replaces :data:`BASE_URL` for every preset (a mirror, an air-gapped site). Every file name was looked up, none
composed, and every top-1 figure is as its source (:data:`TOP1_SOURCES`) publishes it, never measured here:
docs/models-and-weights.md names where each came from. No source publishes sizes or hashes of these files; a
download is checked by the zip CRC of every array instead.

The family presets (:data:`HUB_PRESETS`: DINOv2, DINOv3, EVA-02, Perception Encoder, SigLIP, CLIP, DeiT, MAE, timm's
register models) are named (``"dinov2_vits14"``) and resolve to timm's Hub repositories ``timm/<architecture>.<tag>``
(entries with ``hf_hub_id='timm/'`` in timm's ``default_cfgs``), fetched through huggingface_hub's cache as
``hf://`` sources are. The OpenAI CLIP towers name timm's ``*_clip_quickgelu_*`` registration, whose
``hf_hub_id`` is that same repository (timm's ``_quick_gelu_cfgs``): the weights are natively QuickGELU, and the
repository's config.json names the GELU registration.
"""

import dataclasses
import os

BASE_URL = "https://storage.googleapis.com/vit_models"
URL_ENV = "KERAS_VIT_WEIGHTS_URL"

TOP1_SOURCES = {
    "gr": "google-research/vision_transformer README.md",
    "timm": "huggingface/pytorch-image-models results/results-imagenet.csv",
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """One published checkpoint.

    Attributes:
        variant: the registry name of the architecture (``"B/16"``, ``"R50+B/16"``).
        tag: the name users pass as ``weights=`` (``"augreg_in21k_ft_in1k"``).
        image_size: the resolution the file was trained or fine-tuned at.
        file: the path under :data:`BASE_URL`.
        top1: published ImageNet-1k top-1 (percent), or None.
        top1_source: a key of :data:`TOP1_SOURCES`, or None.
        sha256: the file's SHA-256 where a source publishes it (none does today), checked after download.
    """

    variant: str
    tag: str
    image_size: int
    file: str
    top1: float | None = None
    top1_source: str | None = None
    sha256: str | None = None


_I21K = "imagenet21k"
_I1K = "imagenet21k+imagenet2012"
_AUG = "augreg_in21k"
_AUG_FT = "augreg_in21k_ft_in1k"
_AUG_1K = "augreg_in1k"
_FT = "--imagenet2012-steps_20k-lr_"

# (variant, tag, resolution, file under BASE_URL, top-1 %, its source) -- sources in the module docstring
_TABLE = (
    # the paper's releases (gr vit_jax.ipynb listing; -224 files: gr README.md)
    ("B/16", _I21K, 224, "imagenet21k/ViT-B_16.npz", None, None),
    ("B/32", _I21K, 224, "imagenet21k/ViT-B_32.npz", None, None),
    ("L/16", _I21K, 224, "imagenet21k/ViT-L_16.npz", None, None),
    ("L/32", _I21K, 224, "imagenet21k/ViT-L_32.npz", None, None),
    ("H/14", _I21K, 224, "imagenet21k/ViT-H_14.npz", None, None),
    ("R50+B/16", _I21K, 224, "imagenet21k/R50+ViT-B_16.npz", None, None),
    ("R50+L/32", _I21K, 224, "imagenet21k/R50+ViT-L_32.npz", None, None),
    ("B/16", _I1K, 224, "imagenet21k+imagenet2012/ViT-B_16-224.npz", 81.2, "gr"),
    ("B/16", _I1K, 384, "imagenet21k+imagenet2012/ViT-B_16.npz", None, None),
    ("B/32", _I1K, 384, "imagenet21k+imagenet2012/ViT-B_32.npz", None, None),
    ("L/16", _I1K, 224, "imagenet21k+imagenet2012/ViT-L_16-224.npz", 82.7, "gr"),
    ("L/16", _I1K, 384, "imagenet21k+imagenet2012/ViT-L_16.npz", None, None),
    ("L/32", _I1K, 384, "imagenet21k+imagenet2012/ViT-L_32.npz", None, None),
    ("R50+B/16", _I1K, 384, "imagenet21k+imagenet2012/R50+ViT-B_16.npz", None, None),
    # AugReg, "How to train your ViT?" (timm default_cfgs; top-1: timm results-imagenet.csv)
    ("Ti/16", _AUG, 224, "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0.npz", None, None),
    ("S/32", _AUG, 224, "augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz", None, None),
    ("S/16", _AUG, 224, "augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz", None, None),
    ("B/32", _AUG, 224, "augreg/B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0.npz", None, None),
    ("B/16", _AUG, 224, "augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0.npz", None, None),
    ("L/16", _AUG, 224, "augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1.npz", None, None),
    ("R26+S/32", _AUG, 224, "augreg/R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0.npz", None, None),
    ("R50+L/32", _AUG, 224, "augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0.npz", None, None),
    ("Ti/16", _AUG_FT, 224, f"augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_224.npz", 75.452, "timm"),
    ("Ti/16", _AUG_FT, 384, f"augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_384.npz", 78.438, "timm"),
    ("S/32", _AUG_FT, 224, f"augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_224.npz", 76.010, "timm"),
    ("S/32", _AUG_FT, 384, f"augreg/S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_384.npz", 80.476, "timm"),
    ("S/16", _AUG_FT, 224, f"augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_224.npz", 81.402, "timm"),
    ("S/16", _AUG_FT, 384, f"augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_384.npz", 83.814, "timm"),
    ("B/32", _AUG_FT, 224, f"augreg/B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_224.npz", 80.732, "timm"),
    ("B/32", _AUG_FT, 384, f"augreg/B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0{_FT}0.03-res_384.npz", 83.358, "timm"),
    ("B/16", _AUG_FT, 224, f"augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0{_FT}0.01-res_224.npz", 84.534, "timm"),
    ("B/16", _AUG_FT, 384, f"augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0{_FT}0.01-res_384.npz", 86.010, "timm"),
    ("L/16", _AUG_FT, 224, f"augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_224.npz", 85.856, "timm"),
    ("L/16", _AUG_FT, 384, f"augreg/L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_384.npz", 87.096, "timm"),
    ("R26+S/32", _AUG_FT, 224, f"augreg/R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1{_FT}0.03-res_224.npz", 81.856, "timm"),
    ("R26+S/32", _AUG_FT, 384, f"augreg/R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0{_FT}0.03-res_384.npz", 84.066, "timm"),
    ("R50+L/32", _AUG_FT, 224, f"augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_224.npz", 84.434, "timm"),
    ("R50+L/32", _AUG_FT, 384, f"augreg/R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0{_FT}0.01-res_384.npz", 86.188, "timm"),
    ("S/16", _AUG_1K, 224, f"augreg/S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0{_FT}0.01-res_224.npz", 78.842, "timm"),
    ("S/16", _AUG_1K, 384, f"augreg/S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0{_FT}0.01-res_384.npz", 81.130, "timm"),
    ("B/32", _AUG_1K, 224, f"augreg/B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_224.npz", 74.908, "timm"),
    ("B/32", _AUG_1K, 384, f"augreg/B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_384.npz", 78.750, "timm"),
    ("B/16", _AUG_1K, 224, f"augreg/B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_224.npz", 79.154, "timm"),
    ("B/16", _AUG_1K, 384, f"augreg/B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1{_FT}0.01-res_384.npz", 81.102, "timm"),
)

PRESETS = [Preset(*row) for row in _TABLE]


@dataclasses.dataclass(frozen=True)
class HubPreset:
    """A named family preset: a timm Hub repository, and what ``keras_vit.from_pretrained(name)`` builds from it.

    Attributes:
        name: what users pass (``"dinov2_vits14"``).
        repo: the Hub repository (``"timm/vit_small_patch14_dinov2.lvd142m"``).
        family: DINOv2, SigLIP, CLIP...
        image_size: the resolution of the model (its position embeddings' grid x the patch; timm's ``input_size``
            where the patches divide it).
        num_classes: the head's outputs, 0 for none (its features), or CLIP's (or Perception Encoder's) projection width.
        output: what the model gives: ``"embedding"`` (no head, or CLIP's projection) or ``"logits"``.
        architecture: timm's registration to build instead of the config.json's, or None.
    """

    name: str
    repo: str
    family: str
    image_size: int
    num_classes: int
    output: str
    architecture: str | None = None

    @property
    def timm_architecture(self):
        return self.architecture or self.repo.partition("/")[2].partition(".")[0]


_QUICK = "_clip_quickgelu_224"
# (name, repository, family, resolution, head outputs (0: none; CLIP: the projection), output, architecture)
_HUB_TABLE = (
    ("dinov2_vits14", "timm/vit_small_patch14_dinov2.lvd142m", "DINOv2", 518, 0, "embedding", None),
    ("dinov2_vitb14", "timm/vit_base_patch14_dinov2.lvd142m", "DINOv2", 518, 0, "embedding", None),
    ("dinov2_vitl14", "timm/vit_large_patch14_dinov2.lvd142m", "DINOv2", 518, 0, "embedding", None),
    ("dinov2_vitg14", "timm/vit_giant_patch14_dinov2.lvd142m", "DINOv2", 518, 0, "embedding", None),
    ("dinov2_vits14_reg4", "timm/vit_small_patch14_reg4_dinov2.lvd142m", "DINOv2 + registers", 518, 0, "embedding", None),
    ("dinov2_vitb14_reg4", "timm/vit_base_patch14_reg4_dinov2.lvd142m", "DINOv2 + registers", 518, 0, "embedding", None),
    # DINOv3 (RoPE: any size runs; timm's input_size 256, its pretrained_cfg)
    ("dinov3_vits16", "timm/vit_small_patch16_dinov3.lvd1689m", "DINOv3", 256, 0, "embedding", None),
    ("dinov3_vits16plus", "timm/vit_small_plus_patch16_dinov3.lvd1689m", "DINOv3", 256, 0, "embedding", None),
    ("dinov3_vitb16", "timm/vit_base_patch16_dinov3.lvd1689m", "DINOv3", 256, 0, "embedding", None),
    ("dinov3_vitl16", "timm/vit_large_patch16_dinov3.lvd1689m", "DINOv3", 256, 0, "embedding", None),
    ("dinov3_vith16plus", "timm/vit_huge_plus_patch16_dinov3.lvd1689m", "DINOv3", 256, 0, "embedding", None),
    # EVA-02 (axial RoPE on a 16 x 16 reference grid: any size runs): the MIM features, and the ImageNet-1k classifiers
    ("eva02_vitb14", "timm/eva02_base_patch14_224.mim_in22k", "EVA-02", 224, 0, "embedding", None),
    ("eva02_vitl14", "timm/eva02_large_patch14_224.mim_m38m", "EVA-02", 224, 0, "embedding", None),
    ("eva02_vitb14_448_in1k", "timm/eva02_base_patch14_448.mim_in22k_ft_in22k_in1k", "EVA-02", 448, 1000, "logits", None),
    ("eva02_vitl14_448_in1k", "timm/eva02_large_patch14_448.mim_m38m_ft_in22k_in1k", "EVA-02", 448, 1000, "logits", None),
    # Perception Encoder core (RoPE, attention pooling, then PE's projection: timm's head with its zero bias)
    ("pe_core_vitb16", "timm/vit_pe_core_base_patch16_224.fb", "PE core", 224, 1024, "embedding", None),
    ("pe_core_vitl14", "timm/vit_pe_core_large_patch14_336.fb", "PE core", 336, 1024, "embedding", None),
    ("siglip_base_patch16_224", "timm/vit_base_patch16_siglip_224.webli", "SigLIP", 224, 0, "embedding", None),
    # timm's input_size 384; its stride-14 patch convolution covers 27 x 14 = 378 pixels of it (crop_remainder)
    ("siglip_so400m_patch14_384", "timm/vit_so400m_patch14_siglip_384.webli", "SigLIP", 384, 0, "embedding", None),
    ("clip_vitb16_openai", "timm/vit_base_patch16_clip_224.openai", "CLIP", 224, 512, "embedding", "vit_base_patch16" + _QUICK),
    ("clip_vitb32_openai", "timm/vit_base_patch32_clip_224.openai", "CLIP", 224, 512, "embedding", "vit_base_patch32" + _QUICK),
    ("clip_vitl14_openai", "timm/vit_large_patch14_clip_224.openai", "CLIP", 224, 768, "embedding", "vit_large_patch14" + _QUICK),
    ("deit3_base_patch16_224", "timm/deit3_base_patch16_224.fb_in1k", "DeiT III", 224, 1000, "logits", None),
    ("deit_base_distilled_patch16_224", "timm/deit_base_distilled_patch16_224.fb_in1k", "DeiT (distilled)", 224, 1000,
     "logits", None),
    ("mae_vitb16", "timm/vit_base_patch16_224.mae", "MAE", 224, 0, "embedding", None),
    ("vit_betwixt_patch16_reg4_gap_256", "timm/vit_betwixt_patch16_reg4_gap_256.sbb2_e200_in12k_ft_in1k",
     "timm registers + GAP", 256, 1000, "logits", None),
)
HUB_PRESETS = {row[0]: HubPreset(*row) for row in _HUB_TABLE}


def hub_preset(name):
    """The named family preset ``name``, or None.

    Example:
    >>> hub_preset("dinov2_vits14").repo, hub_preset("B/16:imagenet21k")
    ('timm/vit_small_patch14_dinov2.lvd142m', None)
    """
    return HUB_PRESETS.get(name) if isinstance(name, str) else None


def hub_names():
    """The names of the family presets, in table order."""
    return list(HUB_PRESETS)


def tags():
    """Every preset tag, in table order.

    Example:
    >>> tags()[:2]
    ['imagenet21k', 'imagenet21k+imagenet2012']
    """
    return list(dict.fromkeys(p.tag for p in PRESETS))


def is_tag(value):
    """Whether ``value`` is a preset tag (and not, say, a file name).

    Example:
    >>> is_tag("augreg_in21k"), is_tag("ViT-B_16.npz")
    (True, False)
    """
    return isinstance(value, str) and value in tags()


def presets_of(variant):
    """The presets of one variant, in table order.

    Example:
    >>> [(p.tag, p.image_size) for p in presets_of("R50+B/16")]
    [('imagenet21k', 224), ('imagenet21k+imagenet2012', 384)]
    """
    return [p for p in PRESETS if p.variant == variant]


def variant_named(name):
    """The variant with presets that ``name`` writes, as the registry (``"B/16"``) or the messages (``"ViT-B/16"``)
    do, in any letter case, or None.

    Example:
    >>> variant_named("ViT-Ti/16"), variant_named("r50+vit-b/16"), variant_named("X/16")
    ('Ti/16', 'R50+B/16', None)
    """
    key = str(name).lower().replace("vit-", "")
    return next((p.variant for p in PRESETS if p.variant.lower() == key), None)


def find(variant, tag, image_size=None):
    """The preset ``tag`` of ``variant`` closest to ``image_size`` (its own file where one exists; another loads with
    its position embeddings resampled); ``image_size`` None picks the first file.

    Raises:
        ValueError: the variant has no file under ``tag``; the message lists the tags it has.

    Example:
    >>> find("Ti/16", "augreg_in21k_ft_in1k", 384).file.endswith("res_384.npz")
    True
    >>> find("H/14", "augreg_in21k")
    Traceback (most recent call last):
    ...
    ValueError: No preset 'augreg_in21k' for ViT-H/14. Its presets: 'imagenet21k' (224). All tags: ...
    """
    candidates = [p for p in presets_of(variant) if p.tag == tag]
    if not candidates:
        own = {}
        for p in presets_of(variant):
            own.setdefault(p.tag, []).append(str(p.image_size))
        listed = ", ".join(f"{t!r} ({'/'.join(sizes)})" for t, sizes in own.items()) or "none"
        raise ValueError(
            f"No preset {tag!r} for {_title(variant)}. Its presets: {listed}. "
            f"All tags: {', '.join(map(repr, tags()))}."
        )
    if image_size is None:
        return candidates[0]
    h, w = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    # the file of this resolution, else the nearest one (ties: the larger)
    return min(candidates, key=lambda p: (abs(p.image_size - h) + abs(p.image_size - w), -p.image_size))


def url_of(preset):
    """The URL a preset is downloaded from, under ``$KERAS_VIT_WEIGHTS_URL`` if set, else :data:`BASE_URL`.

    Example:
    >>> url_of(find("B/16", "imagenet21k"))
    'https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz'
    """
    return f"{(os.environ.get(URL_ENV) or BASE_URL).rstrip('/')}/{preset.file}"


def _title(variant):
    resnet, _, vit = variant.rpartition("+")
    return f"{resnet}+ViT-{vit}" if resnet else f"ViT-{vit}"
