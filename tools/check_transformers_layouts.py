"""Check that keras_vit reads what transformers' ``save_pretrained`` writes, in its 4.x and 5.x key layouts.

Run with the peers environment (torch and ``transformers>=5`` inside), from the repository root:

    /work/main/.venv-peers/bin/pip install "transformers>=5"
    /work/main/.venv-peers/bin/python tools/check_transformers_layouts.py [--keras-python /work/main/.venv/bin/python]

For each class it builds a tiny model with random weights (every parameter redrawn, so attention is not
uniform), writes it with ``save_pretrained`` and an image processor's ``preprocessor_config.json``, runs it in
torch on a random batch normalised as the processor does (``(x / 255 - image_mean) / image_std``), and loads the
folder with ``keras_vit.from_pretrained`` in keras_vit's own environment (a subprocess from the repository
root), fed the same ``[0, 255]`` pixels: keras_vit builds the processor's mean and std into the model. The
outputs must agree within 1e-4 relative (of each value, or of the largest near zero). transformers 5 writes
the ``*VisionModel`` of CLIP, SigLIP (2), MetaCLIP 2, Chinese-CLIP and AltCLIP without the ``vision_model.`` prefix
that 4.x wrote; the "4.x" rows are the same folders with that prefix put back (what 4.x's ``save_pretrained``
wrote; its ``*VisionTransformer`` sat under ``vision_model``). transformers 5's ``AltCLIPModel`` writes its vision
layers as ``encoder.layer.N`` and its ``ViTMSNForImageClassification`` its layers without ``vit.`` (the names of
the Hub checkpoints, which its ``conversion_mapping.py`` renames on load and back on save): their "4.x" rows rename
them as 4.x wrote them. TIPSv2 is new in transformers 5 (one layout). The other classes write one layout in both.
AIMv2's ``Aimv2VisionModel`` (RMSNorm, a normed patch embedding, SwiGLU; ``use_head=False``: its tokens) loads;
what keras_vit lacks (AIMv2's attention-pooling head, ``use_head=True``; ``Aimv2Model``, whose image embedding is
that head's) must be refused by a ``CheckpointError`` naming it. The table says which; the exit status is 1 when a row is neither matched
nor refused as expected.
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers as T
from safetensors.torch import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8)
TEXT = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=50)
BERT = dict(TEXT, max_position_embeddings=40)
NO_MLP = {k: v for k, v in SMALL.items() if k != "intermediate_size"}
SIGLIP2 = dict({k: v for k, v in SMALL.items() if k != "image_size"}, num_patches=16)
CLIP_NORM = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
HALF = ([0.5] * 3, [0.5] * 3)
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
LABELS = dict(num_labels=3)


def _image_features(model, pixels):
    out = model.get_image_features(pixel_values=pixels)
    return out if torch.is_tensor(out) else out.pooler_output


# class name -> (config, normalisation, output of the torch model, expected verdict ("matched" or a refusal's text))
CASES = {
    "ViTModel": (lambda: T.ViTConfig(**SMALL), HALF, lambda m, x: m(x).pooler_output, "matched"),
    "ViTForImageClassification": (lambda: T.ViTConfig(**SMALL, **LABELS), HALF, lambda m, x: m(x).logits, "matched"),
    "DeiTForImageClassificationWithTeacher": (lambda: T.DeiTConfig(**SMALL, **LABELS), IMAGENET,
                                              lambda m, x: m(x).logits, "matched"),
    "DeiTForImageClassification": (lambda: T.DeiTConfig(**SMALL, **LABELS), IMAGENET, lambda m, x: m(x).logits,
                                   "DeiTForImageClassification reads the class token only"),
    "ViTMAEModel": (lambda: T.ViTMAEConfig(**SMALL, mask_ratio=0.0), IMAGENET,
                    lambda m, x: m(x).last_hidden_state[:, 0], "matched"),
    "Dinov2Model": (lambda: T.Dinov2Config(**NO_MLP, mlp_ratio=2), IMAGENET, lambda m, x: m(x).pooler_output, "matched"),
    "Dinov2ForImageClassification": (lambda: T.Dinov2Config(**NO_MLP, use_swiglu_ffn=True, **LABELS), IMAGENET,
                                     lambda m, x: m(x).logits, "matched"),
    "Dinov2WithRegistersForImageClassification": (
        lambda: T.Dinov2WithRegistersConfig(**NO_MLP, mlp_ratio=2, num_register_tokens=2, **LABELS), IMAGENET,
        lambda m, x: m(x).logits, "matched"),
    "Dinov2WithRegistersModel": (  # no registers: a (1, 0, width) register_tokens tensor
        lambda: T.Dinov2WithRegistersConfig(**NO_MLP, mlp_ratio=2, num_register_tokens=0), IMAGENET,
        lambda m, x: m(x).pooler_output, "matched"),
    "CLIPVisionModel": (lambda: T.CLIPVisionConfig(**SMALL), CLIP_NORM, lambda m, x: m(x).pooler_output, "matched"),
    "CLIPVisionModelWithProjection": (lambda: T.CLIPVisionConfig(**SMALL, projection_dim=24), CLIP_NORM,
                                      lambda m, x: m(x).image_embeds, "matched"),
    "CLIPModel": (lambda: T.CLIPConfig(vision_config=SMALL, text_config=TEXT, projection_dim=24), CLIP_NORM,
                  _image_features, "matched"),
    "CLIPForImageClassification": (lambda: T.CLIPConfig(vision_config=SMALL, text_config=TEXT, **LABELS), CLIP_NORM,
                                   lambda m, x: m(x).logits, "matched"),
    "SiglipVisionModel": (lambda: T.SiglipVisionConfig(**SMALL), HALF, lambda m, x: m(x).pooler_output, "matched"),
    "SiglipModel": (lambda: T.SiglipConfig(vision_config=SMALL, text_config=TEXT), HALF, _image_features, "matched"),
    "SiglipForImageClassification": (lambda: T.SiglipConfig(vision_config=SMALL, text_config=TEXT, **LABELS), HALF,
                                     lambda m, x: m(x).logits, "matched"),
    "Siglip2VisionModel": (lambda: T.Siglip2VisionConfig(**SIGLIP2), HALF, lambda m, x: m(**x).pooler_output, "matched"),
    "Siglip2Model": (lambda: T.Siglip2Config(vision_config=SIGLIP2, text_config=TEXT), HALF,
                     lambda m, x: _image_features_siglip2(m, x), "matched"),
    "Siglip2ForImageClassification": (lambda: T.Siglip2Config(vision_config=SIGLIP2, text_config=TEXT, **LABELS), HALF,
                                      lambda m, x: m(**x).logits, "matched"),
    "ViTMSNModel": (lambda: T.ViTMSNConfig(**SMALL), IMAGENET, lambda m, x: m(x).last_hidden_state[:, 0], "matched"),
    "ViTMSNForImageClassification": (lambda: T.ViTMSNConfig(**SMALL, **LABELS), IMAGENET, lambda m, x: m(x).logits,
                                     "matched"),
    "IJepaModel": (lambda: T.IJepaConfig(**SMALL), IMAGENET, lambda m, x: m(x).last_hidden_state.mean(1), "matched"),
    "IJepaForImageClassification": (lambda: T.IJepaConfig(**SMALL, **LABELS), IMAGENET, lambda m, x: m(x).logits,
                                    "matched"),
    "MetaClip2VisionModel": (lambda: T.MetaClip2VisionConfig(**SMALL), CLIP_NORM, lambda m, x: m(x).pooler_output,
                             "matched"),
    "MetaClip2VisionModelWithProjection": (lambda: T.MetaClip2VisionConfig(**SMALL, projection_dim=24), CLIP_NORM,
                                           lambda m, x: m(x).image_embeds, "matched"),
    "MetaClip2Model": (lambda: T.MetaClip2Config(vision_config=SMALL, text_config=TEXT, projection_dim=24), CLIP_NORM,
                       _image_features, "matched"),
    "MetaClip2ForImageClassification": (lambda: T.MetaClip2Config(vision_config=SMALL, text_config=TEXT, **LABELS),
                                        CLIP_NORM, lambda m, x: m(x).logits, "matched"),
    "ChineseCLIPVisionModel": (lambda: T.ChineseCLIPVisionConfig(**SMALL), CLIP_NORM, lambda m, x: m(x).pooler_output,
                               "matched"),
    "ChineseCLIPModel": (lambda: T.ChineseCLIPConfig(vision_config=SMALL, text_config=BERT, projection_dim=24),
                         CLIP_NORM, _image_features, "matched"),
    "AltCLIPVisionModel": (lambda: T.AltCLIPVisionConfig(**SMALL), CLIP_NORM, lambda m, x: m(x).pooler_output,
                           "matched"),
    "AltCLIPModel": (lambda: T.AltCLIPConfig(vision_config=SMALL, text_config=dict(BERT, project_dim=24),
                                             projection_dim=24), CLIP_NORM, _image_features, "matched"),
    "CLIPSegVisionModel": (lambda: T.CLIPSegVisionConfig(**SMALL), CLIP_NORM, lambda m, x: m(x).pooler_output,
                           "matched"),
    "CLIPSegModel": (lambda: T.CLIPSegConfig(vision_config=SMALL, text_config=TEXT, projection_dim=24), CLIP_NORM,
                     _image_features, "matched"),
    "CLIPSegForImageSegmentation": (lambda: T.CLIPSegConfig(vision_config=SMALL, text_config=TEXT, projection_dim=24,
                                                             extract_layers=[1], reduce_dim=16), CLIP_NORM,
                                    lambda m, x: m(pixel_values=x, conditional_pixel_values=x).logits,
                                    "a segmentation decoder"),
    "Tipsv2VisionModel": (lambda: T.Tipsv2VisionConfig(**NO_MLP, mlp_ratio=2, num_register_tokens=2), HALF,
                          lambda m, x: m(x).pooler_output, "matched"),
    "Tipsv2VisionModel+swiglu": (lambda: T.Tipsv2VisionConfig(**NO_MLP, use_swiglu_ffn=True, layerscale_value=0.5),
                                 HALF, lambda m, x: m(x).pooler_output, "matched"),
    "Tipsv2Model": (lambda: T.Tipsv2Config(vision_config=dict(NO_MLP, num_register_tokens=1),
                                           text_config=dict(TEXT, hidden_size=32)), HALF, _image_features, "matched"),
    # DINOv3: RoPE, registers, LayerScale, a zero key bias; the gated MLP of its *_plus models
    "DINOv3ViTModel": (lambda: T.DINOv3ViTConfig(**SMALL, num_register_tokens=4), IMAGENET,
                       lambda m, x: m(x).pooler_output, "matched"),
    "DINOv3ViTModel+gated": (lambda: T.DINOv3ViTConfig(**SMALL, use_gated_mlp=True, hidden_act="silu", layerscale_value=0.5,
                                                       num_register_tokens=2, key_bias=True), IMAGENET,
                             lambda m, x: m(x).pooler_output, "matched"),
    # AIMv2: RMSNorm, a normed patch embedding, SwiGLU, no biases (or qkv_bias / mlp_bias); last_hidden_state
    "Aimv2VisionModel": (lambda: T.Aimv2VisionConfig(**SMALL, use_head=False), CLIP_NORM,
                         lambda m, x: m(x).last_hidden_state, "matched"),
    "Aimv2VisionModel+biases": (lambda: T.Aimv2VisionConfig(**SMALL, use_head=False, qkv_bias=True, mlp_bias=True,
                                                            hidden_act="gelu"), CLIP_NORM,
                                lambda m, x: m(x).last_hidden_state, "matched"),
    # what keras_vit lacks: refused by name with it
    "Aimv2VisionModel+head": (lambda: T.Aimv2VisionConfig(**SMALL), CLIP_NORM, lambda m, x: m(x).pooler_output,
                              "use_head=True: AIMv2's attention-pooling head"),
    "Aimv2Model": (lambda: T.Aimv2Config(vision_config=SMALL, text_config=dict(TEXT, eos_token_id=2), projection_dim=24),
                   CLIP_NORM, _image_features, "Aimv2Model's image embedding is visual_projection"),
}
# the classes whose transformers 5 keys lost 4.x's vision_model. prefix: their "4.x" row puts it back
BARE_IN_5 = ("CLIPVisionModel", "SiglipVisionModel", "Siglip2VisionModel", "MetaClip2VisionModel", "ChineseCLIPVisionModel",
             "AltCLIPVisionModel", "CLIPSegVisionModel")
# transformers 5's AltCLIPModel writes its vision layers as encoder.layer.N (its text tower's renaming undone on
# save); 4.x wrote encoder.layers.N: its "4.x" row renames them back
# (and its ViTMSNForImageClassification its layers without the vit. prefix: the Hub checkpoints' names)
RENAMED_IN_5 = {
    "AltCLIPModel": lambda key: re.sub(r"^vision_model\.encoder\.layer\.", "vision_model.encoder.layers.", key),
    "ViTMSNForImageClassification": lambda key: re.sub(r"^encoder\.", "vit.encoder.", key),
}
NEW_IN_5 = ("Tipsv2VisionModel", "Tipsv2VisionModel+swiglu", "Tipsv2Model")  # no 4.x release has the class


def _image_features_siglip2(model, inputs):
    out = model.get_image_features(**inputs)
    return out if torch.is_tensor(out) else out.pooler_output


def _redraw(model, seed):
    """Every parameter drawn again: 1 + N(0, 0.1) for norms' scales, N(0, 0.1) for biases, else N(0, 1 / fan_in)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.ndim == 1 and ("norm" in name and name.endswith("weight")):
                p.copy_(1.0 + 0.1 * noise)
            elif p.ndim == 1 and not name.endswith(("class_embedding", "logit_scale", "logit_bias")):
                p.copy_(0.1 * noise)
            elif p.ndim >= 2:
                p.copy_(noise / math.sqrt(max(p[0].numel(), 1)))
            else:
                p.copy_(0.3 * noise)


def _inputs(name, images, mean, std, patch):
    """What the torch model is given: the processor's normalisation; SigLIP2's patches flattened as (P, P, C)."""
    x = ((images / 255.0 - np.asarray(mean)) / np.asarray(std)).astype(np.float32)  # (B, H, W, C)
    if not name.startswith("Siglip2"):  # the other classes: (B, C, H, W)
        return torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
    b, h, w, c = x.shape
    patches = x.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    patches = patches.reshape(b, (h // patch) * (w // patch), patch * patch * c)
    return {"pixel_values": torch.from_numpy(patches.copy()),
            "pixel_attention_mask": torch.ones(b, patches.shape[1], dtype=torch.long),
            "spatial_shapes": torch.tensor([[h // patch, w // patch]] * b)}


def _write(name, folder, seed, images):
    """``save_pretrained`` of a tiny ``name`` with random weights; ``(expected output, folder)``."""
    make_config, (mean, std), output, _ = CASES[name]
    torch.manual_seed(seed)
    model = getattr(T, name.split("+")[0])(make_config()).eval()
    _redraw(model, seed)
    model.save_pretrained(folder)
    T.CLIPImageProcessor(image_mean=mean, image_std=std, do_resize=False, do_center_crop=False).save_pretrained(folder)
    with torch.no_grad():
        expected = output(model, _inputs(name, images, mean, std, SMALL["patch_size"])).numpy()
    return expected


def _reprefix(folder, out, rename=lambda key: f"vision_model.{key}"):
    """The 4.x layout of a transformers 5 folder: every key of a *VisionModel under ``vision_model.`` (or ``rename``d)."""
    os.makedirs(out, exist_ok=True)
    for file in os.listdir(folder):
        if file != "model.safetensors":
            with open(os.path.join(folder, file), "rb") as f, open(os.path.join(out, file), "wb") as g:
                g.write(f.read())
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    save_file({rename(k): v.contiguous() for k, v in tensors.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    return out


_KERAS = r"""
import json, sys, numpy as np, keras_vit
jobs = json.load(open(sys.argv[1]))
images = np.load(jobs["images"])
results = {}
for key, folder in jobs["folders"].items():
    try:
        model = keras_vit.from_pretrained(folder, classifier_activation=None)
        np.save(folder + "/keras.npy", np.asarray(model(images)))
        results[key] = {"ok": True, "notes": [n for n in model.load_report.notes if n.startswith("transformers layout")]}
    except Exception as e:  # the verdict is reported, not raised
        results[key] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
json.dump(results, open(jobs["results"], "w"))
print(keras_vit.__file__)
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keras-python", default="/work/main/.venv/bin/python")
    parser.add_argument("--keep", help="write the folders here (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="transformers_layouts_")
    os.makedirs(work, exist_ok=True)
    images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)
    np.save(os.path.join(work, "images.npy"), images)
    expected, folders = {}, {}
    for seed, name in enumerate(CASES):
        folder = os.path.join(work, name)
        expected[name] = _write(name, folder, seed, images)
        layout = "5.x" if name in BARE_IN_5 + tuple(RENAMED_IN_5) + NEW_IN_5 else "4.x = 5.x"
        folders[f"{name}|{layout}"] = folder
        if name in BARE_IN_5:
            folders[f"{name}|4.x"] = _reprefix(folder, folder + "_4x")
        if name in RENAMED_IN_5:
            folders[f"{name}|4.x"] = _reprefix(folder, folder + "_4x", RENAMED_IN_5[name])
    jobs = {"images": os.path.join(work, "images.npy"), "folders": folders, "results": os.path.join(work, "results.json")}
    with open(os.path.join(work, "jobs.json"), "w") as f:
        json.dump(jobs, f)
    run = subprocess.run([args.keras_python, "-c", _KERAS, os.path.join(work, "jobs.json")], cwd=ROOT,
                         capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"keras_vit's run failed:\n{run.stderr[-4000:]}")
    print(f"transformers {T.__version__}, torch {torch.__version__}; keras_vit from {run.stdout.split()[-1]}")
    results = json.load(open(jobs["results"]))
    failures = 0
    print(f"{'class':44s} {'layout':10s} verdict")
    for key, folder in folders.items():
        name, layout = key.split("|")
        want, result = CASES[name][3], results[key]
        if result["ok"]:
            got, ref = np.load(os.path.join(folder, "keras.npy")), expected[name]
            error = float(np.max(np.abs(got - ref) / (np.abs(ref) + np.abs(ref).max())))
            close = got.shape == ref.shape and np.allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
            verdict = f"matched (max error {error:.1e} of the largest, shape {got.shape})" if close else \
                f"WRONG OUTPUT (max error {error:.1e}, shapes {got.shape} / {ref.shape})"
            failures += not close or want != "matched"
            read = " ".join(result["notes"])
            verdict += "; read as keys without vision_model." if "without the 'vision_model.' prefix" in read else \
                "; read under vision_model." if "under 'vision_model.'" in read else ""
        else:
            refused = result["error"].startswith("CheckpointError") and want in result["error"]
            verdict = ("refused: " if refused else "FAILED: ") + result["error"]
            failures += not refused
        print(f"{name:44s} {layout:10s} {verdict}")
    if not args.keep:
        shutil.rmtree(work)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
