"""Print size, latency and agreement of every TFLite mode and ONNX for a trained model.

Each export is verified on real images against the Keras model (top-1
agreement, max abs difference, accuracy when the images have labels) and
timed for one image in its runtime (LiteRT/XNNPACK and onnxruntime with
--threads threads; --throughput-batch N adds images per second on a batch).
The int8 row is strict full int8; int8-selective keeps softmax, GELU and
LayerNorm's ops in float.
"""

import json


def add_arguments(parser):
    from keras_vit.export.options import REPORT_DOMAINS

    def typed(name):  # the argparse type of quantization_report's argument `name`, from its declared domain
        return REPORT_DOMAINS[name].argparse_type()

    parser.add_argument("model", help="the trained .keras file")
    parser.add_argument("--eval-data", help="folder of images (default: the held-out images of the data the model "
                        "records it was trained on, the MNIST subset with its labels; else MNIST digits, no accuracy)")
    parser.add_argument("--representative-data", help="folder of images to calibrate int8 on (default: the training "
                        "images of the data the model records it was trained on; else the int8 rows are refused)")
    parser.add_argument("--num-images", type=typed("num_images"), default=100, help="images to verify / calibrate on (default 100)")
    parser.add_argument("--threads", type=typed("num_threads"), default=2, help="LiteRT / onnxruntime threads (default 2)")
    parser.add_argument("--runs", type=typed("runs"), default=20, help="timed runs per latency, median reported")
    parser.add_argument("--workdir", help="keep the exports here (default: a temporary folder, removed after the report)")
    parser.add_argument("--no-onnx", action="store_true", help="leave out the ONNX row")
    parser.add_argument("--no-selective", action="store_true", help="leave out the int8-selective row")
    parser.add_argument("--saved-model", action="store_true", help="add a SavedModel row")
    parser.add_argument("--throughput-batch", type=typed("throughput_batch"), default=0, help="also time a batch of this many images")
    parser.add_argument("--json", help="also write the rows as JSON here")


def run(args):
    from keras_vit.export.quantization import format_table, quantization_report

    rows = quantization_report(
        args.model, eval_data=args.eval_data, representative_data=args.representative_data,
        num_images=args.num_images, include_onnx=not args.no_onnx, num_threads=args.threads,
        runs=args.runs, workdir=args.workdir, selective_int8=not args.no_selective,
        include_saved_model=args.saved_model, throughput_batch=args.throughput_batch,
    )
    print(format_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0
