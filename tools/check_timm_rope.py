"""Check keras_vit's RoPE-ViT against timm itself: every ``vit_*_patch16_rope*_224``, ``vit_*_patch16_dinov3*``, ``vit_*_patch16_lingbot``, ``eva02_*`` (but the post-norm enormous), ``vit_*_patch16_rope_reg*_gap_256``, ``eva_giant_patch14_*`` and ``vit_pe_*`` registration of timm's eva.py.

    PYTHONPATH=. .venv/bin/python tools/check_timm_rope.py --peers-python .venv-peers/bin/python

For each architecture the peers environment (torch + timm) builds a random model with ``timm.create_model(ARCH,
pretrained=False)`` (its 1-D parameters perturbed, so LayerScale and the biases count), writes it as timm writes a Hub
repository (``timm.models.save_for_hf(..., safe_serialization=True)``: ``config.json`` + ``model.safetensors``) and
runs it on random images at each ``--sizes`` entry: at the registration's size the model itself, at another size timm's own reload of the
file at that ``img_size`` (``pretrained_cfg_overlay=dict(file=...)``: ``checkpoint_filter_fn`` resamples the ``_ape``
table, RoPE takes the new grid). This environment loads the folder with ``keras_vit.from_pretrained(FOLDER,
image_size=SIZE)`` and runs it on the same pixels. ``matched``: the largest difference is within 1e-4 of timm's
largest absolute output (the pooled features, ``num_classes=0``: the zero-scaled head would hide the blocks).

ViT-L (EVA-02 L's too), DINOv3's ViT-H+, LingBot's ViT-g and EVA-01's giant are written with ``model_args={"depth": --large-depth}`` (default 4; timm's config.json
carries it and both frameworks build that depth), so the check fits a 2-core machine; ViT-S and ViT-B run at full
depth; DINOv3's 7B (6.7 billion parameters, 27 GB in float32) is left out. The parameter counts compare with timm's
parameters plus its ``k_bias`` buffers or its bias-free ``k_proj``'s outputs (EvaAttention's zero key bias of the ``_qkvb``
and EVA models, a weight in keras_vit) and, for a pre-norm model (Perception Encoder), the patch embedding's zero bias
keras_vit keeps (timm has none). Perception Encoder's L and gigantic models are reduced like ViT-L (``--large-depth``);
PE's own sizes are its registrations' input sizes: ``--only vit_pe_ --sizes own,256x320`` runs each at its own size and
at 256x320 (there timm resamples the absolute table and keeps the RoPE reference grid).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ARCHITECTURES = [f"vit_{size}_patch16_rope{kind}_224" for size in ("small", "base", "large")
                 for kind in ("", "_ape", "_mixed", "_mixed_ape")]
ARCHITECTURES += [f"vit_{size}_patch16_dinov3{bias}" for size in ("small", "small_plus", "base", "large", "huge_plus")
                  for bias in ("", "_qkvb")] + ["vit_tiny_patch16_dinov3_qkvb"]
ARCHITECTURES += [f"vit_{size}_patch16_lingbot" for size in ("small", "base", "large", "giant")]  # DINOv3's blocks
# EVA-02 (fused qkv with q / v biases, packed SwiGLU, axial RoPE on timm's ref_feat_shape grid, a table with the class token)
ARCHITECTURES += [f"eva02_{size}_patch14_{res}" for size in ("tiny", "small") for res in (224, 336)]
# the same attention and RoPE grid with registers and no class token
ARCHITECTURES += [f"vit_{size}_patch16_rope_reg{n}_gap_256" for size, n in (("medium", 1), ("mediumd", 1), ("betwixt", 4), ("base", 1))]
# EVA-02 B / L (separate q / k / v, k without bias; SwiGLU with a LayerNorm before fc2) and the CLIP towers (a LayerNorm
# before attn.proj too, the class token); EVA-01 (EvaAttention without RoPE, GELU MLP, an absolute table only)
ARCHITECTURES += [f"eva02_{size}_patch14_{res}" for size in ("base", "large") for res in (224, 448)]
ARCHITECTURES += ["eva02_base_patch16_clip_224", "eva02_large_patch14_clip_224", "eva02_large_patch14_clip_336"]
ARCHITECTURES += [f"eva_giant_patch14_{res}" for res in ("224", "336", "560", "clip_224")]
# Perception Encoder: EVA-02's RoPE grid with an offset and 'xy', a pre-norm without patch bias, attention pooling of 8
# heads (core) or the patch tokens' mean with no final norm (lang, spatial); the gigantic ones without a class token
ARCHITECTURES += ["vit_pe_core_tiny_patch16_384", "vit_pe_core_small_patch16_384", "vit_pe_core_base_patch16_224",
                  "vit_pe_core_large_patch14_336", "vit_pe_core_gigantic_patch14_448", "vit_pe_lang_large_patch14_448",
                  "vit_pe_lang_gigantic_patch14_448"] + [f"vit_pe_spatial_{size}_patch{p}_{res}" for size, p, res in (
                      ("tiny", 16, 512), ("small", 16, 512), ("base", 16, 512), ("large", 14, 448), ("gigantic", 14, 448))]
REDUCED = ("large", "huge", "giant", "gigantic")  # written with model_args={"depth": --large-depth}
TOLERANCE = 1e-4


def _writer(jobs_path):
    """Peers side: write each job's folder and timm's features at every size."""
    import numpy as np
    import timm
    import torch
    from timm.models import save_for_hf

    torch.manual_seed(0)
    with open(jobs_path) as f:
        jobs = json.load(f)
    for job in jobs:
        model = timm.create_model(job["name"], pretrained=False, num_classes=0, **job["model_args"]).eval()
        with torch.no_grad():  # weights under which positions matter: timm's init (LayerScale 1e-5, q/k std 0.02)
            for name, p in model.named_parameters():  # leaves attention near uniform, DINOv3's RoPE within 5e-5
                if name.endswith(("gamma_1", "gamma_2")):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))  # LayerScale: the blocks count
                elif name.endswith(("attn.qkv.weight", "attn.q_proj.weight", "attn.k_proj.weight")):
                    p.mul_(5.0)  # attention logits of std ~3: the rotation changes which tokens are attended
                elif p.ndim == 1:
                    p.add_(torch.randn_like(p) * 0.02)
        save_for_hf(model, job["folder"], model_args=job["model_args"] or None, safe_serialization=True)
        mean, std = np.array(model.pretrained_cfg["mean"], "float32"), np.array(model.pretrained_cfg["std"], "float32")
        params = {}
        for size in job["sizes"]:
            if tuple(size) == tuple(model.patch_embed.img_size):  # the registration's own size
                sized = model
            else:
                file = os.path.join(job["folder"], "model.safetensors")
                sized = timm.create_model(job["name"], pretrained=True, pretrained_cfg_overlay=dict(file=file),
                                          num_classes=0, img_size=tuple(size), **job["model_args"]).eval()
            pixels = np.random.default_rng(0).uniform(0, 255, (2, size[0], size[1], 3)).astype("float32")
            x = torch.from_numpy(((pixels / 255.0 - mean) / std).transpose(0, 3, 1, 2).copy())
            with torch.no_grad():  # --float64-reference: timm's model in float64 (float32 rounding told from a defect)
                y = (sized.double()(x.double()) if job.get("float64") else sized(x)).numpy()
            np.savez(os.path.join(job["folder"], f"reference_{size[0]}x{size[1]}.npz"), pixels=pixels, output=y)
            params[f"{size[0]}x{size[1]}"] = int(sum(p.numel() for p in sized.parameters())
                                                 + sum(b.numel() for n, b in sized.named_buffers() if n.endswith("k_bias"))
                                                 + sum(m.k_proj.out_features for m in sized.modules()  # EVA-02 B / L's
                                                       if getattr(m, "k_proj", None) is not None and m.k_proj.bias is None)
                                                 # a pre-norm model's patch embedding has no bias: keras_vit's zeros
                                                 + (sized.embed_dim if sized.patch_embed.proj.bias is None else 0))
        print(json.dumps({"name": job["name"], "params": params}), flush=True)


def _compare(folder, size):
    import numpy as np

    import keras_vit

    ref = np.load(os.path.join(folder, f"reference_{size[0]}x{size[1]}.npz"))
    model = keras_vit.from_pretrained(folder, include_top=False, image_size=tuple(size))
    y = np.asarray(model(ref["pixels"]), np.float64)
    expected = ref["output"].astype(np.float64)
    relative = float(np.max(np.abs(y - expected)) / max(np.max(np.abs(expected)), 1e-12))
    return model, relative


def _sizes(written, name):
    """``[[H, W], ...]`` of ``--sizes`` for ``name`` ('own': its registration's input size, from keras_vit's table)."""
    from keras_vit.weights import timm_config

    out = []
    for size in written.split(","):
        if size == "own":
            own = timm_config.config_fields(name)["image_size"]
            out.append([own, own] if isinstance(own, int) else list(own))
        else:
            out.append([int(n) for n in size.split("x")])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=".venv-peers/bin/python")
    parser.add_argument("--only", help="a substring of the architectures to check")
    parser.add_argument("--sizes", default="224x224,256x320",
                        help="image sizes HxW, comma-separated; 'own': each registration's input size")
    parser.add_argument("--large-depth", type=int, default=4)
    parser.add_argument("--float64-reference", action="store_true", help="timm's output computed in float64")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="timm-rope-")
    jobs = [{"name": name, "folder": os.path.join(work, name), "sizes": _sizes(args.sizes, name),
             "float64": args.float64_reference,
             "model_args": {"depth": args.large_depth} if any(f"_{s}_" in name for s in REDUCED) else {}}
            for name in ARCHITECTURES if not args.only or args.only in name]
    jobs_path = os.path.join(work, "jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    run = subprocess.run([args.peers_python, __file__, "--write", jobs_path], capture_output=True, text=True)
    params = {r["name"]: r["params"] for r in map(json.loads, (l for l in run.stdout.splitlines() if l.startswith("{")))}
    failed = 0
    for job in jobs:
        if job["name"] not in params:
            print(f"not written  {job['name']}: {run.stderr[-300:]}")
            failed += 1
            continue
        for size in job["sizes"]:
            model, relative = _compare(job["folder"], size)
            timm_params = params[job["name"]][f"{size[0]}x{size[1]}"]
            verdict = "matched" if relative <= TOLERANCE and model.count_params() == timm_params else "WRONG"
            failed += verdict != "matched"
            depth = f"depth {job['model_args']['depth']}" if job["model_args"] else "full depth"
            depth += ", timm in float64" if args.float64_reference else ""
            print(f"{verdict:>8}  {job['name']} ({depth}) at {size[0]}x{size[1]}: relative error {relative:.2e}, "
                  f"{model.count_params():,} parameters (timm {timm_params:,})", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        _writer(sys.argv[2])
    else:
        sys.exit(main())
