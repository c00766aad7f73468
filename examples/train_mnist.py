"""Train the main job with the Python API: a small conv-stem ViT on the offline MNIST subset.

Run:
    .venv/bin/python examples/train_mnist.py --output runs/example-mnist

Expect: the job of `make train` (`keras-vit train` runs the same keras_vit.train.job.run
with the same recipe, seed and step count): about 98 % test accuracy on the 1,000 held-out
images in a few minutes on 2 CPU cores (`make train`: 0.980 on a 2-core AMD EPYC Zen 5,
2026-11-28; README). With `--epochs 1`, a smoke run whose schedule is nearly all warmup,
it stays near chance (0.100 and 0.158 measured on two runs of that machine class). One line per epoch when the output goes to a file or a pipe; then the predicted
and true class names of ten test images, one per class, read back from model.keras.
"""

import argparse
import os

import numpy as np

import keras_vit
from keras_vit import saving
from keras_vit.train import data
from keras_vit.train import job


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/example-mnist")
    parser.add_argument("--epochs", type=int, default=None, help="default: the recipe's 30")
    args = parser.parse_args()

    config = job.TrainConfig(model="mnist", dataset="mnist", epochs=args.epochs, save_freq=10, output=args.output)
    metrics = job.run(config)  # also in <output>/metrics.json
    print(f"test accuracy {metrics['test_accuracy']:.4f} on {metrics['num_test_examples']} images")

    path = os.path.join(args.output, "model.keras")
    loaded, metadata = keras_vit.load_model(path), saving.read_metadata(path)
    dataset = data.load_mnist()
    images, labels = next(iter(data.make_pipeline(dataset.test.shard(100, 0), 28, 10)))  # one per class
    predicted = np.argmax(loaded.predict(images, verbose=0), axis=-1)
    print("predicted:", [metadata["class_names"][i] for i in predicted])
    print("true:     ", [dataset.class_names[i] for i in labels.numpy()])


if __name__ == "__main__":
    main()
