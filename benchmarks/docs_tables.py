"""The tables of ``docs/performance.md``, rendered from the runs kept in ``benchmarks/results/``.

Every table in that page sits between two markers and is rebuilt from one JSON
file written by ``python -m benchmarks --json FILE``::

    <!-- table: peers cpu-2core-quiet-3.json -->
    ... rendered here, never typed ...
    <!-- end table -->

    python -m benchmarks.docs_tables --write docs/performance.md   # re-render every table in place
    python -m benchmarks.docs_tables --check docs/performance.md   # exit 1 if a table differs (tests/test_docs.py)

Kinds (the word after ``table:``), then the results file (relative to
``benchmarks/results/``), then optional ``key=value`` filters (``model=B/16
batch=8``): ``run`` (the command and the machine), ``peers`` (keras_vit
against timm and keras-hub per model, batch and precision), ``runtimes``
(every inference and export runtime of one model and batch), ``training``,
``limit`` (the GEMM rates), ``agreement`` (top-1 agreement with float32),
``ratios`` (the comparisons a reader asks for first), ``records`` (any run,
one row per measurement) and ``paired`` (``python -m benchmarks.paired_peer``
files, comma-separated, one row each). A results file that does not exist renders as a
one-line notice, so a place can be kept for a run still to come.

Standard library only, no TensorFlow: the check runs in the fast test suite.
"""

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
DEFAULT_PAGE = os.path.join(ROOT, "docs", "performance.md")

BLOCK = re.compile(r"(<!-- table: (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- end table -->)", re.S)
BF16_LIKE = ("bfloat16", "bfloat16-weights", "float16")


# ----------------------------------------------------------------- formatting


def _num(value, spec=".2f"):
    return "-" if value is None else format(value, spec)


def _pct(value):
    return "-" if value is None else f"{100 * value:.0f} %"


def _x(value):
    return "-" if value is None else f"{value:.2f}x"


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def cpu_name(machine):
    """``"AMD EPYC, 2 cores (avx512f, avx512_bf16, avx512_vnni)"`` from a results file's ``machine``.

    A GPU recorded in the file (``machine["gpu"]`` or ``machine["gpus"]``) is named after the CPU.
    """
    flags = ", ".join(machine.get("cpu_flags") or []) or "no AVX-512 flags recorded"
    name = f"{machine.get('cpu') or 'unknown CPU'}, {machine.get('cpus')} cores ({flags})"
    gpus = machine.get("gpus") or machine.get("gpu")
    if gpus:
        name += ", GPU " + (", ".join(map(str, gpus)) if isinstance(gpus, (list, tuple)) else str(gpus))
    return name


def caption(run):
    return f"*`benchmarks/results/{run['file']}`, {cpu_name(run.get('machine', {}))}:*"


# -------------------------------------------------------------------- records


def _ok(records, **match):
    return [
        r for r in records
        if r.get("status") == "ok" and all(r.get(k) == v for k, v in match.items())
    ]


def _best(rows):
    rows = [r for r in rows if r.get("images_per_second")]
    return max(rows, key=lambda r: r["images_per_second"]) if rows else None


def _is_keras_vit(r):
    runtime = r.get("runtime") or ""
    return runtime.startswith("keras-") and not runtime.startswith("keras-hub") and not runtime.endswith("-paired")


def _ratio(a, b):
    return a["images_per_second"] / b["images_per_second"] if a and b else None


def _ips(r):
    return r["images_per_second"] if r else None


def _order(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


# ---------------------------------------------------------------------- kinds


def render_run(run, **_):
    machine = run.get("machine", {})
    loads = [r["load_average"] for r in run["records"] if r.get("load_average") is not None]
    low, high = (f"{min(loads):.1f}", f"{max(loads):.1f}") if loads else (None, None)
    load = "load average not recorded" if low is None else f"load average {low if low == high else low + '-' + high} during the run"
    started = (run.get("started") or "")[:10] or "date not recorded"
    return [
        f"`benchmarks/results/{run['file']}`: {cpu_name(machine)}, Python {machine.get('python', '?')}, "
        f"{started}, {load}{'' if run.get('complete') else ', **incomplete run**'}. Command:",
        "",
        "```bash",
        run.get("command", "(not recorded)"),
        "```",
    ]


def render_peers(run, model=None, batch=None):
    """keras_vit (its fastest Keras runtime) against timm and keras-hub, per model, batch and precision."""
    records = [r for r in _ok(run["records"], section="inference") if r.get("images_per_second")]
    if model:
        records = [r for r in records if r["model"] == model]
    if batch:
        records = [r for r in records if r["batch_size"] == int(batch)]
    rows = []
    for m in _order(r["model"] for r in records):
        for b in sorted({r["batch_size"] for r in records if r["model"] == m}):
            for p in _order(r["precision"] for r in records if r["model"] == m and r["batch_size"] == b):
                same = [r for r in records if r["model"] == m and r["batch_size"] == b and r["precision"] == p]
                ours = _best([r for r in same if _is_keras_vit(r)])
                if ours is None:
                    continue
                timm = _best([r for r in same if r["runtime"].startswith("timm")])
                hub = _best([r for r in same if r["runtime"].startswith("keras-hub")])
                paired = _best([r for r in same if r["runtime"].endswith("-paired")])
                speed = f"{ours['images_per_second']:.2f}"
                if b == 1:
                    speed += f" ({ours['latency_ms']:.0f} ms)"
                rows.append([
                    m, b, p, f"{speed} `{ours['runtime']}`",
                    _x(paired.get("speedup_over_float32")) if paired else "-",
                    _num(_ips(timm)), _num(_ips(hub)),
                    _x(_ratio(ours, timm)), _x(_ratio(ours, hub)), _pct(ours.get("fraction_of_limit")),
                ])
    header = ["model", "batch", "precision", "keras_vit img/s", "over float32, alternated",
              "timm img/s", "keras-hub img/s", "keras_vit / timm", "keras_vit / keras-hub", "of the GEMM limit"]
    return [caption(run), ""] + _table(header, rows)


def render_runtimes(run, model="B/16", batch=8):
    """Every inference and export runtime of one model at one batch size."""
    batch = int(batch)
    rows = []
    for r in run["records"]:
        if r.get("section") not in ("inference", "export") or r.get("model") != model or r.get("batch_size") != batch:
            continue
        if r.get("status") != "ok":
            rows.append([r["runtime"], r["precision"], f"{r.get('status')}", "-", "-", "-", "-", "-", "-"])
            continue
        size = r.get("size_bytes")
        rows.append([
            r["runtime"], r["precision"], _num(r.get("images_per_second")), _num(r.get("latency_ms"), ".0f"),
            _num(r.get("peak_memory_mb"), ".0f"), _num(r.get("gflops_per_second"), ".1f"),
            _pct(r.get("fraction_of_limit")), _pct(r.get("fraction_of_concurrent_gemm")),
            "-" if size is None else f"{size / 1e6:.1f}",
        ])
    header = ["runtime", "precision", "img/s", "ms per batch", "peak MB", "GFLOP/s", "of the limit",
              "of the GEMM timed with it", "file MB"]
    return [caption(run) + f" {model}, batch {batch}.", ""] + _table(header, rows)


def render_training(run, model=None, **_):
    rows = []
    for r in _ok(run["records"], section="training"):
        if model and r["model"] != model:
            continue
        rows.append([
            r["model"], r["runtime"], r["precision"], r["batch_size"], _num(r.get("images_per_second")),
            _num(r.get("latency_ms"), ".0f"), _num(r.get("peak_memory_mb"), ".0f"), _pct(r.get("fraction_of_limit")),
        ])
    header = ["model", "runtime", "precision", "batch", "img/s", "ms per step", "peak MB", "of the limit"]
    return [caption(run), ""] + _table(header, rows)


def render_limit(run, **_):
    rows = [
        [r["runtime"], r["precision"], r.get("shape") or "-", _num(r.get("gflops_per_second"), ".1f"),
         _pct(r.get("fraction_of_limit"))]
        for r in _ok(run["records"], section="limit")
    ]
    limits = run.get("limit_gflops_per_second") or {}
    summary = ", ".join(f"{p} {v:.1f} GFLOP/s" for p, v in limits.items()) or "none measured"
    header = ["GEMM", "precision", "shape (m x k x n)", "GFLOP/s", "of the limit"]
    return [caption(run) + f" the limit, best of each precision: {summary}.", ""] + _table(header, rows)


def render_agreement(run, **_):
    rows = [
        [r["model"], r["runtime"], r["precision"], r["images"], _pct(r.get("top1_agreement")),
         _num(r.get("max_abs_diff"), ".3f"), f"{_pct(r.get('accuracy'))} / {_pct(r.get('float32_accuracy'))}"]
        for r in _ok(run["records"], section="agreement")
    ]
    header = ["model", "runtime", "precision", "images", "top-1 agreement with float32", "max abs diff",
              "accuracy / float32's"]
    return [caption(run), ""] + _table(header, rows)


def render_ratios(run, model="B/16", batch=8):
    """The comparisons asked for first, each from records of this one run."""
    batch = int(batch)
    records = run["records"]
    infer = [r for r in _ok(records, section="inference", model=model, batch_size=batch) if r.get("images_per_second")]
    export = [r for r in _ok(records, section="export", model=model, batch_size=batch) if r.get("images_per_second")]
    rows = []

    def name(r):
        return f"`{r['runtime']}` {r['precision']} {r['images_per_second']:.2f} img/s"

    ours32 = _best([r for r in infer if _is_keras_vit(r) and r["precision"] == "float32"])
    for precision in ("float32", "bfloat16"):
        ours = _best([r for r in infer if _is_keras_vit(r) and r["precision"] == precision])
        for peer in ("timm", "keras-hub"):
            theirs = _best([r for r in infer if r["runtime"].startswith(peer) and r["precision"] == precision])
            if ours and theirs:
                rows.append([f"keras_vit / {peer}, {precision}", _x(_ratio(ours, theirs)), f"{name(ours)} vs {name(theirs)}"])
    if ours32 and ours32.get("fraction_of_limit") is not None:
        detail = f"{ours32['gflops_per_second']:.1f} GFLOP/s"
        if ours32.get("fraction_of_concurrent_gemm") is not None:
            detail += f"; {_pct(ours32['fraction_of_concurrent_gemm'])} of the GEMM timed between its own calls"
        rows.append(["keras_vit float32, of the float32 GEMM limit", _pct(ours32["fraction_of_limit"]), detail])
    for paired in sorted((r for r in infer if r["runtime"].endswith("-paired")), key=lambda r: r["precision"]):
        rows.append([f"keras_vit {paired['precision']} / float32, calls alternated in one process",
                     _x(paired.get("speedup_over_float32")),
                     f"{paired['images_per_second']:.2f} vs {paired.get('float32_images_per_second', 0):.2f} img/s"])
    for r in sorted(export, key=lambda r: -r["images_per_second"]):
        if r["precision"] in ("dynamic-int8", "int8") and ours32:
            rows.append([f"TFLite {r['precision']} / keras_vit float32", _x(_ratio(r, ours32)), f"{name(r)} vs {name(ours32)}"])
    sizes = {r["precision"]: r["size_bytes"] for r in _ok(records, section="export", model=model)
             if r["runtime"].startswith("tflite-") and r.get("size_bytes")}
    for p in ("dynamic-int8", "int8"):
        if p in sizes and "float32" in sizes:
            rows.append([f"TFLite {p} file / float32 file", f"{100 * sizes[p] / sizes['float32']:.1f} %",
                         f"{sizes[p]:,} vs {sizes['float32']:,} bytes"])
    train = _ok(records, section="training")
    for m in _order(r["model"] for r in train):
        for p in _order(r["precision"] for r in train if r["model"] == m):
            same = [r for r in train if r["model"] == m and r["precision"] == p]
            ours, timm = _best([r for r in same if _is_keras_vit(r)]), _best([r for r in same if r["runtime"] == "timm"])
            if ours and timm:
                rows.append([f"training {m} {p}: keras_vit / timm", _x(_ratio(ours, timm)), f"{name(ours)} vs {name(timm)}"])
    return [caption(run) + f" {model}, batch {batch} unless named.", ""] + _table(["comparison", "value", "measured"], rows)


def render_records(run, **_):
    rows = []
    for r in run["records"]:
        if r.get("status") != "ok" or not r.get("images_per_second"):
            continue
        note = []
        if r.get("speedup_over_float32"):
            note.append(f"{r['speedup_over_float32']:.2f}x float32 ({r['float32_images_per_second']:.2f} img/s) alternated")
        if r.get("repeats"):
            note.append("repeats " + ", ".join(f"{v:.2f}" for v in r["repeats"]))
        rows.append([
            r.get("model"), r.get("runtime"), r.get("precision"), r.get("batch_size"), _num(r.get("images_per_second")),
            _num(r.get("latency_ms"), ".0f"), _num(r.get("peak_memory_mb"), ".0f"), _pct(r.get("fraction_of_limit")),
            "; ".join(note),
        ])
    header = ["model", "runtime", "precision", "batch", "img/s", "ms per batch", "peak MB", "of the limit", "note"]
    return [caption(run), ""] + _table(header, rows)


_GPU_MODES = {"infer": "inference", "train": "training step", "predict": "model.predict (uint8)",
              "fit": "model.fit (uint8)"}


def render_gpu(run, variant="default", **_):
    """keras_vit (Keras JAX backend) against timm per model, mode and batch, from ``python -m benchmarks.gpu_jax``'s file.

    Rows of the same ``device_call`` pair up (the same machine, the same run); ``variant`` picks the
    keras_vit variant (``default``, ``cudnn-padded``, ...) and timm always runs its default.
    """
    env = run.get("environment", {})
    head = f"*`benchmarks/results/{run['file']}`, {run.get('gpu', 'unknown GPU')}"
    if env.get("cpu"):
        head += f", host CPU {env['cpu']}"
    rows = []
    records = [r for r in run["records"] if r.get("variant", "default") in (variant, "default")]
    size = {"Ti": 0, "S": 1, "B": 2, "L": 3, "H": 4}
    keys = sorted({(r["model"], r["mode"], r["batch_size"]) for r in records if r["framework"] == "keras" and r.get("variant") == variant},
                  key=lambda k: (size.get(k[0].split("/")[0], 9), k[0], k[1], k[2]))
    for model, mode, batch in keys:
        keras = next(r for r in records if r["framework"] == "keras" and r.get("variant") == variant
                     and (r["model"], r["mode"], r["batch_size"]) == (model, mode, batch))
        timm = next((r for r in records if r["framework"] == "timm" and r.get("variant") == "default"
                     and (r["model"], r["mode"], r["batch_size"]) == (model, mode, batch)
                     and r.get("device_call") == keras.get("device_call")), None)
        k_ips = keras.get("images_per_second") if keras.get("status") == "ok" else None
        t_ips = timm.get("images_per_second") if timm and timm.get("status") == "ok" else None
        rows.append([
            f"ViT-{model}", _GPU_MODES.get(mode, mode), batch,
            _num(k_ips, ",.0f") if k_ips is not None else f"{keras.get('status')}",
            _num(t_ips, ",.0f") if timm else "not measured in this run",
            _x(k_ips / t_ips if k_ips and t_ips else None),
            _num(keras.get("peak_memory_mb"), ",.0f"), _num(timm.get("peak_memory_mb") if timm else None, ",.0f"),
        ])
    header = ["model", "measurement", "batch", "keras_vit img/s", "timm img/s", "keras_vit / timm",
              "keras_vit peak MB", "timm peak MB"]
    return [head + (f", keras_vit variant `{variant}`" if variant != "default" else "") + ":*", ""] + _table(header, rows)


def _onednn(machine, emulated):
    value = str(machine.get("onednn"))
    if value in ("1", "0"):
        return ("on" if value == "1" else "off") + f" (TF_ENABLE_ONEDNN_OPTS={value}" + (
            ", TF's default on AVX2)" if value == "0" and emulated else ")")
    native = any(f in machine.get("cpu_flags", []) for f in ("avx512_vnni", "avx512_bf16", "avx_vnni"))
    return "on (TF's default with VNNI/BF16)" if native else "off (TF's default)"


def _paired_command(run):
    """The command, with ``TF_ENABLE_ONEDNN_OPTS=1`` in front where the run had it set and the command does not say."""
    command = run.get("command", "(not recorded)")
    emulated = run.get("machine", {}).get("emulation")
    if emulated and str(run["machine"].get("onednn")) == "1" and "TF_ENABLE_ONEDNN_OPTS" not in command:
        command = "TF_ENABLE_ONEDNN_OPTS=1 " + command
    return command


def render_paired(runs, **_):
    """One row per ``python -m benchmarks.paired_peer`` file: runtimes timed turn by turn, their medians and ratios.

    The marker names several files, comma-separated (``paired a.json,b.json``).
    """
    rows, machines = [], []
    for run in runs:
        machine, rates, ratios = run.get("machine", {}), run["summary"]["rates"], run["summary"]["per_round"]
        emulated = machine.get("emulation", {}).get("cpu_isa")
        cpu = f"{emulated} emulated on {machine.get('cpu_isa')}" if emulated else machine.get("cpu_isa", "?")
        onednn = _onednn(machine, emulated)
        others = [f"{name} {rates[name]['median']:.2f}" for name in ("tflite-float32", "onnxruntime") if name in rates]
        gemm = ratios.get("keras-function / best GEMM of the round")
        rows.append([
            f"`{run['file']}`", cpu, onednn, f"ViT-{run['model']}", run["batch_size"], run["threads"],
            _num(rates["keras-function"]["median"]), _num(rates.get("keras-xla", {}).get("median")),
            _num(rates["timm"]["median"]), ", ".join(others) or "-",
            _x(ratios.get("keras-function / timm")), _x(ratios.get("keras-xla / timm")), _pct(gemm),
        ])
        machines.append(cpu_name(machine))
    header = ["file", "CPU", "TensorFlow oneDNN", "model", "batch", "threads", "keras-function img/s",
              "keras-xla img/s", "timm img/s", "exports img/s", "keras-function / timm", "keras-xla / timm",
              "keras-function of the best GEMM"]
    machine_note = "; ".join(sorted(set(machines)))
    commands = ["", "Commands, one per row:", "", "```bash"] + [_paired_command(run) for run in runs] + ["```"]
    return [f"*Medians over rounds (each round times every runtime once, in turn); machine: {machine_note}:*", ""] + _table(
        header, rows) + commands


KINDS = {
    "gpu": render_gpu,
    "paired": render_paired,
    "run": render_run,
    "peers": render_peers,
    "runtimes": render_runtimes,
    "training": render_training,
    "limit": render_limit,
    "agreement": render_agreement,
    "ratios": render_ratios,
    "records": render_records,
}


# ----------------------------------------------------------------------- page


def load_run(filename, results=RESULTS):
    path = os.path.join(results, filename)
    with open(path) as f:
        run = json.load(f)
    if not isinstance(run, dict) or not isinstance(run.get("records"), list):
        raise ValueError(f"{path!r} is not a benchmark results file: it has no `records` list")
    run["file"] = filename
    return run


def load_paired(filename, results=RESULTS):
    path = os.path.join(results, filename)
    with open(path) as f:
        run = json.load(f)
    if not isinstance(run, dict) or "rates" not in run.get("summary", {}):
        raise ValueError(f"{path!r} is not a paired_peer results file: it has no summary.rates")
    run["file"] = filename
    return run


def render_block(spec, results=RESULTS):
    """The Markdown for one ``<!-- table: KIND FILE key=value ... -->`` marker (without the markers)."""
    words = spec.split()
    if len(words) < 2 or words[0] not in KINDS:
        raise ValueError(f"Bad table marker: expected 'KIND FILE [key=value ...]' with KIND one of "
                         f"{sorted(KINDS)}. Received: {spec!r}")
    kind, filename, options = words[0], words[1], {}
    for word in words[2:]:
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"Bad table option: expected key=value. Received: {word!r} in {spec!r}")
        options[key] = value
    filenames = filename.split(",") if kind == "paired" else [filename]
    missing = [name for name in filenames if not os.path.exists(os.path.join(results, name))]
    if missing:
        return f"*No `benchmarks/results/{missing[0]}` yet: nothing measured for this table.*\n\n"
    if kind == "paired":
        return "\n".join(render_paired([load_paired(name, results) for name in filenames], **options)) + "\n\n"
    return "\n".join(KINDS[kind](load_run(filename, results), **options)) + "\n\n"


def render_page(text, results=RESULTS):
    """``text`` with every table between its markers re-rendered."""

    def replace(match):
        return match.group(1) + render_block(match.group("spec"), results) + match.group(4)

    return BLOCK.sub(replace, text)


def differences(text, results=RESULTS):
    """The specs of the tables whose text differs from what the results render."""
    return [
        m.group("spec") for m in BLOCK.finditer(text) if m.group("body") != render_block(m.group("spec"), results)
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Render or check the tables of docs/performance.md from benchmarks/results/.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if a table differs from its results file")
    mode.add_argument("--write", action="store_true", help="re-render every table in place")
    parser.add_argument("page", nargs="?", default=DEFAULT_PAGE, help="the Markdown page (default: docs/performance.md)")
    args = parser.parse_args(argv)
    with open(args.page) as f:
        text = f.read()
    if not BLOCK.search(text):
        print(f"{args.page}: no '<!-- table: ... -->' markers", file=sys.stderr)
        return 1
    if args.check:
        stale = differences(text)
        for spec in stale:
            print(f"{args.page}: table '{spec}' differs from its results; run python -m benchmarks.docs_tables --write",
                  file=sys.stderr)
        return 1 if stale else 0
    new = render_page(text)
    if new != text:
        with open(args.page, "w") as f:
            f.write(new)
    print(f"{args.page}: {len(BLOCK.findall(new))} tables rendered")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
