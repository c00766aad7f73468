"""Classify image files (or folders of them) with a .keras, SavedModel, .tflite or .onnx model.

A NaFlex model (any of its .keras, SavedModel and .tflite files) reads each image at its own aspect ratio under its
budget of patches (--max-patches).

Prints the top-k classes of each image with their probabilities, or JSON with
--json. A model that returns an embedding (no classification head, e.g. CLIP-like) has no classes:
its embedding's size and L2 norm are printed (the values with --json). A file that cannot be read is reported on stderr and the others are
still classified; the exit status is 1 if any file failed.
"""

import json
import sys

from keras_vit.domains import POSITIVE_INT

INPUT_RANGES = {"auto": None, "0-255": True, "-1-1": False}


def add_arguments(parser):
    from keras_vit.inference.options import PREDICT_DOMAINS

    parser.add_argument("model", help="a .keras file, a SavedModel folder, a .tflite file or an .onnx file")
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, ...) or folders of them")
    parser.add_argument("--top-k", type=PREDICT_DOMAINS["top_k"].argparse_type(), default=5, help="classes per image (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON document for scripts")
    parser.add_argument("--labels", help="text file of class names, one per line (default: stored with the model)")
    parser.add_argument("--batch-size", type=PREDICT_DOMAINS["batch_size"].argparse_type(), default=16, help="images per forward pass (default 16)")
    parser.add_argument(
        "--image-size",
        type=POSITIVE_INT.argparse_type(),
        nargs=2,
        metavar=("H", "W"),
        help="size to classify at, for a model of any size (default: its native size, or the size its SavedModel records)",
    )
    parser.add_argument(
        "--max-patches",
        type=PREDICT_DOMAINS["max_patches"].argparse_type(),
        metavar="N",
        help="a NaFlex model's budget of patches per image (a positive int): each image is resized at its own aspect "
        "ratio to at most N patches. Default: the model's own budget, else (a SavedModel) the one it was exported at, "
        "else its native grid's. A .tflite takes only the budget it was exported at; refused for a non-NaFlex model",
    )
    parser.add_argument(
        "--input-range",
        choices=sorted(INPUT_RANGES),
        default="auto",
        help="pixels the model takes: 0-255 (keras_vit default) or -1-1; auto asks a Keras model",
    )


def run(args):
    from keras_vit.inference.predictors import predict

    results = predict(
        args.model,
        args.images,
        top_k=args.top_k,
        labels=args.labels,
        batch_size=args.batch_size,
        include_preprocessing=INPUT_RANGES[args.input_range],
        image_size=args.image_size,
        max_patches=args.max_patches,
    )
    failed = [r for r in results if "error" in r]
    for result in failed:
        print(f"keras-vit predict: {result['path']}: {result['error']}", file=sys.stderr)
    if args.json:
        print(json.dumps({"model": str(args.model), "results": results}, indent=2))
    else:
        for result in results:
            if "error" in result:
                continue
            print(result["path"])
            if "embedding" in result:  # no classes to rank: what the model gives, said as such
                values = result["embedding"]
                norm = sum(v * v for v in values) ** 0.5
                print(f"  embedding of {len(values)} values, L2 norm {norm:.4f} (no classification head: no classes)")
                continue
            for p in result["predictions"]:
                print(f"  {p['probability']:.4f}  {p['label']}")
    return 1 if failed else 0
