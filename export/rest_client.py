#!/usr/bin/env python3
"""Send real images to TF Serving's REST API and print the top-k labels.

    python export/rest_client.py cat.jpg dog.png --server http://localhost:8501 --model vit

Needs only the Python standard library. The images go as file bytes in the
``{"b64": ...}`` form to the ``serving_bytes`` signature, which decodes,
resizes and preprocesses them inside the model; ``--pixels`` sends float
pixels to ``serving_default`` instead, read and resized by keras_vit's image
reader exactly as ``keras-vit predict`` reads them (EXIF orientation, 16-bit
and transparent images; needs keras_vit installed, and the model's input size
via ``--size``).
"""

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request


def build_request(paths, signature="serving_bytes", input_name="image_bytes"):
    """The ``:predict`` body for image files: one ``{"image_bytes": {"b64": ...}}`` instance each."""
    instances = []
    for path in paths:
        with open(path, "rb") as f:
            instances.append({input_name: {"b64": base64.b64encode(f.read()).decode("ascii")}})
    return {"signature_name": signature, "instances": instances}


def build_pixel_request(paths, size):
    """The ``serving_default`` body: float32 RGB pixels in [0, 255], resized to ``size`` (h, w) as predict does."""
    try:
        from keras_vit.inference.images import load_image
    except ImportError as error:
        raise ImportError(
            "--pixels reads the images with keras_vit's reader: pip install keras-vit, "
            "or send the files' bytes to serving_bytes (the default)"
        ) from error
    instances = [{"images": load_image(path, tuple(size)).tolist()} for path in paths]
    return {"signature_name": "serving_default", "instances": instances}


def predict(server, model, body, version=None, timeout=30):
    """POST to ``/v1/models/<model>[/versions/<v>]:predict``; returns ``(status, json)``."""
    url = f"{server.rstrip('/')}/v1/models/{model}" + (f"/versions/{version}" if version else "") + ":predict"
    data = json.dumps(body).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:  # TF Serving answers op errors with 400 + {"error": ...}
        body = error.read() or b"{}"
        try:
            return error.code, json.loads(body)
        except ValueError:  # a proxy's HTML page, not TF Serving's JSON
            return error.code, {"error": body.decode("utf-8", errors="replace").strip()[:500]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+")
    parser.add_argument("--server", default="http://localhost:8501")
    parser.add_argument("--model", default="vit")
    parser.add_argument("--version", type=int)
    parser.add_argument("--pixels", action="store_true", help="send pixels to serving_default")
    parser.add_argument("--size", type=int, nargs=2, default=(224, 224), metavar=("H", "W"))
    args = parser.parse_args(argv)
    try:
        body = build_pixel_request(args.images, args.size) if args.pixels else build_request(args.images)
    except (OSError, ValueError) as error:  # an image that cannot be read: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        status, answer = predict(args.server, args.model, body, args.version)
    except (urllib.error.URLError, OSError, ValueError) as error:  # refused, unreachable, timed out, not JSON
        reason = getattr(error, "reason", error)
        print(f"error: cannot reach {args.server} ({reason})", file=sys.stderr)
        return 1
    if status != 200:
        print(f"error {status}: {answer.get('error', answer)}", file=sys.stderr)
        return 1
    for path, prediction in zip(args.images, answer["predictions"]):
        print(f"{path}: {describe(prediction)}")
    return 0


def describe(prediction):
    """One instance's answer as a line: its top-k labels and scores, or an embedding model's vector (TF Serving
    answers a signature's only output unnamed)."""
    if isinstance(prediction, dict) and "top_k_labels" in prediction:
        return ", ".join(f"{label} {score:.3f}" for label, score in zip(prediction["top_k_labels"], prediction["top_k_scores"]))
    values = prediction.get("embedding", prediction) if isinstance(prediction, dict) else prediction
    shown = ", ".join(f"{value:.4f}" for value in values[:8])
    return f"embedding of {len(values)}: {shown}{', ...' if len(values) > 8 else ''}"


if __name__ == "__main__":
    sys.exit(main())
