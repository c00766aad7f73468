"""Check keras_vit's NaFlex path against transformers' SigLIP 2 NaFlex itself, at several patch budgets, and its grid rule.

    PYTHONPATH=. .venv/bin/python tools/check_transformers_naflex.py --peers-python .venv-peers/bin/python

The peers environment (torch + transformers 5.24) builds each class (``Siglip2VisionModel``, ``Siglip2Model``,
``Siglip2ForImageClassification``) at a tiny size with SigLIP 2 NaFlex's own position table (``num_patches=256``, a
16 x 16 grid, patches of 16) and random weights under which the positions and the mask matter (every parameter
redrawn: norms' scales 1 + N(0, 0.1), biases N(0, 0.1), matrices N(0, 1 / fan_in), the position table N(0, 1)),
writes it with ``save_pretrained`` and runs one batch of three random images of aspect ratios 1:1, 16:9 and 1:3
(480 x 480, 360 x 640, 600 x 200) through ``Siglip2ImageProcessor(max_num_patches=BUDGET)`` (its grid rule, its
bilinear antialiased resize, its patches and mask) and the model, for each budget of ``--budgets``. This environment
loads each folder with ``keras_vit.from_pretrained(FOLDER, max_patches=BUDGET)``, checks that keras_vit's
``"siglip2"`` grid rule gives the processor's ``spatial_shapes`` and its patchification the processor's mask, and runs
the processor's pixels (the same pixels: torchvision's resize of uint8 images rounds otherwise). ``matched``: the
largest difference is within 1e-4 of transformers' largest absolute output, and the parameter counts of the vision
tower (``Siglip2ForImageClassification``: its classifier, not the tower's attention-pooling head it does not read) are
equal.

The grid rule is compared with transformers' ``get_image_size_for_max_num_patches`` and timm's
``get_image_size_for_seq`` on ``--grid-samples`` random image sizes, patch sizes and budgets, and on long panoramas.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

CLASSES = ["Siglip2VisionModel", "Siglip2Model", "Siglip2ForImageClassification"]
SHAPES = {"1:1": (480, 480), "16:9": (360, 640), "1:3": (600, 200)}  # original image sizes, before the budget's resize
VISION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, patch_size=16,
              num_patches=256)
PATCH = 16
TOLERANCE = 1e-4
PANORAMAS = [[1, 20_000_000, 16, 1], [1, 20_000_000, 16, 2], [3, 4_000_000, 16, 8], [100, 10_000, 16, 64],
             [1, 1, 16, 2047]]  # image height, width, patch, budget


def _writer(jobs_path):
    """Peers side: each class's folder, the processor's batch and the model's output per budget; both rules' sizes."""
    import math

    import numpy as np
    import torch
    import transformers as T
    from timm.data.naflex_transforms import get_image_size_for_seq
    from transformers.models.siglip2.image_processing_siglip2 import get_image_size_for_max_num_patches

    with open(jobs_path) as f:
        jobs = json.load(f)
    rng = np.random.default_rng(0)
    originals = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in SHAPES.values()]
    for seed, job in enumerate(jobs["models"]):
        name = job["name"]
        vision = T.Siglip2VisionConfig(**VISION)
        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=64)
        if name == "Siglip2VisionModel":
            config = vision
        else:
            config = T.Siglip2Config(vision_config=vision.to_dict(), text_config=text,
                                     **({"id2label": {i: f"c{i}" for i in range(3)}} if "Classification" in name else {}))
        torch.manual_seed(seed)
        model = getattr(T, name)(config).eval()
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for key, p in model.named_parameters():
                noise = torch.randn(p.shape, generator=generator)
                if key.endswith("position_embedding.weight") and "vision" in key:
                    p.copy_(noise)
                elif p.ndim == 1 and "norm" in key and key.endswith("weight"):
                    p.copy_(1.0 + 0.1 * noise)
                elif p.ndim == 1 and not key.endswith(("logit_scale", "logit_bias")):
                    p.copy_(0.1 * noise)
                elif p.ndim >= 2:
                    p.copy_(noise / math.sqrt(max(p[0].numel(), 1)))
        model.save_pretrained(job["folder"])
        T.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=256).save_pretrained(job["folder"])
        tower = model if name == "Siglip2VisionModel" else model.vision_model
        params = sum(p.numel() for p in tower.parameters())
        if "Classification" in name:  # its classifier reads the mean of the tokens: the tower's head is not read
            params += sum(p.numel() for p in model.classifier.parameters()) - sum(p.numel() for p in tower.head.parameters())
        for budget in jobs["budgets"]:
            processor = T.Siglip2ImageProcessor(patch_size=PATCH, max_num_patches=budget)
            batch = processor(images=[torch.from_numpy(o.transpose(2, 0, 1).copy()) for o in originals],
                              return_tensors="pt")
            with torch.no_grad():
                if name == "Siglip2VisionModel":
                    y = model(**batch).pooler_output
                elif name == "Siglip2Model":
                    y = model.get_image_features(**batch)
                    y = y if torch.is_tensor(y) else y.pooler_output
                else:
                    y = model(**batch).logits
            np.savez(os.path.join(job["folder"], f"reference_{budget}.npz"), output=y.numpy(),
                     pixel_values=batch["pixel_values"].numpy(), mask=batch["pixel_attention_mask"].numpy(),
                     spatial_shapes=batch["spatial_shapes"].numpy())
        print(json.dumps({"name": name, "params": int(params)}), flush=True)
    cases = jobs["grid_cases"] + PANORAMAS
    siglip2 = [list(get_image_size_for_max_num_patches(h, w, p, n)) for h, w, p, n in cases]
    timm = []
    for h, w, p, n in cases:
        try:
            timm.append(list(get_image_size_for_seq((h, w), p, n)[1]))
        except ValueError as error:
            timm.append(f"refused: {str(error)[:60]}")
    print(json.dumps({"siglip2": siglip2, "timm": timm, "transformers": T.__version__}), flush=True)


def _compare(job, budget):
    """``((model, relative error), None)`` or ``(None, why)`` of one class at one budget."""
    import numpy as np

    import keras_vit
    from keras_vit.layers import naflex_grid

    ref = np.load(os.path.join(job["folder"], f"reference_{budget}.npz"))
    for (h, w), shape in zip(SHAPES.values(), ref["spatial_shapes"]):
        ours = naflex_grid.grid_for((h, w), PATCH, budget, rule="siglip2")
        if ours != tuple(int(n) for n in shape):
            return None, f"grid of {h}x{w}: keras_vit {ours}, the processor {tuple(shape)}"
    grids = [tuple(int(n) for n in s) for s in ref["spatial_shapes"]]
    stand_ins = [np.zeros((h * PATCH, w * PATCH, 3), np.float32) for h, w in grids]
    inputs = naflex_grid.batch(stand_ins, PATCH, budget)
    if not np.array_equal(inputs["patch_valid"], ref["mask"].astype(bool)):
        return None, "the mask differs from the processor's pixel_attention_mask"
    inputs["patches"] = (ref["pixel_values"] * 0.5 + 0.5) * 255.0  # the processor's pixels in [0, 255]
    model = keras_vit.from_pretrained(job["folder"], max_patches=budget, classifier_activation=None)
    c = model.vit_config
    if (c.input_mode, c.grid_rule, c.position_resampling) != ("naflex", "siglip2", "bilinear_torch_antialias"):
        return None, f"read as {(c.input_mode, c.grid_rule, c.position_resampling)}"
    y = np.asarray(model.predict(inputs, verbose=0), np.float64)
    expected = ref["output"].astype(np.float64)
    relative = float(np.max(np.abs(y - expected)) / max(np.max(np.abs(expected)), 1e-12))
    return (model, relative, grids), None


def main(argv=None):
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=".venv-peers/bin/python")
    parser.add_argument("--budgets", default="64,256,576", help="max_num_patches of each batch, comma-separated")
    parser.add_argument("--grid-samples", type=int, default=2000)
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    work = tempfile.mkdtemp(prefix="transformers-naflex-")
    rng = np.random.default_rng(0)
    grid_cases = [[int(rng.integers(1, 4000)), int(rng.integers(1, 4000)), int(rng.choice([8, 14, 16, 32])),
                   int(rng.integers(1, 2048))] for _ in range(args.grid_samples)]
    jobs = {"models": [{"name": name, "folder": os.path.join(work, name)} for name in CLASSES], "budgets": budgets,
            "grid_cases": grid_cases}
    jobs_path = os.path.join(work, "jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f)
    run = subprocess.run([args.peers_python, __file__, "--write", jobs_path], capture_output=True, text=True)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    params = {r["name"]: r["params"] for r in lines if "name" in r}
    rules = next((r for r in lines if "siglip2" in r), None)
    if rules is None:
        print(f"the peers run failed: {run.stderr[-2000:]}")
        return 1
    from keras_vit.layers import naflex_grid

    def ours(h, w, p, n, rule):
        try:
            return list(naflex_grid.target_size((h, w), p, n, rule=rule))
        except ValueError as error:
            return f"refused: {str(error)[:60]}"

    failed = 0
    n = len(grid_cases)
    same = sum(ours(*case, "siglip2") == want for case, want in zip(grid_cases, rules["siglip2"]))
    failed += same != n
    print(f"transformers {rules['transformers']}; keras_vit {naflex_grid.__file__}")
    print(f"{'matched' if same == n else 'WRONG':>8}  grid rule 'siglip2': {same} of {n} random image sizes (1..3999 px), "
          "patches 8/14/16/32, budgets 1..2047 give transformers' get_image_size_for_max_num_patches size", flush=True)
    equal = sum(a == b for a, b in zip(rules["siglip2"][:n], rules["timm"][:n]))
    print(f"{'':>8}  transformers' and timm's rules give the same size for {equal} of those {n}")
    for case, want, timm in zip(PANORAMAS, rules["siglip2"][n:], rules["timm"][n:]):
        got = ours(*case, "siglip2")
        fits = (want[0] // case[2]) * (want[1] // case[2]) <= case[3]
        ok = got == want if fits else str(got).startswith("refused")  # past the budget: keras_vit refuses it
        failed += not ok
        print(f"{'matched' if ok else 'WRONG':>8}  {case[0]} x {case[1]}, patch {case[2]}, budget {case[3]}: transformers "
              f"{want}{'' if fits else ' (past the budget)'}, keras_vit {got}; timm {timm}", flush=True)
    for job in jobs["models"]:
        if job["name"] not in params:
            print(f"not written  {job['name']}: {run.stderr[-400:]}")
            failed += 1
            continue
        for budget in budgets:
            result, why = _compare(job, budget)
            if result is None:
                print(f"   WRONG  {job['name']} (budget {budget}): {why}")
                failed += 1
                continue
            model, relative, grids = result
            ok = relative <= TOLERANCE and model.count_params() == params[job["name"]]
            failed += not ok
            print(f"{'matched' if ok else 'WRONG':>8}  {job['name']} (budget {budget}, 1:1 + 16:9 + 1:3 in one batch, "
                  f"grids {' '.join(f'{h}x{w}' for h, w in grids)}): relative error {relative:.2e}, "
                  f"{model.count_params():,} parameters (transformers {params[job['name']]:,})", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        _writer(sys.argv[2])
    else:
        sys.exit(main())
