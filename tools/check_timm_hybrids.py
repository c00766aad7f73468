"""timm's hybrid ViTs against keras_vit's: every architecture of ``vision_transformer_hybrid.py`` with pretrained tags.

Run with the peers' Python (``make peers``) from the repository root::

    .venv-peers/bin/python tools/check_timm_hybrids.py [--keras-python .venv/bin/python] [--only ARCH ...]

For each architecture (``timm.list_models(module='vision_transformer_hybrid', pretrained=True)``, tags dropped):
``timm.create_model(arch, pretrained=False)`` with random weights (its backbone's convolutions at the scale of a
trained network, 0.01, where the weight-standardisation epsilon shows; random GroupNorm scales and biases),
``model.eval()``, ``timm.models.save_for_hf(model, folder, safe_serialization=True)`` (timm's Hub layout:
``config.json`` + ``model.safetensors``), timm's forward on two random images normalised with its
``pretrained_cfg`` mean and std. Then, in a subprocess of keras_vit's own Python from this tree,
``keras_vit.from_pretrained(folder, classifier_activation=None)`` on the same images in [0, 255] (the model scales
them with the file's mean and std) and the logits compared: ``max |keras - timm| / max |timm|`` within 1e-4.
The column ``original norms`` is the same comparison for the same weights in a model with
``resnet_norms="original"`` (the paper's epsilons): what timm's constants change. An architecture keras_vit refuses
(MobileCLIP's ConvStem) is listed with the first line of the refusal.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 1e-4
CONV_SCALE = 0.01

KERAS_SIDE = r"""
import json, sys
import numpy as np
import keras_vit
from keras_vit.architecture.model import VisionTransformer

folder, images, out = sys.argv[1:4]
x = np.load(images)
try:
    model = keras_vit.from_pretrained(folder, classifier_activation=None)
except Exception as error:  # a refusal is a result of the check
    json.dump({"refused": f"{type(error).__name__}: {error}"}, open(out, "w"))
    sys.exit(0)
config = model.vit_config
logits = np.asarray(model.predict(x, batch_size=1, verbose=0), np.float64)
original = VisionTransformer.from_vit_config(config.replace(resnet_norms="original"))
original.set_weights(model.get_weights())
other = np.asarray(original.predict(x, batch_size=1, verbose=0), np.float64)
json.dump({"logits": logits.tolist(), "original": other.tolist(), "block_units": list(config.block_units),
           "patch_size": list(config.patch_size), "image_size": list(config.image_size),
           "resnet_norms": config.resnet_norms, "num_heads": config.num_heads}, open(out, "w"))
"""


def randomize(model, torch, seed):
    """Random weights a trained network could have: backbone convolutions of std 0.01, GroupNorms around 1 and 0."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.is_floating_point() or "running_" in name:  # BatchNorm statistics (MobileCLIP's stem)
                continue
            noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype)
            if name.startswith("patch_embed.backbone.") and tensor.ndim == 4:
                tensor.copy_(noise * CONV_SCALE)
            elif name.startswith("patch_embed.backbone.") and name.endswith(".weight"):
                tensor.copy_(1 + 0.2 * noise)
            elif name.startswith("patch_embed.backbone."):
                tensor.copy_(0.2 * noise)
            else:
                tensor.add_(0.02 * noise)


def check(architecture, keras_python, workdir, seed=0):
    import timm
    import torch

    started = time.time()
    model = timm.create_model(architecture, pretrained=False)
    randomize(model, torch, seed)
    model.eval()
    folder = os.path.join(workdir, architecture)
    timm.models.save_for_hf(model, folder, safe_serialization=True)
    cfg = model.pretrained_cfg
    size = cfg["input_size"][1:]
    pixels = np.random.default_rng(seed).uniform(0, 255, (2, *size, 3)).astype(np.float32)
    mean, std = np.asarray(cfg["mean"], np.float32), np.asarray(cfg["std"], np.float32)
    with torch.no_grad():
        timm_in = torch.from_numpy(((pixels / 255 - mean) / std).transpose(0, 3, 1, 2).copy())
        reference = model(timm_in).double().numpy()
    del model
    images, out = os.path.join(workdir, architecture + ".npy"), os.path.join(workdir, architecture + ".json")
    np.save(images, pixels)
    run = subprocess.run([keras_python, "-c", KERAS_SIDE, folder, images, out], cwd=ROOT, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"{architecture}: keras_vit's side failed:\n{run.stderr[-3000:]}")
    result = json.load(open(out))
    row = {"architecture": architecture, "seconds": time.time() - started}
    if "refused" in result:
        row["refused"] = result["refused"]
        return row
    scale = np.max(np.abs(reference))
    row.update(result, logits=None, original=None,
               error=float(np.max(np.abs(np.asarray(result["logits"]) - reference)) / scale),
               error_original=float(np.max(np.abs(np.asarray(result["original"]) - reference)) / scale))
    return row


def main(argv=None):
    import timm
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keras-python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    parser.add_argument("--only", nargs="*", help="architectures to check (default: every one with pretrained tags)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    names = sorted({name.partition(".")[0] for name in timm.list_models(module="vision_transformer_hybrid", pretrained=True)})
    names = [name for name in names if not args.only or name in args.only]
    print(f"timm {timm.__version__}, torch {torch.__version__}; tolerance {TOLERANCE:g} of max |timm logits|")
    header = f"{'architecture':24} {'block_units':14} {'patch':6} {'size':5} {'norms':6} {'rel. error':>11} {'original norms':>15}  {'s':>4}  verdict"
    print(header)
    print("-" * len(header))
    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            row = check(name, args.keras_python, workdir)
            if "refused" in row:
                print(f"{name:24} refused: {row['refused'].splitlines()[0][:160]}")
                continue
            ok = row["error"] <= TOLERANCE
            failed += not ok
            print(f"{name:24} {str(tuple(row['block_units'])):14} {row['patch_size'][0]:<6} {row['image_size'][0]:<5} "
                  f"{row['resnet_norms']:6} {row['error']:11.2e} {row['error_original']:15.2e}  {row['seconds']:4.0f}  "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
