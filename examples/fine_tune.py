"""Fine-tune an original ViT checkpoint (Section 3.2 of the paper) on a new dataset.

Run (with a preset tag, downloaded once into the Keras cache, or the path of an original
Google .npz such as ViT-B_16.npz; and a dataset that TFDS has already prepared in
--data-dir, e.g. by keras_vit.load_tfds("cifar10", data_dir=..., download=True), or an image folder):
    .venv/bin/python examples/fine_tune.py imagenet21k --dataset tfds:cifar10 --data-dir ~/tensorflow_datasets \\
        --image-size 384

The run: the paper's fine-tuning recipe (SGD with momentum 0.9, warmup + cosine, global-norm
clipping at 1) with layer-wise learning-rate decay 0.75, and a new head that starts at zero.

Expect: the checkpoint's load report first -- "Loaded ... tensors", the position embeddings
"resized ...pos_embedding: (1, 197, 768) -> (1, 577, 768)" (the class token and the 14x14 grid
of pre-training, then 24x24), the 21k-class head "skipped ... new head zero-initialised" --
then the epochs, the command's JSON line, and last the run read back from <output>/metrics.json:
    fine-tuned B/16: optimizer sgd, learning rate 0.01, layer decay 0.75, 5 epochs; test accuracy ...
No accuracy figure is quoted here: none has been measured yet.

The same run from the command line:
    keras-vit train --model B/16 --weights imagenet21k --dataset tfds:cifar10 \\
        --image-size 384 --layer-decay 0.75 --output runs/finetune
"""

import argparse
import json
import os
import sys

from keras_vit import cli


def summary(output):
    """The run in one line, read back from ``output``/metrics.json."""
    path = os.path.join(output, "metrics.json")
    with open(path, encoding="utf-8") as file:
        m = json.load(file)
    return (f"fine-tuned {m['model']}: optimizer {m['optimizer']}, learning rate {m['learning_rate']:g}, "
            f"layer decay {m['layer_decay']}, {m['epochs']} epochs; test accuracy {m['test_accuracy']:.4f} "
            f"on {m['num_test_examples']} images ({path})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", help="a preset tag (imagenet21k, augreg_in21k, ...) or an original ViT .npz")
    parser.add_argument("--model", default="B/16", help="the checkpoint's variant (B/16, L/16, R50+B/16, ...)")
    parser.add_argument("--dataset", default="tfds:cifar10")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--image-size", default="384")
    parser.add_argument("--epochs", default="5")
    parser.add_argument("--output", default="runs/finetune")
    args = parser.parse_args(argv)
    command = ["train", "--model", args.model, "--weights", args.weights, "--dataset", args.dataset,
               "--image-size", args.image_size, "--epochs", args.epochs, "--layer-decay", "0.75",
               "--output", args.output]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    code = cli.main(command)
    if code == 0:
        print(summary(args.output))
    return code


if __name__ == "__main__":
    sys.exit(main())
