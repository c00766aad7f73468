"""Sweep every timm ViT-family architecture with pretrained tags through keras_vit.from_pretrained("hf://timm/...").

    make install peers
    .venv/bin/python tools/sweep_timm.py --peers-python .venv-peers/bin/python [--only REGEX] [--output DIR]

For each architecture of timm's ViT-family modules with pretrained tags (its default tag), the peers environment
(torch + timm) builds a random model with ``timm.create_model(ARCH.TAG, pretrained=False)``, writes it the way
timm writes a Hub repository (``timm.models.save_for_hf(..., safe_serialization=True)``: ``config.json`` +
``model.safetensors``) into a Hugging Face cache, and runs it on two random images. This environment (keras_vit)
then loads ``hf://timm/ARCH.TAG`` from that cache offline (``HF_HUB_OFFLINE=1``) and runs it on the same pixels.

Each architecture ends as one of:

* ``matched``: keras_vit's output is timm's within 1e-4 of timm's largest absolute value;
* ``refused``: a ``CheckpointError`` or ``ValueError`` whose message names what keras_vit lacks;
* ``WRONG``: it loaded and gives another output (a defect: the worst kind);
* ``EXCEPTION``: any other exception (a defect: a crash instead of a refusal);
* ``not written``: timm itself could not write the file here (said with timm's error).

Models wider than ``--full-max-width`` (768: ViT-B) are written with ``model_args={"depth": 2}`` (timm's
config.json carries it, as ``save_for_hf(model_args=...)`` writes it, and both frameworks build that depth), and
every architecture keras_vit's table refuses with ``depth=1`` and no timm forward (the refusal comes before any
weight is read), so the sweep fits a 2-core machine; the table says which.
Results go to ``OUTPUT/timm_sweep.jsonl`` (one line per architecture, resumable) and ``OUTPUT/timm_sweep.md``.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MODULES = ("vision_transformer", "vision_transformer_hybrid", "deit", "eva", "naflexvit")
COMMIT = "0" * 40
TOLERANCE = 1e-4  # relative to timm's largest output: float32 ViTs of up to 24 layers agree to ~1e-6


def _writer(jobs_path):
    """Peers side: write each job's repository into the cache and timm's output beside it."""
    import numpy as np
    import timm
    import torch
    from timm.data import resolve_data_config
    from timm.models import save_for_hf

    torch.manual_seed(0)
    with open(jobs_path) as f:
        jobs = json.load(f)
    for job in jobs:
        out = {"name": job["name"]}
        try:
            started = time.time()
            model = timm.create_model(job["name"], pretrained=False, **job["model_args"]).eval()
            with torch.no_grad():  # random weights with real scales: LayerScale / zero-init heads are not left at 0
                for name, p in model.named_parameters():
                    if p.ndim == 1:  # biases, norms, LayerScale gammas
                        p.add_(torch.randn_like(p) * 0.02)
                    elif p.abs().max() == 0:  # zero-initialised heads
                        p.normal_(0, 0.02)
                for name, b in model.named_buffers():  # BatchNorm statistics (MobileCLIP's ConvStem): not 0 and 1
                    if name.endswith("running_mean"):
                        b.normal_(0, 0.1)
                    elif name.endswith("running_var"):
                        b.uniform_(0.5, 1.5)
            save_for_hf(model, job["folder"], model_args=job["model_args"] or None, safe_serialization=True)
            if not job["reference"]:  # refused by keras_vit's table: the files are all the sweep needs
                print(json.dumps(dict(out, written=True, seconds=round(time.time() - started, 1))), flush=True)
                continue
            cfg = resolve_data_config({}, model=model)
            size = cfg["input_size"][1:]
            pixels = np.random.default_rng(0).uniform(0, 255, (2, size[0], size[1], 3)).astype("float32")
            mean, std = np.array(cfg["mean"], "float32"), np.array(cfg["std"], "float32")
            x = torch.from_numpy(((pixels / 255.0 - mean) / std).transpose(0, 3, 1, 2).copy())
            with torch.no_grad():
                y = model(x).numpy()
            np.savez(job["reference"], pixels=pixels, output=y)
            out.update(written=True, seconds=round(time.time() - started, 1),
                       params=int(sum(p.numel() for p in model.parameters())))
        except Exception as error:  # noqa: BLE001  (timm failing to write is reported, not fatal)
            out.update(written=False, error=f"{type(error).__name__}: {error}"[:300])
        print(json.dumps(out), flush=True)


def _architectures(only):
    from keras_vit.weights import timm_models

    rows = timm_models.table()["architectures"]
    names = [n for n, row in rows.items() if row["tags"] and row["module"] in MODULES]
    if only:
        names = [n for n in names if re.search(only, n)]
    return [(n, rows[n]["module"], rows[n]["default_tag"]) for n in sorted(names, key=lambda n: (MODULES.index(rows[n]["module"]), n))]


def _wider_than(name, full_max_width):
    from keras_vit.weights import timm_models

    row = timm_models.table()["architectures"][name]
    args = row["args"].get("cfg", row["args"])  # NaFlexVit keeps its arguments in a cfg dataclass
    return args.get("embed_dim", 768) > full_max_width


def _verdict(error):
    # keras_vit refuses with a ValueError (CheckpointError is one) that names what it lacks; anything else is a crash
    return ("refused" if isinstance(error, ValueError) else "EXCEPTION"), f"{type(error).__name__}: {error}"[:400]


def _load_and_compare(name, tag, reference):
    import numpy as np

    import keras_vit

    try:
        model = keras_vit.from_pretrained(f"hf://timm/{name}.{tag}", classifier_activation=None)
    except Exception as error:  # noqa: BLE001  (the verdict says which kind)
        return _verdict(error)
    if not reference:
        return "WRONG", "loaded, though keras_vit's table of timm registrations says it lacks a switch"
    ref = np.load(reference)
    pixels = ref["pixels"]
    if model.vit_config.input_mode == "naflex":  # timm's NaFlexVit on an image tensor: every patch of it, all valid
        from keras_vit.layers import naflex_grid

        (ph, pw), (h, w) = model.vit_config.patch_size, pixels.shape[1:3]
        pixels = naflex_grid.batch(list(pixels), (ph, pw), (h // ph) * (w // pw))
    try:
        y = np.asarray(model(pixels), np.float64)
    except Exception as error:  # noqa: BLE001
        return "EXCEPTION", f"forward: {type(error).__name__}: {error}"[:400]
    expected = ref["output"].astype(np.float64)
    if y.shape != expected.shape:
        return "WRONG", f"output shape {y.shape} != timm's {expected.shape}"
    relative = float(np.max(np.abs(y - expected)) / max(np.max(np.abs(expected)), 1e-12))
    return ("matched" if relative <= TOLERANCE else "WRONG"), f"relative error {relative:.2e}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=".venv-peers/bin/python")
    parser.add_argument("--output", default="benchmarks/results")
    parser.add_argument("--only", help="a regular expression: only the architectures it finds")
    parser.add_argument("--full-max-width", type=int, default=768)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--table-only", action="store_true", help="rewrite the Markdown table from the results file")
    args = parser.parse_args(argv)
    if args.table_only:
        return write_table(os.path.join(args.output, "timm_sweep.jsonl"), os.path.join(args.output, "timm_sweep.md"))
    work = tempfile.mkdtemp(prefix="timm-sweep-")
    cache = os.path.join(work, "hub")
    os.environ.update(HF_HUB_CACHE=cache, HF_HUB_OFFLINE="1")
    os.makedirs(args.output, exist_ok=True)
    results_path = os.path.join(args.output, "timm_sweep.jsonl")
    done = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            done = {r["name"]: r for r in map(json.loads, f)}
    from keras_vit.weights import timm_models

    todo = [a for a in _architectures(args.only) if a[0] not in done]
    print(f"{len(todo)} architectures to sweep ({len(done)} already in {results_path})", file=sys.stderr)
    for start in range(0, len(todo), args.chunk):
        chunk = todo[start:start + args.chunk]
        jobs = []
        for name, module, tag in chunk:
            repo = os.path.join(cache, f"models--timm--{name}.{tag}")
            os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write(COMMIT)
            refused = bool(timm_models.lacking(name))
            reduced = refused or _wider_than(name, args.full_max_width)
            jobs.append({"name": f"{name}.{tag}", "folder": os.path.join(repo, "snapshots", COMMIT),
                         "reference": None if refused else os.path.join(work, f"{name}.npz"),
                         "model_args": {"depth": 1 if refused else 2} if reduced else {}})
        jobs_path = os.path.join(work, "jobs.json")
        with open(jobs_path, "w") as f:
            json.dump(jobs, f)
        run = subprocess.run([args.peers_python, __file__, "--write", jobs_path], capture_output=True, text=True)
        written = {}
        for line in run.stdout.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                written[record["name"]] = record
        for (name, module, tag), job in zip(chunk, jobs):
            record = written.get(job["name"], {"written": False, "error": run.stderr[-300:]})
            result = {"name": name, "module": module, "tag": tag, "depth": job["model_args"].get("depth")}
            if not record.get("written"):
                result.update(verdict="not written", detail=record.get("error"))
            else:
                result["verdict"], result["detail"] = _load_and_compare(name, tag, job["reference"])
                result["params"] = record.get("params")
            print(f"{result['verdict']:>11}  {name}: {result['detail']}", file=sys.stderr, flush=True)
            with open(results_path, "a") as f:
                f.write(json.dumps(result) + "\n")
            shutil.rmtree(os.path.join(cache, f"models--timm--{name}.{tag}"), ignore_errors=True)
            if job["reference"] and os.path.exists(job["reference"]):
                os.remove(job["reference"])
    shutil.rmtree(work, ignore_errors=True)
    write_table(results_path, os.path.join(args.output, "timm_sweep.md"))


def write_table(results_path, table_path):
    """The per-module summary and every architecture's verdict, as Markdown."""
    with open(results_path) as f:
        results = [json.loads(line) for line in f]
    lines = ["| module | architectures | matched | refused by name | WRONG | EXCEPTION | not written |", "|---|---|---|---|---|---|---|"]
    for module in MODULES:
        rows = [r for r in results if r["module"] == module]
        count = {v: sum(r["verdict"] == v for r in rows) for v in ("matched", "refused", "WRONG", "EXCEPTION", "not written")}
        lines.append(f"| {module}.py | {len(rows)} | {count['matched']} | {count['refused']} | {count['WRONG']} | "
                     f"{count['EXCEPTION']} | {count['not written']} |")
    lines += ["", "| architecture | tag | depth | verdict | detail |", "|---|---|---|---|---|"]
    for r in results:
        detail = re.sub(r"'?/[^' ]*/snapshots/0{40}/?", "'", r["detail"]).replace("|", "\\|").replace("\n", " ")
        depth = f"{r['depth']} (model_args)" if r.get("depth") else "full"
        lines.append(f"| {r['name']} | {r['tag']} | {depth} | {r['verdict']} | {detail} |")
    with open(table_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        _writer(sys.argv[2])
    else:
        main()
