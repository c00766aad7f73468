"""keras-hub presets both ways, checked against keras-hub itself (its own venv: `make peers`).

    python -m benchmarks.keras_hub_presets --peers-python .venv-peers/bin/python [--model B/16] [--out DIR]

* out: a keras_vit ViT (random weights, a random head) exported with ``export_model(model, "keras-hub", DIR)``
  is loaded by ``keras_hub.models.ImageClassifier.from_preset(DIR)`` and ``keras_hub.models.Backbone.from_preset``
  in the peers' Python; ``predict`` on the same [0, 255] images is compared with keras_vit's logits;
* in: keras-hub builds a ``ViTImageClassifier`` of the same size with its own preprocessor, saves it with
  ``save_to_preset`` and predicts; ``keras_vit.from_pretrained(DIR)`` loads that folder and is compared.

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


def _peer(args):
    """Run in the peers' Python: keras-hub's side of both directions."""
    import keras
    import keras_hub

    x = np.load(args.images)
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
    parser.add_argument("--peer", choices=("load", "save"), help=argparse.SUPPRESS)
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


if __name__ == "__main__":
    sys.exit(main())
