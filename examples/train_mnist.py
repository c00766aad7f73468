"""Train the main job with the Python API: a small conv-stem ViT on the offline MNIST subset.

Run:
    .venv/bin/python examples/train_mnist.py --output runs/example-mnist

Expect: the same recipe, seed and step count as `make train`, which measured 0.986 test
accuracy (0.980 and 0.978 with earlier code) on the 1,000 held-out images in 3 to 5
minutes on 2 CPU cores (README); this
script itself was only run for one epoch. Then the predicted and true class names of ten
test images, one per class.
"""

import argparse
import os

import numpy as np

import keras_vit
from keras_vit import saving
from keras_vit.train import data
from keras_vit.train import recipes
from keras_vit.train import training


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/example-mnist")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()

    model, dataset, recipe = recipes.mnist_job(seed=0)
    epochs = args.epochs or recipe["epochs"]
    batch = recipe["batch_size"]
    steps = dataset.num_train // batch
    train = data.make_pipeline(dataset.train, 28, batch, training=True, augment="digits",
                               num_classes=10, seed=0, repeat=True)
    test = data.make_pipeline(dataset.test, 28, 500, num_classes=10)

    warmup = min(recipe["warmup_epochs"] * steps, epochs * steps // 2)
    optimizer = keras_vit.build_optimizer(recipe["lr"], epochs * steps, warmup,
                                          weight_decay=recipe["weight_decay"])
    training.compile_model(model, optimizer, recipe["label_smoothing"], jit_compile=recipe["jit"])
    callbacks = training.make_callbacks(args.output, save_freq=10)
    keras_vit.fit_resumable(model, train, epochs, steps, callbacks=callbacks, verbose=2)

    result = model.evaluate(test, verbose=0, return_dict=True)
    print(f"test accuracy {result['accuracy']:.4f} on {dataset.num_test} images")
    saving.save_model(model, os.path.join(args.output, "model.keras"), metadata={"class_names": dataset.class_names})

    path = os.path.join(args.output, "model.keras")
    loaded, metadata = keras_vit.load_model(path), saving.read_metadata(path)
    images, labels = next(iter(data.make_pipeline(dataset.test.shard(100, 0), 28, 10)))  # one per class
    predicted = np.argmax(loaded.predict(images, verbose=0), axis=-1)
    print("predicted:", [metadata["class_names"][i] for i in predicted])
    print("true:     ", [dataset.class_names[i] for i in labels.numpy()])


if __name__ == "__main__":
    main()
