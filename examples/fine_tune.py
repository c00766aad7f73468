"""Fine-tune an original ViT checkpoint (Section 3.2 of the paper) on a new dataset.

Run (with a preset tag, downloaded once into the Keras cache, or the path of an original
Google .npz such as ViT-B_16.npz; and a dataset that TFDS has already prepared in
--data-dir, or an image folder):
    .venv/bin/python examples/fine_tune.py imagenet21k --dataset tfds:cifar10 --image-size 384

Expect: the checkpoint's load report first -- every tensor loaded, the position
embeddings resized from the 14x14 grid of pre-training to 24x24, the 21k-class head
skipped (the new 10-class head starts at zero) -- then SGD with momentum 0.9, warmup +
cosine, global-norm clipping at 1, layer-wise learning-rate decay 0.75, and the test
accuracy in <output>/metrics.json. No figure is quoted here: none has been measured yet.

The same run from the command line:
    keras-vit train --model B/16 --weights imagenet21k --dataset tfds:cifar10 \\
        --image-size 384 --layer-decay 0.75 --output runs/finetune
"""

import argparse
import sys

from keras_vit import cli


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", help="a preset tag (imagenet21k, augreg_in21k, ...) or an original ViT .npz")
    parser.add_argument("--model", default="B/16", help="the checkpoint's variant (B/16, L/16, R50+B/16, ...)")
    parser.add_argument("--dataset", default="tfds:cifar10")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--image-size", default="384")
    parser.add_argument("--epochs", default="5")
    parser.add_argument("--output", default="runs/finetune")
    args = parser.parse_args()
    argv = ["train", "--model", args.model, "--weights", args.weights, "--dataset", args.dataset,
            "--image-size", args.image_size, "--epochs", args.epochs, "--layer-decay", "0.75",
            "--output", args.output]
    if args.data_dir:
        argv += ["--data-dir", args.data_dir]
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
