"""keras-hub presets both ways, checked against keras-hub itself (its own venv: `make peers`).

    python -m benchmarks.keras_hub_presets --peers-python .venv-peers/bin/python [--model B/16] [--out DIR]

* out: a keras_vit ViT (random weights, a random head) exported with ``export_model(model, "keras-hub", DIR)``
  is loaded by ``keras_hub.models.ImageClassifier.from_preset(DIR)`` and ``keras_hub.models.Backbone.from_preset``
  in the peers' Python; ``predict`` on the same [0, 255] images is compared with keras_vit's logits;
* in: keras-hub builds a ``ViTImageClassifier`` of the same size with its own preprocessor, saves it with
  ``save_to_preset`` and predicts; ``keras_vit.from_pretrained(DIR)`` loads that folder and is compared.

With ``--family``: keras-hub builds a ``DINOV2Backbone`` (plain; registers + SwiGLU with its position table
resampled to ``image_shape``; registers with the antialiased resampling), a ``DINOV3Backbone`` (as its published
presets: 4 registers, no key bias, GELU; the "plus" form: gated SiLU MLP, LayerScale 1e-5; and one without
registers, mask token or any bias, ``rope_theta=1000``, epsilon 1e-6), a ``SigLIPBackbone``, a ``CLIPBackbone``, a
``DeiTBackbone`` and a ``DeiTImageClassifier`` (epsilon 1e-12; its head is left out) of the ``--family-width``
with random weights and an ImageNet converter, saves each with ``save_to_preset`` and computes its output (DINOv2's
and DINOv3's tokens, the towers' ``get_vision_embeddings``, the mean of DeiT's class and distillation tokens) on
the same images; ``keras_vit.from_pretrained`` loads each folder and is compared (relative to the output's scale).

Prints one JSON line per direction (max |difference| of the logits, the bar 5e-5) and exits 1 if one misses it.
keras-hub is imported only in the peer process (``--peer``), never in keras_vit's.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

BAR = 5e-5


FAMILY = ("dinov2", "dinov2_registers_swiglu_resampled", "dinov2_registers_antialias", "dinov3", "dinov3_plus_gated",
          "dinov3_no_biases_registers", "siglip", "clip", "deit", "deit_classifier")
TOKENS = ("dinov2", "dinov3")  # backbones whose output is every token: compared whole (keras_vit's pooling=None)


def _family_peer(args, x):
    """keras-hub's side of ``--family``: every family backbone saved as a preset, with its output on ``x``."""
    import keras
    import keras_hub
    from keras_hub.src.models.clip.clip_text_encoder import CLIPTextEncoder
    from keras_hub.src.models.clip.clip_vision_encoder import CLIPVisionEncoder
    from keras_hub.src.models.siglip.siglip_text_encoder import SigLIPTextEncoder
    from keras_hub.src.models.siglip.siglip_vision_encoder import SigLIPVisionEncoder

    spec = json.loads(args.spec)
    size, width, layers, heads = spec["size"], spec["width"], spec["layers"], spec["heads"]
    sizes = dict(num_layers=layers, hidden_dim=width, num_heads=heads, intermediate_dim=4 * width)
    text = dict(vocabulary_size=64, embedding_dim=width, hidden_dim=width, num_layers=1, num_heads=heads, intermediate_dim=4 * width,
                max_sequence_length=8)
    dino = dict(patch_size=14, image_shape=(size, size, 3), **sizes)
    makers = {
        "dinov2": lambda: keras_hub.models.DINOV2Backbone(position_embedding_shape=(size, size, 3), **dino),
        "dinov2_registers_swiglu_resampled": lambda: keras_hub.models.DINOV2Backbone(
            num_register_tokens=4, use_swiglu_ffn=True, layer_scale_init_value=0.1, position_embedding_shape=(518, 518, 3), **dino),
        "dinov2_registers_antialias": lambda: keras_hub.models.DINOV2Backbone(
            num_register_tokens=4, antialias_in_interpolation=True, position_embedding_shape=(518, 518, 3), **dino),
        "dinov3": lambda: keras_hub.models.DINOV3Backbone(  # as convert_dinov3.py makes the published presets
            patch_size=16, image_shape=(size, size, 3), num_register_tokens=4, use_key_bias=False, **sizes),
        "dinov3_plus_gated": lambda: keras_hub.models.DINOV3Backbone(
            patch_size=16, image_shape=(size, size, 3), num_register_tokens=4, use_key_bias=False, use_gated_mlp=True,
            hidden_activation="silu", layer_scale_init_value=1e-5, **sizes),
        "dinov3_no_biases_registers": lambda: keras_hub.models.DINOV3Backbone(
            patch_size=16, image_shape=(size, size, 3), num_register_tokens=0, use_mask_token=False, use_query_bias=False,
            use_key_bias=False, use_value_bias=False, use_proj_bias=False, use_mlp_bias=False, rope_theta=1000.0,
            layer_norm_eps=1e-6, **sizes),
        "siglip": lambda: keras_hub.models.SigLIPBackbone(
            SigLIPVisionEncoder(patch_size=16, image_shape=(size, size, 3), **sizes), SigLIPTextEncoder(**text)),
        "clip": lambda: keras_hub.models.CLIPBackbone(
            CLIPVisionEncoder(patch_size=16, image_shape=(size, size, 3), **sizes), CLIPTextEncoder(**text), projection_dim=64),
        "deit": lambda: keras_hub.models.DeiTBackbone(patch_size=16, image_shape=(size, size, 3), **sizes),
        "deit_classifier": lambda: keras_hub.models.DeiTImageClassifier(  # saved with task.json: its head is left out
            keras_hub.models.DeiTBackbone(patch_size=16, image_shape=(size, size, 3), layer_norm_epsilon=1e-12, **sizes), num_classes=10),
    }
    converters = {"dinov2": keras_hub.layers.DINOV2ImageConverter, "dinov3": keras_hub.layers.DINOV3ImageConverter, "siglip": keras_hub.layers.SigLIPImageConverter,
                  "clip": keras_hub.layers.CLIPImageConverter, "deit": keras_hub.layers.DeiTImageConverter}
    std, mean = [0.229, 0.224, 0.225], [0.485, 0.456, 0.406]
    rng = np.random.default_rng(0)
    for name in FAMILY:
        keras.utils.set_random_seed(0)
        backbone = makers[name]()
        for weight in backbone.weights:  # random everywhere (keras-hub initialises some at zero or one)
            if "position_ids" not in weight.path and not weight.dtype.startswith("int"):
                weight.assign((rng.normal(0, 0.1, weight.shape) + (1.0 if weight.path.endswith("gamma") else 0.0)).astype("float32"))
        folder = os.path.join(args.dir, name)
        backbone.save_to_preset(folder)
        converter = converters[name.split("_")[0]](image_size=(size, size), scale=[1 / (255 * s) for s in std],
                                                   offset=[-m / s for m, s in zip(mean, std)])
        converter.save_to_preset(folder)
        loaded = keras_hub.models.Backbone.from_preset(folder)  # what from_preset computes (DINOv2 resamples on load)
        y = np.asarray(converter(x))
        if name.startswith("deit"):  # every token after the final norm: keras_vit's DeiT gives the mean of the first two
            out = np.asarray(loaded(y))[:, :2].mean(axis=1)
        else:
            inputs = {"dinov2": {"images": y}, "dinov3": {"pixel_values": y}}.get(name.split("_")[0])
            out = loaded(inputs) if inputs is not None else loaded.get_vision_embeddings(y)
        np.save(os.path.join(args.dir, name + ".npy"), np.asarray(out))
    print(json.dumps({"keras_hub": keras_hub.__version__}))


def _peer(args):
    """Run in the peers' Python: keras-hub's side of both directions."""
    import keras
    import keras_hub

    x = np.load(args.images)
    if args.peer == "family":
        return _family_peer(args, x)
    if args.peer == "load":
        task = keras_hub.models.ImageClassifier.from_preset(args.dir)
        backbone = keras_hub.models.Backbone.from_preset(args.dir)
        np.save(args.result, task.predict(x, batch_size=4, verbose=0))
        print(json.dumps({"keras_hub": keras_hub.__version__, "task": type(task).__name__, "backbone": type(backbone).__name__,
                          "backbone_output": list(backbone.output_shape)}))
        return
    spec = json.loads(args.spec)
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.ViTBackbone(image_shape=(spec["size"], spec["size"], 3), patch_size=spec["patch"],
                                            num_layers=spec["layers"], num_heads=spec["heads"], hidden_dim=spec["width"],
                                            mlp_dim=spec["mlp"])
    std, mean = [0.229, 0.224, 0.225], [0.485, 0.456, 0.406]
    converter = keras_hub.layers.ViTImageConverter(image_size=(spec["size"], spec["size"]), scale=[1 / (255 * s) for s in std],
                                                   offset=[-m / s for m, s in zip(mean, std)])
    preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter)
    task = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=10, preprocessor=preprocessor)
    task.save_to_preset(args.dir)
    np.save(args.result, task.predict(x, batch_size=4, verbose=0))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-python", default=".venv-peers/bin/python")
    parser.add_argument("--model", default="B/16", help="a keras_vit variant (default B/16)")
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--out", help="keep the presets here (default: a temporary folder)")
    parser.add_argument("--family", action="store_true", help="keras-hub's DINOv2, DINOv3, SigLIP, CLIP and DeiT presets -> keras_vit")
    parser.add_argument("--family-width", type=int, default=384, help="width of --family's models (default 384, 6 heads, 4 layers)")
    parser.add_argument("--peer", choices=("load", "save", "family"), help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.peer:
        args.images = args.result + ".images.npy"
        return _peer(args)

    import keras_vit
    from keras_vit.architecture.variants import VARIANTS

    work = args.out or tempfile.mkdtemp(prefix="keras-hub-presets-")
    os.makedirs(work, exist_ok=True)
    if args.family:
        return _family(args, work)
    c = VARIANTS[args.model.split("/")[0]]
    size, patch = 224, int(args.model.split("/")[1])
    x = np.random.default_rng(0).uniform(0, 255, (args.images, size, size, 3)).astype("float32")
    failed = False

    def peer(mode, folder, result, spec=None):
        np.save(result + ".images.npy", x)
        command = [args.peers_python, "-m", "benchmarks.keras_hub_presets", "--peer", mode, "--dir", folder, "--result", result]
        done = subprocess.run(command + (["--spec", json.dumps(spec)] if spec else []), capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=os.getcwd()))
        if done.returncode:
            raise SystemExit(f"keras-hub ({mode}) failed:\n{done.stderr[-3000:]}")
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""

    # out: keras_vit -> keras-hub
    model = keras_vit.ViT(image_size=size, patch_size=patch, hidden_size=c["hidden_size"], num_layers=c["num_layers"],
                          num_heads=c["num_heads"], mlp_dim=c["mlp_dim"], num_classes=10, classifier_activation=None)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        if weight.path.startswith(("head/", "patch_encoder/class_token")) or weight.path.endswith("bias"):
            weight.assign(rng.normal(0, 0.02, weight.shape).astype("float32"))
    folder = os.path.join(work, "from_keras_vit")
    keras_vit.export_model(model, "keras-hub", folder)
    ours = np.asarray(model.predict(x, batch_size=4, verbose=0))
    info = peer("load", folder, os.path.join(work, "keras_hub_logits.npy"))
    theirs = np.load(os.path.join(work, "keras_hub_logits.npy"))
    diff = float(np.max(np.abs(ours - theirs)))
    failed |= not diff <= BAR
    print(json.dumps({"direction": "keras_vit -> keras-hub", "model": args.model, "preset": folder, "max_abs_diff": diff,
                      "bar": BAR, "top1_agreement": float(np.mean(ours.argmax(-1) == theirs.argmax(-1))), "peer": info}))

    # in: keras-hub -> keras_vit
    folder = os.path.join(work, "from_keras_hub")
    spec = {"size": size, "patch": patch, "layers": c["num_layers"], "heads": c["num_heads"], "width": c["hidden_size"], "mlp": c["mlp_dim"]}
    peer("save", folder, os.path.join(work, "keras_hub_saved_logits.npy"), spec)
    theirs = np.load(os.path.join(work, "keras_hub_saved_logits.npy"))
    loaded = keras_vit.from_pretrained(folder, classifier_activation=None)
    ours = np.asarray(loaded.predict(x, batch_size=4, verbose=0))
    diff = float(np.max(np.abs(ours - theirs)))
    failed |= not diff <= BAR
    print(json.dumps({"direction": "keras-hub -> keras_vit", "model": args.model, "preset": folder, "max_abs_diff": diff,
                      "bar": BAR, "top1_agreement": float(np.mean(ours.argmax(-1) == theirs.argmax(-1)))}))
    return 1 if failed else 0


def _family(args, work):
    """keras-hub's family presets -> keras_vit: one JSON line each, max |difference| relative to the output's scale."""
    import keras_vit

    size = 224
    x = np.random.default_rng(0).uniform(0, 255, (args.images, size, size, 3)).astype("float32")
    np.save(os.path.join(work, "family.npy.images.npy"), x)
    spec = {"size": size, "width": args.family_width, "layers": 4, "heads": args.family_width // 64}
    command = [args.peers_python, "-m", "benchmarks.keras_hub_presets", "--peer", "family", "--dir", work,
               "--result", os.path.join(work, "family.npy"), "--spec", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=os.getcwd()))
    if done.returncode:
        raise SystemExit(f"keras-hub (family) failed:\n{done.stderr[-3000:]}")
    failed = False
    for name in FAMILY:
        theirs = np.load(os.path.join(work, name + ".npy"))
        model = keras_vit.from_pretrained(os.path.join(work, name), **({"pooling": None} if name.startswith(TOKENS) else {}))
        ours = np.asarray(model.predict(x, batch_size=4, verbose=0))
        diff = float(np.max(np.abs(ours - theirs)))
        relative = diff / float(np.max(np.abs(theirs)))
        failed |= not relative <= BAR
        print(json.dumps({"direction": "keras-hub -> keras_vit", "preset": name, "architecture": model.load_report.format,
                          "output": list(ours.shape), "max_abs_diff": diff, "max_relative_diff": relative, "bar": BAR,
                          "position_resampling": model.vit_config.position_resampling, "rope": model.vit_config.rope,
                          "peer": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
