"""Check keras_vit's NaFlex path against timm itself: timm's naflexvit.py registrations with weights, and the grid rule.

    PYTHONPATH=. .venv/bin/python tools/check_timm_naflex.py --peers-python .venv-peers/bin/python

For each architecture (:data:`ARCHITECTURES`: the NaFlex ViT-B, the SigLIP 2 towers and C-RADIO's six) the peers
environment (torch + timm 1.0.31) builds a random model with ``timm.create_model(ARCH, pretrained=False,
num_classes=0, depth=--depth)`` with weights under which the positions and the mask matter (LayerScale near 1, the
position table, class and register tokens of std 1, the 1-D parameters perturbed), writes it as timm writes a Hub
repository (``save_for_hf``: ``config.json`` with ``model_args={"depth": ...}`` +
``model.safetensors``) and runs it on one batch of three images of aspect ratios 1:1, 16:9 and 1:3, each at the size
timm's ``get_image_size_for_seq`` gives under the budget ``--budget``, patchified by timm's ``Patchify`` and padded by
its ``NaFlexCollator``. This environment loads the folder with ``keras_vit.from_pretrained(FOLDER, include_top=False,
max_patches=BUDGET)``, patchifies the same pixels with ``keras_vit.layers.naflex_grid`` (its patches, coordinates
and mask compared with timm's) and runs them. ``matched``: the largest difference of the pooled features is within
1e-4 of timm's largest absolute output, and the parameter counts are equal.

The grid rule is compared on ``--grid-samples`` random image sizes, patch sizes and budgets.

The classic registrations (:data:`CLASSIC`: timm's ``VisionTransformer`` and an ``Eva`` without RoPE) go through timm's
own conversion: the peers side builds the classic model, perturbs it the same way (its ``pos_embed``, ``cls_token``,
``reg_token``), writes it with ``save_for_hf``, then builds ``timm.create_model(ARCH, use_naflex=True, ...)`` and
loads the classic state dict through ``naflexvit.checkpoint_filter_fn`` (what ``pretrained=True`` does), and runs
that. This side loads the CLASSIC folder with ``keras_vit.from_pretrained(FOLDER, include_top=False,
input_mode="naflex", max_patches=BUDGET)``. Where the classic table holds the class token's position, keras_vit keeps
it as a row of its own (``prefix_positions=True``, added to the token as the model runs) where timm adds it to
``cls_token``; a pre-norm model (CLIP) has a zero patch-embedding bias and EVA zero key biases where timm's has none,
as keras_vit's image model does: ``hidden_size`` parameters more for each, counted as such.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ARCHITECTURES = ["naflexvit_base_patch16_gap", "naflexvit_base_patch16_par_gap", "naflexvit_base_patch16_parfac_gap",
                 "naflexvit_base_patch16_siglip", "naflexvit_so400m_patch16_siglip",
                 # C-RADIO: a 128 x 128 table resampled bilinearly without antialiasing (align_corners=True for v3-B / H)
                 "naflexvit_base_patch16_radio_v3", "naflexvit_large_patch16_radio_v3", "naflexvit_huge_patch16_radio_v3",
                 "naflexvit_giant_patch16_radio_v3", "naflexvit_so400m_patch16_radio_v4", "naflexvit_huge_patch16_radio_v4"]
# classic registrations read through timm's use_naflex=True: class token (with its position), registers without
# positions and gap + fc_norm, attention pooling, DINOv2 with registers (patches of 14, LayerScale), CLIP's pre-norm,
# So400m/14 at 384 (27 x 27 patches, 6 pixels past them), EVA-g (Eva without RoPE: q / v biases, avg + fc_norm)
CLASSIC = ["vit_small_patch16_224", "vit_base_patch16_reg4_gap_256", "vit_base_patch16_siglip_224",
           "vit_small_patch14_reg4_dinov2", "vit_base_patch16_clip_224", "vit_so400m_patch14_siglip_384",
           "eva_giant_patch14_224"]
SHAPES = {"1:1": (480, 480), "16:9": (360, 640), "1:3": (600, 200)}  # original image sizes, before the budget's resize
TOLERANCE = 1e-4


def _writer(jobs_path):
    """Peers side: each job's folder, timm's NaFlex batch and its pooled features; timm's grids."""
    import numpy as np
    import timm
    import torch
    from timm.data.naflex_dataset import NaFlexCollator
    from timm.data.naflex_transforms import Patchify, get_image_size_for_seq
    from timm.models import save_for_hf

    torch.manual_seed(0)
    with open(jobs_path) as f:
        jobs = json.load(f)
    from timm.models.naflexvit import checkpoint_filter_fn

    for job in jobs["models"]:
        model = timm.create_model(job["name"], pretrained=False, num_classes=0, **job["model_args"]).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(("ls1.gamma", "ls2.gamma", "gamma_1", "gamma_2")):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                elif name.startswith(("embeds.pos_embed", "embeds.reg_token", "embeds.cls_token", "pos_embed",
                                      "reg_token", "cls_token")):
                    p.copy_(torch.randn_like(p))  # positions (and the prefix tokens) that move the output
                elif name.endswith("attn.qkv.weight"):
                    p.mul_(3.0)
                elif p.ndim == 1:
                    p.add_(torch.randn_like(p) * 0.02)
        save_for_hf(model, job["folder"], model_args=job["model_args"] or None, safe_serialization=True)
        if job["classic"]:  # timm's own conversion of the classic weights: what pretrained=True loads
            classic = {k: v.clone() for k, v in model.state_dict().items()}
            model = timm.create_model(job["name"], pretrained=False, num_classes=0, use_naflex=True,
                                      **job["model_args"]).eval()
            model.load_state_dict(checkpoint_filter_fn(classic, model), strict=True)
        patch = int(model.embeds.patch_size[0])
        mean, std = np.array(model.pretrained_cfg["mean"], "float32"), np.array(model.pretrained_cfg["std"], "float32")
        rng = np.random.default_rng(0)
        pixels, samples = [], []
        for h, w in SHAPES.values():
            th, tw = get_image_size_for_seq((h, w), patch, job["budget"])[1]
            image = rng.uniform(0, 255, (th, tw, 3)).astype("float32")
            pixels.append(image)
            tensor = torch.from_numpy(((image / 255.0 - mean) / std).transpose(2, 0, 1).copy())
            samples.append((Patchify(patch)(tensor), 0))
        batch, _ = NaFlexCollator(job["budget"])(samples)
        with torch.no_grad():
            y = model(batch).numpy()
        arrays = {f"pixels_{i}": p for i, p in enumerate(pixels)}
        arrays.update(output=y, patch=patch, coord=batch["patch_coord"].numpy(), valid=batch["patch_valid"].numpy(), mean=mean, std=std,
                      patches=batch["patches"].numpy())
        np.savez(os.path.join(job["folder"], "reference.npz"), **arrays)
        params = int(sum(p.numel() for p in model.parameters()))
        names, width = dict(model.named_parameters()), model.embed_dim
        stand_ins = {  # biases timm's model lacks where keras_vit's layers have a zero one (the image model's too)
            "a zero patch-embedding bias (a pre-norm model's has none)": 0 if "embeds.proj.bias" in names else width,
            "zero key biases (EVA's q_bias / v_bias only)": width * sum(
                n.endswith("attn.q_bias") and n[:-len("q_bias")] + "k_bias" not in names for n in names)}
        print(json.dumps({"name": job["name"], "params": params, "type": type(model).__name__, "stand_ins": stand_ins}),
              flush=True)
    grids = [list(get_image_size_for_seq((h, w), p, n)[1]) for h, w, p, n in jobs["grid_cases"]]
    print(json.dumps({"grids": grids}), flush=True)


def _compare(job):
    import numpy as np

    import keras_vit
    from keras_vit.layers import naflex_grid

    ref = np.load(os.path.join(job["folder"], "reference.npz"))
    pixels, patch = [ref[f"pixels_{i}"] for i in range(len(SHAPES))], int(ref["patch"])
    for (h, w), image in zip(SHAPES.values(), pixels):
        if naflex_grid.target_size((h, w), patch, job["budget"]) != image.shape[:2]:
            return None, f"grid of {h}x{w}: keras_vit {naflex_grid.target_size((h, w), patch, job['budget'])}, timm {image.shape[:2]}"
    inputs = naflex_grid.batch(pixels, patch, job["budget"])
    if not (np.array_equal(inputs["patch_coord"], ref["coord"]) and np.array_equal(inputs["patch_valid"], ref["valid"])):
        return None, "coordinates or mask differ from timm's collator"
    # timm's normalised patches (its pretrained_cfg's mean and std, C-RADIO's OpenAI CLIP ones), for the layout only
    patches = (inputs["patches"].reshape(inputs["patches"].shape[:2] + (-1, 3)) / 255.0 - ref["mean"]) / ref["std"]
    patches = patches.reshape(inputs["patches"].shape)
    if np.max(np.abs(patches[inputs["patch_valid"]] - ref["patches"][ref["valid"]])) > 1e-5:
        return None, "patch layout differs from timm's Patchify"
    naflex = {"input_mode": "naflex"} if job["classic"] else {}  # a classic folder read as timm's use_naflex=True model
    model = keras_vit.from_pretrained(job["folder"], include_top=False, max_patches=job["budget"], **naflex)
    y = np.asarray(model.predict(inputs, verbose=0), np.float64)
    expected = ref["output"].astype(np.float64)
    relative = float(np.max(np.abs(y - expected)) / max(np.max(np.abs(expected)), 1e-12))
    return (model, relative), None


def main(argv=None):
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=".venv-peers/bin/python")
    parser.add_argument("--only", help="a substring of the architectures to check")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--budget", type=int, default=256, help="max_patches of the batch (timm's max_seq_len)")
    parser.add_argument("--grid-samples", type=int, default=2000)
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="timm-naflex-")
    rng = np.random.default_rng(0)
    grid_cases = [[int(rng.integers(1, 4000)), int(rng.integers(1, 4000)), int(rng.choice([8, 14, 16, 32])),
                   int(rng.integers(1, 2048))] for _ in range(args.grid_samples)]
    jobs = {"models": [{"name": name, "folder": os.path.join(work, name), "budget": args.budget, "classic": name in CLASSIC,
                        "model_args": {"depth": args.depth}} for name in ARCHITECTURES + CLASSIC if not args.only or args.only in name],
            "grid_cases": grid_cases}
    jobs_path = os.path.join(work, "jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    run = subprocess.run([args.peers_python, __file__, "--write", jobs_path], capture_output=True, text=True)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    params = {r["name"]: r["params"] for r in lines if "name" in r}
    types = {r["name"]: r["type"] for r in lines if "name" in r}
    stand_ins = {r["name"]: r["stand_ins"] for r in lines if "name" in r}
    failed = 0
    from keras_vit.layers import naflex_grid

    timm_grids = next((r["grids"] for r in lines if "grids" in r), None)
    ours = [list(naflex_grid.target_size((h, w), p, n)) for h, w, p, n in grid_cases]
    same = timm_grids is not None and sum(a == b for a, b in zip(ours, timm_grids))
    failed += same != len(grid_cases)
    print(f"{'matched' if same == len(grid_cases) else 'WRONG':>8}  grid rule: {same} of {len(grid_cases)} random image "
          "sizes (1..3999 px), patches 8/14/16/32, budgets 1..2047 give timm's get_image_size_for_seq size", flush=True)
    for job in jobs["models"]:
        if job["name"] not in params:
            print(f"not written  {job['name']}: {run.stderr[-400:]}")
            failed += 1
            continue
        result, why = _compare(job)
        if result is None:
            print(f"   WRONG  {job['name']}: {why}")
            failed += 1
            continue
        model, relative = result
        config = model.vit_config
        # keras_vit's own rows: the class token's position (timm adds it to cls_token), the zero patch-embedding bias
        # standing in for the one timm's pre-norm models lack (as in the image model)
        kept = {"the class token's position kept as a row": config.hidden_size * (config.class_token and config.prefix_positions),
                **stand_ins[job["name"]]}
        kept = {why: n for why, n in kept.items() if n}
        ok = relative <= TOLERANCE and model.count_params() == params[job["name"]] + sum(kept.values())
        failed += not ok
        through = f"classic weights through timm's use_naflex=True ({types[job['name']]}), " if job["classic"] else ""
        extra = "".join(f" + {n:,}: {why}" for why, n in kept.items())
        print(f"{'matched' if ok else 'WRONG':>8}  {job['name']} ({through}depth {args.depth}, budget {args.budget}, "
              f"1:1 + 16:9 + 1:3 in one batch): relative error {relative:.2e}, {model.count_params():,} parameters "
              f"(timm {params[job['name']]:,}{extra}); position_resampling={config.position_resampling!r}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        _writer(sys.argv[2])
    else:
        sys.exit(main())
