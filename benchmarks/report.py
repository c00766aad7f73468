"""Limits, fractions of the limit, the bars of issues 4, 5 and 7, and the printed table."""

from benchmarks import common

BF16_LIKE = ("bfloat16", "bfloat16-weights", "float16")


def limits(records):
    """Best measured GEMM GFLOP/s per precision: ``{"float32": ..., "bfloat16": ...}``."""
    best = {}
    for r in records:
        if r.get("section") == "limit" and r.get("status") == "ok" and r.get("gflops_per_second"):
            best[r["precision"]] = max(best.get(r["precision"], 0.0), r["gflops_per_second"])
    return best


def add_fractions(records, limit):
    """Add ``gflops_per_second`` and ``fraction_of_limit`` to every ViT result with a known FLOP count."""
    for r in records:
        if r.get("section") == "limit":
            precision = r["precision"]
            if r.get("gflops_per_second") and limit.get(precision):
                r["fraction_of_limit"] = round(r["gflops_per_second"] / limit[precision], 3)
            continue
        gflop = common.forward_gflop(r.get("model"))
        if not gflop or not r.get("images_per_second"):
            continue
        if r.get("section") == "training":
            gflop *= 3  # forward + backward (two GEMMs per forward GEMM)
        r["gflops_per_second"] = round(r["images_per_second"] * gflop, 2)
        against = "bfloat16" if r.get("precision") in BF16_LIKE else "float32"
        if limit.get(against):
            r["limit_precision"] = against
            r["fraction_of_limit"] = round(r["gflops_per_second"] / limit[against], 3)


def _find(records, **match):
    return [r for r in records if r.get("status") == "ok" and r.get("images_per_second")
            and all(r.get(k) == v for k, v in match.items())]


def _best(rows):
    return max(rows, key=lambda r: r["images_per_second"]) if rows else None


def _bar(bar, target, value, detail):
    met = None if value is None else value >= target
    return {"bar": bar, "target": target, "value": None if value is None else round(value, 3), "met": met, "detail": detail}


def _ratio(a, b):
    return a["images_per_second"] / b["images_per_second"] if a and b else None


def _keras(rows):
    return [r for r in rows if r["runtime"].startswith("keras-") and not r["runtime"].startswith("keras-hub")
            and not r["runtime"].endswith("-paired")]


def bars(records, limit, model="B/16", batch=8):
    """Each bar: its target, the value measured in this run, whether it is met (None: not measured)."""
    out = []
    keras32 = _best(_keras(_find(records, section="inference", model=model, batch_size=batch, precision="float32")))
    timm32 = _best(_find(records, section="inference", model=model, batch_size=batch, precision="float32", runtime="timm"))
    name = lambda r: f"{r['runtime']} {r['precision']} {r['images_per_second']:.2f} img/s" if r else "not measured"
    out.append(_bar(f"{model} float32 b{batch}: Keras / timm", 1.2, _ratio(keras32, timm32),
                    f"{name(keras32)} vs {name(timm32)}"))
    fraction = keras32.get("fraction_of_limit") if keras32 else None
    out.append(_bar(f"{model} float32 b{batch}: fraction of the float32 GEMM limit", 0.9, fraction,
                    f"{keras32.get('gflops_per_second') if keras32 else None} GFLOP/s vs limit {limit.get('float32')}"))
    concurrent = keras32.get("fraction_of_concurrent_gemm") if keras32 else None
    out.append(_bar(f"{model} float32 b{batch}: fraction of the float32 GEMM rate measured interleaved with it", 0.9,
                    concurrent, f"probe {keras32.get('gemm_probe_gflops') if keras32 else None} GFLOP/s (same process, same moments)"))
    fast = [r for r in _keras(_find(records, section="inference", model=model, batch_size=batch))
            if r["precision"] in ("bfloat16", "bfloat16-weights")]
    fast += [r for r in _find(records, section="export", model=model, batch_size=batch)
             if r["precision"] in ("dynamic-int8", "int8")]
    best_fast = _best(fast)
    out.append(_bar(f"{model} b{batch}: best bfloat16/int8 path / best float32 Keras", 2.0, _ratio(best_fast, keras32),
                    f"{name(best_fast)} vs {name(keras32)}"))
    paired = [r for r in _find(records, section="inference", model=model, batch_size=batch, runtime="keras-function-paired")]
    best_paired = max(paired, key=lambda r: r["speedup_over_float32"]) if paired else None
    out.append(_bar(f"{model} b{batch}: bfloat16 / float32 Keras, calls alternated in one process", 2.0,
                    best_paired["speedup_over_float32"] if best_paired else None,
                    f"{best_paired['precision']}: {best_paired['images_per_second']:.2f} vs "
                    f"{best_paired['float32_images_per_second']:.2f} img/s" if best_paired else "not measured"))
    quantized = _best([r for r in _find(records, section="export", model=model, batch_size=batch)
                       if r["precision"] in ("dynamic-int8", "int8", "float16")])
    out.append(_bar(f"{model} b{batch} (issue 5): best quantized export / Keras float32", 2.5, _ratio(quantized, keras32),
                    f"{name(quantized)} vs {name(keras32)}"))
    sizes = {r["precision"]: r.get("size_bytes") for r in _find(records, section="export", model=model)
             if r["runtime"].startswith("tflite-") and r.get("size_bytes")}
    small = min([sizes[p] for p in ("dynamic-int8", "int8") if p in sizes], default=None)
    ratio = small / sizes["float32"] if small and sizes.get("float32") else None
    out.append({"bar": f"{model} int8 TFLite size / float32 size (issue 5)", "target": 0.26,
                "value": None if ratio is None else round(ratio, 3), "met": None if ratio is None else ratio <= 0.26,
                "detail": f"{small} vs {sizes.get('float32')} bytes"})
    for r in records:
        if r.get("section") == "agreement" and r.get("status") == "ok":
            out.append(_bar(f"top-1 agreement of {r['runtime']} {r['precision']} with float32 ({r['images']} real images)",
                            0.99, r["top1_agreement"], f"accuracy {r['accuracy']} vs float32 {r['float32_accuracy']}"))
    for precision in ("float32", "bfloat16"):
        ours = _best(_keras(_find(records, section="inference", model=model, batch_size=batch, precision=precision)))
        hub = _best([r for r in _find(records, section="inference", model=model, batch_size=batch, precision=precision)
                     if r["runtime"].startswith("keras-hub")])
        out.append(_bar(f"{model} {precision} b{batch}: keras_vit / keras-hub (best runtime of each)", 1.0,
                        _ratio(ours, hub), f"{name(ours)} vs {name(hub)}"))
    train_model = "S/16"
    keras_train = _best(_keras(_find(records, section="training", model=train_model)))
    timm_train = _best(_find(records, section="training", model=train_model, runtime="timm"))
    out.append(_bar(f"{train_model} training: Keras / timm images/s", 1.0, _ratio(keras_train, timm_train),
                    f"{name(keras_train)} vs {name(timm_train)}"))
    return out


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def table(records):
    """The results as a Markdown table."""
    lines = [
        "| measurement | runtime | precision | batch | img/s | latency ms | peak MB | GFLOP/s | of limit | of GEMM now | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if r.get("section") == "agreement" and r.get("status") == "ok":
            continue  # reported with the bars
        note = "" if r.get("status") == "ok" else f"{r.get('status')}: {r.get('error') or r.get('reason') or ''}"[:70]
        lines.append(
            f"| {r.get('model') or 'GEMM'} | {r.get('runtime')} | {r.get('precision')} | {r.get('batch_size') or '-'} "
            f"| {_fmt(r.get('images_per_second'), '.2f')} | {_fmt(r.get('latency_ms'), '.1f')} "
            f"| {_fmt(r.get('peak_memory_mb'), '.0f')} | {_fmt(r.get('gflops_per_second'), '.1f')} "
            f"| {_fmt(r.get('fraction_of_limit'), '.0%')} | {_fmt(r.get('fraction_of_concurrent_gemm'), '.0%')} | {note} |"
        )
    return "\n".join(lines)


def bars_table(results):
    lines = ["| bar | target | measured | met |", "|---|---|---|---|"]
    for b in results:
        met = {True: "yes", False: "**no**", None: "not measured"}[b["met"]]
        lines.append(f"| {b['bar']} ({b['detail']}) | {b['target']} | {_fmt(b['value'], '.2f')} | {met} |")
    return "\n".join(lines)
