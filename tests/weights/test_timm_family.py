"""The ViT family from timm's layouts (issue 24): a timm Hub repository in an offline Hugging Face cache, and a local
``.safetensors`` with its ``config.json``, each against an independent NumPy forward of timm's model.

Random tiny weights are written by ``tests/reference_timm.py``'s ``state_dict`` exactly as timm saves them; the
``config.json`` is timm's (``architecture``, ``num_classes``, ``global_pool``, ``pretrained_cfg`` with ``mean``,
``std``, ``input_size``) with ``model_args`` giving only the tiny sizes: every switch (tokens, LayerScale, the
activation, the epsilon, the pooling) comes from keras_vit's table of timm's registrations, as it does for a real
Hub repository. The reference (``reference_timm.forward``) gets timm's arguments of the same registration.
"""

import json
import math
import os

import numpy as np
import pytest

import keras_vit
import reference_timm
from keras_vit.architecture import params
from keras_vit.architecture.config import ViTConfig
from keras_vit.weights import CheckpointError, presets, timm_config

safetensors_numpy = pytest.importorskip("safetensors.numpy")

IMAGENET = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
CLIP = dict(mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711))
SIZES = dict(patch_size=8, embed_dim=32, depth=2, num_heads=4, img_size=32)
# family -> (timm architecture, timm's arguments of that registration for the reference, head outputs, mean/std)
FAMILIES = {
    "dinov2": ("vit_small_patch14_dinov2", dict(init_values=1e-5), 0, IMAGENET),
    "dinov2_reg4": ("vit_small_patch14_reg4_dinov2", dict(init_values=1e-5, reg_tokens=4, no_embed_class=True), 0, IMAGENET),
    "dinov2_giant_swiglu": ("vit_giant_patch14_dinov2", dict(init_values=1e-5, mlp_layer="SwiGLUPacked"), 0, IMAGENET),
    "siglip": ("vit_base_patch16_siglip_224", dict(class_token=False, global_pool="map"), 0, {}),
    "clip": ("vit_base_patch16_clip_224", dict(pre_norm=True, eps=1e-5), 16, CLIP),
    "clip_quickgelu": ("vit_base_patch16_clip_quickgelu_224", dict(pre_norm=True, eps=1e-5, act_layer="quick_gelu"), 16, CLIP),
    "deit3": ("deit3_base_patch16_224", dict(no_embed_class=True, init_values=1e-6), 5, IMAGENET),
    "deit_distilled": ("deit_base_distilled_patch16_224", dict(distilled=True), 5, IMAGENET),
    "mae": ("vit_base_patch16_224", {}, 0, IMAGENET),
    "reg4_gap": ("vit_betwixt_patch16_reg4_gap_256", dict(init_values=1e-5, class_token=False, no_embed_class=True,
                                                          reg_tokens=4, global_pool="avg"), 5, {}),
    # SBB's so150m: registers with positions (timm's no_embed_class=False: the table covers them), no class token
    # (mlp_ratio stated in model_args: the tiny width 32 times the registration's 2.572 is no whole MLP)
    "so150m_reg4_gap": ("vit_so150m_patch16_reg4_gap_256", dict(class_token=False, reg_tokens=4, global_pool="avg",
                                                                 fc_norm=False, mlp_ratio=2.0), 5, {}),
    "so150m2_reg1_gap": ("vit_so150m2_patch16_reg1_gap_256", dict(class_token=False, reg_tokens=1, global_pool="avg",
                                                                  init_values=1e-5, qkv_bias=False, mlp_ratio=2.0), 5, {}),
    # attention pooling of the patch tokens only (VisionTransformer.pool leaves the registers out), or of every token
    # (test_vit3's pool_include_prefix): keras_vit's attention pooling read every token, 0.3 relative off the first
    "so150m_reg4_map": ("vit_so150m_patch16_reg4_map_256", dict(class_token=False, reg_tokens=4, global_pool="map",
                                                                 mlp_ratio=2.0), 0, {}),
    "vit3_map_with_prefix": ("test_vit3", dict(class_token=False, reg_tokens=1, global_pool="map", init_values=1e-5,
                                               pool_include_prefix=True, mlp_ratio=2.0), 0, {}),
    # residual post-norm blocks (ResPostBlock: x + norm1(attn(x)), x + norm2(mlp(x)); its init_values scale the norms)
    "rpn": ("vit_base_patch16_rpn_224", dict(block_fn="ResPostBlock", class_token=False, global_pool="avg",
                                             qkv_bias=False, init_values=1e-5), 5, {}),
    # parallel blocks (ParallelScalingBlock: x + ls(MSA(LN(x)) + MLP(LN(x))) from one fused in_proj), with the fused
    # bias (qkv_bias) and with a separate mlp_bias
    "pwee": ("vit_pwee_patch16_reg1_gap_256", dict(block_fn="ParallelScalingBlock", class_token=False, no_embed_class=True,
                                                   reg_tokens=1, global_pool="avg", init_values=1e-5, mlp_ratio=5.0), 5, {}),
    # differential attention (DiffAttention: softmax(q1 k1) - lambda softmax(q2 k2), lambda_init by block index), in
    # sequential blocks and in DiffParallelScalingBlock (one fused out_proj of attention and MLP)
    "dwee": ("vit_dwee_patch16_reg1_gap_256", dict(attn_layer="diff", class_token=False, no_embed_class=True, reg_tokens=1,
                                                   global_pool="avg", init_values=1e-5, mlp_ratio=5.0), 5, {}),
    "dpwee": ("vit_dpwee_patch16_reg1_gap_256", dict(block_fn="DiffParallelScalingBlock", class_token=False, no_embed_class=True,
                                                     reg_tokens=1, global_pool="avg", init_values=1e-5, mlp_ratio=5.0), 5, {}),
}
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def timm_args(family):
    architecture, switches, classes, _ = FAMILIES[family]
    args = dict(SIZES, num_classes=classes, **switches)
    if switches.get("mlp_layer") == "SwiGLUPacked":
        args["mlp_ratio"] = 4.0  # fc1: 128 outputs, the gate's 2 x 64 (timm registers 2.66667 * 2 for the giant)
    return architecture, args


def write_timm(folder, family, seed=3, config=True, **model_args):
    """``model.safetensors`` (+ timm's ``config.json``) of ``family``; returns the state dict."""
    architecture, args = timm_args(family)
    args.update(model_args)
    norms = FAMILIES[family][3]
    state = reference_timm.state_dict(args, seed=seed)
    if "clip" in family:
        state["head.bias"] = np.zeros_like(state["head.bias"])  # timm's _convert_openai_clip: CLIP's proj, zero bias
    os.makedirs(folder, exist_ok=True)
    safetensors_numpy.save_file(state, os.path.join(folder, "model.safetensors"))
    if config:
        size = args["img_size"]
        pool = {"map": "map", "avg": "avg"}.get(args.get("global_pool"), "token")
        stated = {k: args[k] for k in SIZES if k != "img_size"}  # the tiny sizes; the switches: the registration's
        stated.update({k: v for k, v in model_args.items() if k != "num_classes"})
        if "mlp_layer" in args or "mlp_ratio" in FAMILIES[family][1]:
            stated["mlp_ratio"] = args["mlp_ratio"]
        written = {
            "architecture": architecture, "num_classes": args["num_classes"], "num_features": args["embed_dim"],
            "global_pool": pool, "model_args": stated,
            "pretrained_cfg": {"tag": "test", "input_size": [3, size, size], "num_classes": args["num_classes"],
                               "mean": list(norms.get("mean", (0.5,) * 3)), "std": list(norms.get("std", (0.5,) * 3))},
        }
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(written, f)
    return state


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hugging Face cache (HF_HUB_CACHE, HF_HUB_OFFLINE=1): ``repo(name)`` is its snapshot folder."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # huggingface_hub read the environment at import
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def repo(name):
        folder = cache / ("models--" + name.replace("/", "--"))
        (folder / "refs").mkdir(parents=True)
        (folder / "refs" / "main").write_text(COMMIT)
        return str(folder / "snapshots" / COMMIT)

    return repo


def images(size=32, n=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, size, size, 3)).astype("float32")


def expected(family, state, x, args=None):
    norms = FAMILIES[family][3]
    args = args or timm_args(family)[1]
    return np.stack([reference_timm.forward(image, state, args, **norms) for image in x])


def assert_close(y, ref):
    """Within 1e-4 of the reference, relative to its largest value."""
    assert y.shape == ref.shape
    assert np.max(np.abs(np.asarray(y, np.float64) - ref)) <= 1e-4 * np.max(np.abs(ref)), np.max(np.abs(y - ref))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_timm_hub_repository_gives_timms_output(hub_cache, tmp_path, family):
    """from_pretrained("hf://timm/<architecture>.test") from the offline cache, and the same files as a local
    .safetensors with its config.json: the logits, or the pooled embedding (CLIP: the projection) without a head."""
    architecture = FAMILIES[family][0]
    state = write_timm(hub_cache(f"timm/{architecture}.test"), family)
    x = images()
    ref = expected(family, state, x)
    model = keras_vit.from_pretrained(f"hf://timm/{architecture}.test", classifier_activation=None)
    assert_close(np.asarray(model(x)), ref)
    assert model.load_report.format == "timm" and model.vit_config.position_resampling == "bicubic_torch_antialias"
    local = write_timm(tmp_path / "local", family, seed=4)
    model = keras_vit.from_pretrained(str(tmp_path / "local" / "model.safetensors"), classifier_activation=None)
    assert_close(np.asarray(model(x)), expected(family, local, x))


def test_clip_head_is_the_projection_and_the_missing_patch_bias_is_reported(tmp_path):
    """timm stores OpenAI's bias-free proj as head with a zero bias, and CLIP's conv1 has no bias: both said."""
    write_timm(tmp_path / "clip", "clip_quickgelu")
    model = keras_vit.from_pretrained(str(tmp_path / "clip"))
    config = model.vit_config
    assert (config.projection_dim, config.include_top, config.mlp_activation, config.layer_norm_epsilon) == (16, False, "quick_gelu", 1e-5)
    report = str(model.load_report)
    assert "note: embedding/bias: zeros" in report and "note: projection/kernel: " in report
    assert config.input_mean == pytest.approx(CLIP["mean"])


def test_a_file_without_config_reads_the_family_from_its_shapes(tmp_path):
    """DINOv2 with registers: tokens, LayerScale and no class position read from the tensors (timm's defaults
    otherwise); the input is then [-1, 1], as timm's default pretrained_cfg says."""
    state = write_timm(tmp_path / "bare", "dinov2_reg4", config=False)
    model = keras_vit.from_pretrained(str(tmp_path / "bare" / "model.safetensors"), num_heads=4)
    config = model.vit_config
    assert (config.num_register_tokens, config.prefix_positions, config.layer_scale_init) == (4, False, 1e-5)
    assert any("architecture inferred from the state dict's keys" in note for note in model.load_report.notes)
    x = images()
    ref = np.stack([reference_timm.forward(image, state, timm_args("dinov2_reg4")[1]) for image in x])
    assert_close(np.asarray(model(x)), ref)


def test_a_clip_file_without_config_is_refused_by_what_it_cannot_tell(tmp_path):
    write_timm(tmp_path / "bare", "clip", config=False)
    with pytest.raises(CheckpointError, match=r"a timm state dict without a config\.json has a CLIP-style pre-norm "
                                              r"\(OpenAI's towers use quick_gelu\), whose MLP activation timm sets"):
        keras_vit.from_pretrained(str(tmp_path / "bare" / "model.safetensors"), num_heads=4)


TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=128)


@pytest.mark.parametrize("family, model_args, message", [
    ("dinov2", dict(include_top=False), r"model\.safetensors: 'blocks\.0\.ls1\.gamma' \(LayerScale\) but the model has "
                                        r"layer_scale_init=None"),
    ("clip_quickgelu", dict(include_top=False, pre_norm=True, projection_dim=16, layer_norm_epsilon=1e-5,
                            mlp_activation="gelu"),
     r"config\.json: architecture='vit_base_patch16_clip_quickgelu_224' \(timm registers act_layer='quick_gelu'\) but "
     r"the model has mlp_activation='gelu'"),
    ("dinov2_reg4", dict(include_top=False, layer_scale_init=1e-5, num_register_tokens=4),
     r"config\.json: architecture='vit_small_patch14_reg4_dinov2' \(timm registers no_embed_class=True\) but the model "
     r"has prefix_positions=True"),
    ("siglip", dict(include_top=False, class_token=False, pooling="gap"),
     r"model\.safetensors: 'attn_pool\.latent' \(attention pooling\) but the model has pooling='gap'"),
    ("deit_distilled", dict(num_classes=5), r"'dist_token' \(DeiT's distillation token\) but the model has "
                                            r"distillation_token=False"),
])
def test_a_model_with_another_switch_is_refused_by_name(tmp_path, family, model_args, message):
    """ViT(..., weights=timm file) with a switch other than the file's: refused before anything is built or written."""
    write_timm(tmp_path / "f", family)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.ViT(**TINY, **model_args, weights=str(tmp_path / "f" / "model.safetensors"))


def test_a_file_without_qkv_bias_loads_into_a_model_without_it(tmp_path):
    """Zeros no longer stand in for the biases: qkv_bias=False weights load into qkv_bias=False models only."""
    state = write_timm(tmp_path / "f", "mae", num_classes=5, qkv_bias=False)
    path = str(tmp_path / "f" / "model.safetensors")
    model = keras_vit.ViT(**TINY, num_classes=5, qkv_bias=False, classifier_activation=None, weights=path)
    x = images()
    assert_close(np.asarray(model(x)), expected("mae", state, x, dict(timm_args("mae")[1], num_classes=5, qkv_bias=False)))
    assert not any("query/bias" in key for key in model.load_report.loaded)
    with pytest.raises(CheckpointError, match=r"config\.json: model_args\.qkv_bias=False but the model has qkv_bias=True"):
        keras_vit.ViT(**TINY, num_classes=5, weights=path)


@pytest.mark.parametrize("family", ["deit3", "dinov2"])
def test_another_resolution_resamples_with_timms_rule(tmp_path, family):
    """32 -> 48: the position embeddings resampled as timm's resample_abs_pos_embed does (bicubic, antialias).

    The reference's own pos_embed is resampled with tests/reference_resampling.py's transcription of torch's
    antialiased bicubic (no keras_vit code), the prefix positions (DINOv2's class token) kept.
    """
    import reference_resampling

    state = write_timm(tmp_path / "f", family)
    model = keras_vit.from_pretrained(str(tmp_path / "f"), image_size=48, classifier_activation=None)
    assert "Transformer/posembed_input/pos_embedding" in model.load_report.resized
    architecture, args = timm_args(family)
    prefix = 0 if args.get("no_embed_class") else 1
    pos = state["pos_embed"][0]
    grid = pos[prefix:].reshape(4, 4, -1)
    resized = np.stack([reference_resampling.torch_bicubic_antialias(grid[..., c], (6, 6)) for c in range(grid.shape[-1])], -1)
    state = dict(state, pos_embed=np.concatenate([pos[:prefix], resized.reshape(36, -1)])[None].astype(np.float32))
    x = images(48)
    assert_close(np.asarray(model(x)), expected(family, state, x, dict(args, img_size=48)))


def test_a_config_that_contradicts_its_weights_is_refused(tmp_path):
    """The registration says LayerScale; weights without it belong to another model."""
    write_timm(tmp_path / "f", "mae")
    with open(tmp_path / "f" / "config.json") as f:
        config = json.load(f)
    config["architecture"] = "vit_small_patch14_dinov2"
    with open(tmp_path / "f" / "config.json", "w") as f:
        json.dump(config, f)
    with pytest.raises(CheckpointError, match=r"config\.json says architecture='vit_small_patch14_dinov2' \(timm registers "
                                              r"init_values=1e-05\) but the weights have False \('blocks\.0\.ls1\.gamma'"):
        keras_vit.from_pretrained(str(tmp_path / "f"))


def test_a_named_preset_resolves_to_its_timm_repository(hub_cache, monkeypatch):
    """from_pretrained("dinov2_vits14") reads timm/vit_small_patch14_dinov2.lvd142m from the Hugging Face cache;
    a CLIP preset builds timm's quick_gelu registration of the repository whose config.json names the GELU one."""
    state = write_timm(hub_cache("timm/vit_small_patch14_dinov2.lvd142m"), "dinov2")
    x = images()
    model = keras_vit.from_pretrained("dinov2_vits14")
    assert_close(np.asarray(model(x)), expected("dinov2", state, x))
    folder = hub_cache("timm/vit_base_patch16_clip_224.openai")
    state = write_timm(folder, "clip_quickgelu")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:  # as timm's Hub repository: the GELU registration
        json.dump(dict(config, architecture="vit_base_patch16_clip_224"), f)
    model = keras_vit.from_pretrained("clip_vitb16_openai")
    assert model.vit_config.mlp_activation == "quick_gelu"
    assert_close(np.asarray(model(x)), expected("clip_quickgelu", state, x))
    with pytest.raises(CheckpointError, match=r"timm/deit3_base_patch16_224\.fb_in1k is not in the Hugging Face cache"):
        keras_vit.from_pretrained("deit3_base_patch16_224")


def test_every_preset_names_a_registered_architecture():
    """Each named preset builds from timm's table alone (no download): its repository's architecture is registered."""
    for preset in presets.HUB_PRESETS.values():
        assert preset.repo.startswith("timm/") and "." in preset.repo
        fields = timm_config.config_fields(preset.timm_architecture)
        assert ViTConfig(**fields).native_image_size == (preset.image_size, preset.image_size), preset.name


def test_parameter_counts_match_timms_published_ones():
    """count_config_params from the table's configuration alone (nothing built).

    vit_small_patch14_dinov2 at 518: 22,056,192. The 22,056,576 quoted for DINOv2 ViT-S/14 counts Meta's
    torch hub model (facebookresearch/dinov2 ``dinov2_vits14``), which keeps the 384-wide ``mask_token`` used only
    in training; timm's ``_convert_dinov2`` drops it (``state_dict.pop("mask_token")``): 22,056,576 - 384. timm's
    model card (huggingface.co/timm/vit_small_patch14_dinov2.lvd142m) says 22.1 M. vit_base_patch16_siglip_224:
    92,884,224; its 256 sibling 92,930,304, which huggingface.co/timm/vit_base_patch16_siglip_256.webli publishes
    as "92.9M params".
    """
    def count(architecture, **changes):
        return params.count_config_params(ViTConfig(**timm_config.config_fields(architecture), **changes))

    assert count("vit_small_patch14_dinov2") == 22_056_576 - 384
    assert count("vit_base_patch16_siglip_224") == 92_884_224
    assert count("vit_base_patch16_siglip_256") == 92_930_304
    assert round(count("vit_small_patch14_reg4_dinov2") / 1e6, 1) == 22.1  # timm's reg4 model card: 22.1
    assert round(count("vit_giant_patch14_dinov2") / 1e6, 1) == 1136.5  # timm's model card: Params (M) 1136.5
    assert math.isclose(count("vit_base_patch16_siglip_224"), 92.9e6, rel_tol=1e-3)
    # the DINOv3 presets: timm 1.0.31's own models, counted in the peers environment (make peers) by
    # sum(p.numel() for p in timm.create_model(arch).parameters()) on the meta device
    dinov3 = {"vit_small_patch16_dinov3": 21_586_944, "vit_small_plus_patch16_dinov3": 28_683_264,
              "vit_base_patch16_dinov3": 85_641_216, "vit_large_patch16_dinov3": 303_079_424,
              "vit_huge_plus_patch16_dinov3": 840_509_440}
    assert {architecture: count(architecture) for architecture in dinov3} == dinov3
    # the EVA-02 presets: timm 1.0.31's own models, counted the same way (num_classes 0 for the MIM features, 1000 for
    # the classifiers), plus the zero key bias keras_vit holds as a weight (timm's k_proj has none: D per block)
    eva02 = {("eva02_base_patch14_224", 0): 85_758_720 + 12 * 768, ("eva02_large_patch14_224", 0): 303_268_800 + 24 * 1024,
             ("eva02_base_patch14_448", 1000): 87_117_544 + 12 * 768, ("eva02_large_patch14_448", 1000): 305_080_232 + 24 * 1024}
    assert {key: params.count_config_params(ViTConfig(**timm_config.config_fields(*key))) for key in eva02} == eva02


@pytest.mark.parametrize("args,message", [
    ({"qk_norm": True}, r"model_args\.qk_norm=True: keras_vit's ViT has no such part"),
    ({"dynamic_img_pad": True}, r"model_args\.dynamic_img_pad=True"),
    ({"rope_theta": 100.0}, r"model_args\.rope_theta=100\.0 is no timm VisionTransformer argument keras_vit knows"),
])
def test_a_model_arg_that_changes_timms_computation_is_refused_by_name(tmp_path, args, message):
    """timm builds what ``model_args`` say; one keras_vit has no switch for is never dropped silently."""
    from keras_vit.errors import CheckpointError
    from keras_vit.weights import timm_config

    with pytest.raises(CheckpointError, match=message):
        timm_config.resolve({"architecture": "vit_small_patch16_224", "model_args": args}, str(tmp_path / "config.json"))


def test_model_args_that_change_nothing_at_inference_are_accepted(tmp_path):
    from keras_vit.weights import timm_config

    args = {"drop_path_rate": 0.1, "dynamic_img_size": True, "qk_norm": False, "attn_layer": "attn"}
    resolved = timm_config.resolve({"architecture": "vit_small_patch16_224", "model_args": args}, "config.json")
    assert resolved["dynamic_img_size"] == (True, "model_args.dynamic_img_size=True")


def test_the_family_page_names_every_preset_with_the_count_keras_vit_info_prints(capsys):
    """docs/family.md: every named preset appears, and each count written beside one is what
    ``keras-vit info --presets`` prints for it (the command the page names)."""
    import re

    from keras_vit.cli import info

    info.print_hub_presets()
    printed = {}
    for line in capsys.readouterr().out.splitlines():
        cells = line.split()
        counts = re.findall(r"\s(\d{1,3}(?:,\d{3})+)\s", line)
        if cells and cells[0] in presets.HUB_PRESETS and counts:
            printed[cells[0]] = int(counts[0].replace(",", ""))
    assert sorted(printed) == sorted(presets.HUB_PRESETS)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "family.md"), encoding="utf-8") as f:
        text = f.read()
    missing = [name for name in presets.HUB_PRESETS if f"`{name}`" not in text]
    assert not missing, f"docs/family.md does not name the presets {missing}"
    written = re.findall(r"`([a-z0-9_]+)` \(([\d,]+)\)", text) + re.findall(r"`([a-z0-9_]+)` ([\d,]{6,})", text)
    assert written, "docs/family.md writes no parameter count beside a preset"
    compared = [(name, int(count.replace(",", ""))) for name, count in written if name in printed]
    assert len(compared) >= 3, written
    assert [(name, printed[name]) for name, _ in compared] == compared


def test_an_activation_keras_vit_lacks_is_refused_naming_the_file_and_field(tmp_path):
    """model_args.act_layer='relu': a CheckpointError naming config.json and the field, not ViTConfig's ValueError."""
    from keras_vit.errors import CheckpointError

    args = dict(patch_size=8, embed_dim=32, depth=1, num_heads=2, img_size=32, num_classes=5)
    folder = tmp_path / "relu"
    folder.mkdir()
    safetensors_numpy.save_file(reference_timm.state_dict(args), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224",
                                                    "model_args": dict(args, act_layer="relu")}))
    with pytest.raises(CheckpointError, match=r"config\.json.*model_args\.act_layer='relu': keras_vit's MLP has no such "
                                              r"activation \(it has gelu, gelu_tanh, quick_gelu, silu\)"):
        keras_vit.from_pretrained(str(folder))


def test_a_clip_classifier_with_a_zero_head_bias_and_named_classes_stays_a_classifier(tmp_path):
    """A fine-tuned CLIP tower whose head bias is all zeros, with label_names in its config.json: it used to be read as
    CLIP's projection (projection_dim, no head, no softmax, the names dropped)."""
    import json

    state = write_timm(tmp_path / "clip", "clip_quickgelu")
    path = tmp_path / "clip" / "config.json"
    config = json.loads(path.read_text())
    config["label_names"] = [f"kind {i}" for i in range(16)]
    path.write_text(json.dumps(config))
    model = keras_vit.from_pretrained(str(tmp_path / "clip"), classifier_activation=None)
    assert (model.vit_config.projection_dim, model.vit_config.include_top, model.vit_config.num_classes) == (None, True, 16)
    assert model.class_names[:2] == ["kind 0", "kind 1"]
    x = images()
    assert_close(np.asarray(model(x)), expected("clip_quickgelu", state, x))  # a zero bias: the same numbers


@pytest.mark.parametrize("family", ["so150m_reg4_gap", "deit3"])
def test_any_size_keeps_the_table_at_the_checkpoints_grid(tmp_path, family):
    """from_pretrained(..., image_size=None) stored the table for the default native 224 (28 x 28 patches of 8 here),
    resampled from the file's grid and back to the input's in the graph: 3.2 % off timm's at a 256 model's own size.
    The table is now the file's, as it is, and the model gives timm's output at the checkpoint's size."""
    state = write_timm(tmp_path / "f", family)
    x = images()
    model = keras_vit.from_pretrained(str(tmp_path / "f" / "model.safetensors"), image_size=None, classifier_activation=None)
    assert model.vit_config.image_size is None and model.vit_config.native_image_size == (32, 32)
    # the file's table copied as it is (no arithmetic): bit for bit
    np.testing.assert_array_equal(np.asarray(model.get_layer("patch_encoder").position_embedding), state["pos_embed"])
    assert_close(np.asarray(model(x)), expected(family, state, x))


def test_parallel_blocks_with_a_separate_mlp_bias_and_from_a_bare_file_are_read_as_timm_builds_them(tmp_path):
    """ParallelScalingBlock with qkv_bias=False keeps the MLP's bias apart (mlp_bias); a state dict without config.json
    is read as parallel from its fused in_proj (the blocks' trace in the weights)."""
    x = images()
    state = write_timm(tmp_path / "mlp_bias", "pwee", qkv_bias=False)
    assert "blocks.0.mlp_bias" in state and "blocks.0.in_proj.bias" not in state
    model = keras_vit.from_pretrained(str(tmp_path / "mlp_bias"), classifier_activation=None)
    assert model.vit_config.parallel_blocks and not model.vit_config.qkv_bias
    assert_close(np.asarray(model(x)), expected("pwee", state, x, {**timm_args("pwee")[1], "qkv_bias": False}))
    state = write_timm(tmp_path / "bare", "pwee", config=False)
    model = keras_vit.from_pretrained(str(tmp_path / "bare" / "model.safetensors"), num_heads=4, classifier_activation=None)
    assert model.vit_config.parallel_blocks
    assert "'blocks.0.in_proj.weight' (timm's ParallelScalingBlock)" in str(model.load_report)
    assert_close(np.asarray(model(x)), expected("pwee", state, x))


def test_mobileclip_conv_stem_is_keras_vits_patchify_conv_stem(tmp_path):
    """vit_base_mci_224 (timm's ConvStem: 4 x 4 / 4 and 2 x 2 / 2 patchify convolutions with BatchNorm, eps 1e-5,
    and exact GELU, then a 2 x 2 / 2 convolution with a bias under a HybridEmbed without projection) is keras_vit's
    conv stem (stem_strides) whose last convolution is the patch projection; random running statistics."""
    args = dict(embed_dim=768, depth=1, num_heads=12, img_size=32, patch_size=1, no_embed_class=True, num_classes=8,
                conv_stem=((192, 4), (192, 2), (768, 2)))
    state = reference_timm.state_dict(args, seed=5, scale=0.05)
    folder = tmp_path / "mci"
    os.makedirs(folder)
    safetensors_numpy.save_file(state, str(folder / "model.safetensors"))
    config = {"architecture": "vit_base_mci_224", "num_classes": 8, "model_args": {"depth": 1, "img_size": 32},
              "pretrained_cfg": {"input_size": [3, 32, 32], "mean": [0.0] * 3, "std": [1.0] * 3, "num_classes": 8}}
    (folder / "config.json").write_text(json.dumps(config))
    model = keras_vit.from_pretrained(str(folder), classifier_activation=None)
    config = model.vit_config
    assert (config.stem, config.stem_channels, config.stem_strides, config.stem_norm_epsilon, config.patch_size) == (
        "conv", (192, 192), (4, 2), 1e-5, (2, 2))
    x = images()
    ref = np.stack([reference_timm.forward(image, state, args, mean=(0.0,) * 3, std=(1.0,) * 3) for image in x])
    assert_close(np.asarray(model(x)), ref)
    assert model.count_params() == params.count_config_params(config)
