"""The verification report every export ends with.

An exported model is run in its target runtime on real images and compared
with the Keras model: the largest absolute difference of the outputs and the
share of images whose top-1 class agrees. A SavedModel is run through both
signatures: ``serving_bytes`` on the images encoded as files
(:func:`check_serving_bytes`), against Keras on the pixels the one decoder
gives for those files. Float exports are held to an
absolute tolerance, quantized ones to a top-1 agreement floor
(:data:`TOLERANCES`); an export outside its tolerance raises
:class:`~keras_vit.export.errors.ExportVerificationError` carrying the report.
"""

import dataclasses
import json
import os

import numpy as np

from keras_vit.export.options import TOLERANCE_DOMAINS
from keras_vit.inference import decoding
from keras_vit.saving import atomic_write

# (format, quantize) -> bars; both keys may be present
TOLERANCES = {
    ("saved_model", "float32"): {"max_abs_diff": 1e-5},
    ("keras-hub", "float32"): {"max_abs_diff": 1e-5},  # the preset read back by keras_vit: the same computation
    ("onnx", "float32"): {"max_abs_diff": 1e-4},
    ("tflite", "float32"): {"max_abs_diff": 1e-4},
    ("tflite", "float16"): {"max_abs_diff": 1e-2},
    ("tflite", "dynamic"): {"top1_agreement": 0.95},
    ("tflite", "int8"): {"top1_agreement": 0.90},
}




def tolerance_for(fmt, quantize, *, max_abs_diff=None, min_top1_agreement=None):
    """The default bars for an export, with optional overrides (each checked against :data:`TOLERANCE_DOMAINS`).

    Example:
    >>> tolerance_for("tflite", "int8", min_top1_agreement=0.8)
    {'top1_agreement': 0.8}
    >>> tolerance_for("tflite", "int8", min_top1_agreement=1.01)
    Traceback (most recent call last):
    ...
    ValueError: `min_top1_agreement` must be in [0, 1]. Received: min_top1_agreement=1.01
    """
    max_abs_diff = TOLERANCE_DOMAINS["max_abs_diff"].check(max_abs_diff, "max_abs_diff")
    min_top1_agreement = TOLERANCE_DOMAINS["min_top1_agreement"].check(min_top1_agreement, "min_top1_agreement")
    bars = dict(TOLERANCES[(fmt, quantize)])
    if max_abs_diff is not None:
        bars["max_abs_diff"] = max_abs_diff
    if min_top1_agreement is not None:
        bars["top1_agreement"] = min_top1_agreement
    return bars


@dataclasses.dataclass
class VerificationReport:
    """What an export produced and how closely it matches the Keras model.

    Attributes:
        format: ``"saved_model"``, ``"tflite"`` or ``"onnx"``.
        quantize: the TFLite mode (``"float32"`` for the other formats).
        path: the exported file or version folder.
        size_bytes: its size on disk (every file of a SavedModel).
        max_abs_diff: largest absolute output difference vs Keras.
        top1_agreement: share of images with the same top-1 class as Keras.
        ops: sorted op names of the exported graph.
        num_images: how many real images were compared.
        tolerance: the bars applied (``max_abs_diff`` and/or ``top1_agreement``).
        passed: whether every bar was met.
        runtime: what ran the export (``tensorflow``, ``ai_edge_litert``, ``onnxruntime``).
        details: format-specific facts (signatures, float ops kept, labels...).
        eval_images: how many images the export was verified on and where they came from
            (:func:`keras_vit.export.data.eval_images`: the given ones, the model's own, or MNIST, said so).
        calibration_images: the same for the int8 calibration images (None: not calibrated).
    """

    format: str
    quantize: str
    path: str
    size_bytes: int
    max_abs_diff: float
    top1_agreement: float
    ops: list
    num_images: int
    tolerance: dict
    passed: bool
    runtime: str
    details: dict = dataclasses.field(default_factory=dict)
    eval_images: str = ""
    calibration_images: str = None

    def to_dict(self):
        return dataclasses.asdict(self)

    def write_json(self, path):
        """Write the report as JSON, atomically (a killed export leaves the old report or none)."""

        def write(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(self.to_dict(), f, indent=2, sort_keys=True, default=str)
                f.write("\n")

        atomic_write(os.fspath(path), write)

    def summary(self):
        bars = ", ".join(
            f"{k} {'<=' if k == 'max_abs_diff' else '>='} {v:g}" for k, v in sorted(self.tolerance.items())
        )
        lines = [
            f"{self.format} ({self.quantize}) -> {self.path}",
            f"  runtime        {self.runtime}",
            f"  size           {self.size_bytes:,} bytes",
            f"  verified on    {self.eval_images or f'{self.num_images} images'}",
            *([f"  calibrated on  {self.calibration_images}"] if self.calibration_images else []),
            f"  max abs diff   {self.max_abs_diff:.3g}",
            f"  top-1 agree    {self.top1_agreement:.2%}" if self.details.get("output") != "embedding" else
            f"  argmax agree   {self.top1_agreement:.2%} (an embedding has no classes: its bar is the max abs diff)",
            f"  tolerance      {bars}: {'PASSED' if self.passed else 'FAILED'}",
            f"  ops ({len(self.ops)})       {', '.join(self.ops)}",
        ]
        for key, value in sorted(self.details.items()):
            if key == "gpu_delegate":  # TFLite: "GPU delegate: all N ops", or what it leaves to the CPU
                lines.append(f"  {value}")
            elif key != "labels":
                lines.append(f"  {key:14} {value}")
        return "\n".join(lines)


def compare(expected, actual):
    """``(max_abs_diff, top1_agreement)`` of two ``(N, classes)`` output arrays.

    Example:
    >>> compare([[0.9, 0.1], [0.2, 0.8]], [[0.8, 0.2], [0.6, 0.4]])  # the second image's top-1 class differs
    (0.4, 0.5)
    """
    expected = np.asarray(expected, dtype="float64")
    actual = np.asarray(actual, dtype="float64")
    if expected.shape != actual.shape:
        raise ValueError(f"Output shapes differ: Keras {expected.shape}, export {actual.shape}")
    if not np.all(np.isfinite(actual)):
        return float("inf"), float(np.mean(expected.argmax(-1) == np.nan_to_num(actual).argmax(-1)))
    return float(np.max(np.abs(expected - actual))), float(np.mean(expected.argmax(-1) == actual.argmax(-1)))


def encode_images(images, jpeg_count=1):
    """The verification images as the files a client sends: PNG each, and the first ``jpeg_count`` as JPEG too (RGB)."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    pixels = np.clip(np.round(np.asarray(images, dtype="float32")), 0, 255).astype("uint8")
    files = [tf.io.encode_png(p).numpy() for p in pixels]
    return files + [tf.io.encode_jpeg(p, quality=90).numpy() for p in pixels[:jpeg_count]]


def check_serving_bytes(run_bytes, reference, images, image_size, tolerance, batch_size=32):
    """``serving_bytes`` against Keras on the same files: a dict for the report's details, with ``passed``.

    Args:
        run_bytes: ``run_bytes(list of bytes) -> (n, classes)`` probabilities (the loaded signature).
        reference: ``reference(pixels) -> (n, classes)`` probabilities (the Keras model).
        images: the verification images, float32 ``(n, H, W, 3)``; sent as PNG files, and the first as JPEG.
        image_size: ``(H, W)`` the signature resizes to.
        tolerance: the bars, as :func:`bytes_verdict` applies them.
    """
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    files = encode_images(images)
    # the pixels keras-vit predict reads from these files: the one decoder and resize rule
    pixels = np.stack([decoding.eager("decode_and_resize")(tf.constant(f), tuple(image_size)).numpy() for f in files])
    expected = reference(pixels)
    actual = np.concatenate([run_bytes(files[i : i + batch_size]) for i in range(0, len(files), batch_size)])
    return {"files": f"{len(files) - 1} PNG, 1 JPEG", **bytes_verdict(expected, actual, tolerance)}


def bytes_verdict(expected, actual, tolerance):
    """A signature fed files against Keras on the same pixels: ``max_abs_diff`` within its bar, and the same top-1
    class on every image Keras decides (top two more than twice the bar apart: outputs within the bar cannot swap
    them); a near-tied image's class is the CPU's rounding, counted in ``near_tied``, not judged.

    Example:
    >>> bytes_verdict([[0.5, 0.5 - 1e-6], [0.9, 0.1]], [[0.5 - 1e-6, 0.5], [0.9, 0.1]], {"max_abs_diff": 1e-5})
    {'max_abs_diff': 1e-06, 'top1_agreement': 0.5, 'near_tied': 1, 'passed': True}
    """
    max_abs_diff, agreement = compare(expected, actual)
    bar = tolerance.get("max_abs_diff", float("inf"))
    top = np.sort(np.asarray(expected, "float64"), axis=-1)
    decided = top[:, -1] - top[:, -2] > 2 * bar if np.isfinite(bar) else np.ones(len(top), bool)
    flipped = decided & (np.argmax(expected, -1) != np.argmax(np.nan_to_num(actual), -1))
    return {"max_abs_diff": max_abs_diff, "top1_agreement": agreement, "near_tied": int(np.sum(~decided)),
            "passed": bool(not flipped.any() and max_abs_diff <= bar)}


def make_report(fmt, quantize, path, *, size_bytes, ops, expected, actual, tolerance, runtime, details=None):
    """Compare outputs, apply the bars, and return a :class:`VerificationReport`."""
    max_abs_diff, agreement = compare(expected, actual)
    passed = max_abs_diff <= tolerance.get("max_abs_diff", float("inf")) and agreement >= tolerance.get(
        "top1_agreement", 0.0
    )
    report = VerificationReport(
        format=fmt,
        quantize=quantize,
        path=str(path),
        size_bytes=int(size_bytes),
        max_abs_diff=max_abs_diff,
        top1_agreement=agreement,
        ops=sorted(set(ops)),
        num_images=len(expected),
        tolerance=dict(tolerance),
        passed=bool(passed),
        runtime=runtime,
        details=dict(details or {}),
    )
    report.outputs = np.asarray(actual)  # not a field: kept out of the JSON
    return report
