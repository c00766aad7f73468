"""What the attention's score matrices weigh in a ViT training step, against the GPU peaks measured.

``python -m benchmarks.gpu_memory`` prints, for the rows of ``benchmarks/results/gpu-h100.json`` with a
``cudnn-padded`` twin, the size of one ``(batch, heads, N, N)`` score tensor summed over the layers (in bfloat16
and float32: 2 and 4 bytes an element), the measured peaks (``peak_memory_mb``: MiB, as the file records them)
with XLA's attention and with cuDNN's fused attention, and how many bytes per score element the fused path
removed. Then the same arithmetic for ViT-B/16 at batch 128, whose fused row is not in the file (issue 26 quotes
13.1 GB from a run not kept). Arithmetic and the file only: no GPU needed.
"""

import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "gpu-h100.json")
# (heads, layers) of the models in the GPU file; N = 197 tokens at 224x224 with 16x16 patches
SIZES = {"S/16": (6, 12), "B/16": (12, 12), "L/16": (16, 24)}
TOKENS = 197
MIB = 2**20


def score_elements(model, batch, tokens=TOKENS):
    heads, layers = SIZES[model]
    return batch * heads * tokens * tokens * layers


def rows(path=RESULTS):
    with open(path) as f:
        records = json.load(f)["records"]
    ok = {(r["model"], r["batch_size"], r["variant"]): r for r in records
          if r.get("framework") == "keras" and r.get("mode") == "train" and r.get("status") == "ok"}
    timm = {(r["model"], r["batch_size"]): r for r in records
            if r.get("framework") == "timm" and r.get("mode") == "train" and r.get("status") == "ok"}
    out = []
    for (model, batch, variant), fused in sorted(ok.items()):
        unfused = ok.get((model, batch, "default"))
        if variant != "cudnn-padded" or not unfused:
            continue
        elements = score_elements(model, batch)
        removed = (unfused["peak_memory_mb"] - fused["peak_memory_mb"]) * MIB
        out.append({"model": model, "batch": batch, "score_elements": elements,
                    "bf16_gib": elements * 2 / 2**30, "f32_gib": elements * 4 / 2**30,
                    "xla_peak_mib": unfused["peak_memory_mb"], "fused_peak_mib": fused["peak_memory_mb"],
                    "timm_peak_mib": timm.get((model, batch), {}).get("peak_memory_mb"),
                    "removed_bytes_per_score_element": removed / elements})
    return out


def main():
    for r in rows():
        timm = f", timm {r['timm_peak_mib']:,.0f}" if r["timm_peak_mib"] else ""
        print(f"ViT-{r['model']} batch {r['batch']}: scores {r['score_elements']:,} elements over the layers = "
              f"{r['bf16_gib']:.2f} GiB bf16, {r['f32_gib']:.2f} GiB f32; peak {r['xla_peak_mib']:,.0f} MiB (XLA "
              f"attention) -> {r['fused_peak_mib']:,.0f} MiB (cuDNN){timm}: "
              f"{r['removed_bytes_per_score_element']:.2f} bytes removed per score element")
    elements = score_elements("B/16", 128)
    print(f"ViT-B/16 batch 128: scores {elements:,} elements = {elements * 2 / 2**30:.2f} GiB bf16, "
          f"{elements * 4 / 2**30:.2f} GiB f32, {elements * 6 / 2**30:.2f} GiB both; at 5.2 bytes an element "
          f"{elements * 5.2 / 2**30:.2f} GiB; cuDNN keeps instead a float32 logsumexp of "
          f"{128 * 12 * 198 * 4 * 12 / MIB:.1f} MiB over the 12 layers (198 padded tokens)")
    tokens = 128 * TOKENS
    print(f"ViT-B/16 batch 128, the other activations over 12 layers: one (B, N, 768) tensor "
          f"{tokens * 768 * 2 * 12 / 2**30:.2f} GiB bf16 / {tokens * 768 * 4 * 12 / 2**30:.2f} GiB f32, "
          f"one (B, N, 3072) MLP hidden {tokens * 3072 * 2 * 12 / 2**30:.2f} GiB bf16 / "
          f"{tokens * 3072 * 4 * 12 / 2**30:.2f} GiB f32")


if __name__ == "__main__":
    main()
