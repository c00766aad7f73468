#!/usr/bin/env python3
"""Send real images to TF Serving over gRPC and print the top-k labels.

    pip install 'keras-vit[serving]'   # tensorflow-serving-api + grpcio
    python export/grpc_client.py cat.jpg dog.png --server localhost:8500 --model vit

The image files go as raw bytes (a DT_STRING tensor) to the ``serving_bytes``
signature, which decodes, resizes and preprocesses them in the graph.
"""

import argparse
import sys


def build_request(paths, model, signature="serving_bytes", version=None):
    """A ``PredictRequest`` carrying the files' bytes as input ``image_bytes``."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version:
        request.model_spec.version.value = int(version)
    contents = []
    for path in paths:
        with open(path, "rb") as f:
            contents.append(f.read())
    request.inputs["image_bytes"].CopyFrom(tf.make_tensor_proto(contents, dtype=tf.string))
    return request


def predict(server, request, timeout=30.0):
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    with grpc.insecure_channel(server) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return stub.Predict(request, timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+")
    parser.add_argument("--server", default="localhost:8500")
    parser.add_argument("--model", default="vit")
    parser.add_argument("--version", type=int)
    args = parser.parse_args(argv)
    import grpc
    import tensorflow as tf

    try:
        request = build_request(args.images, args.model, version=args.version)
    except OSError as error:  # a missing or unreadable image: one line, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        response = predict(args.server, request)
    except grpc.RpcError as error:  # UNAVAILABLE when no server answers, INVALID_ARGUMENT for bytes that are not an image
        print(f"error {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    for path, line in zip(args.images, describe(response.outputs)):
        print(f"{path}: {line}")
    return 0


def describe(outputs):
    """One line per image of a ``PredictResponse``'s outputs: the top-k labels and scores, or an embedding model's
    vector (its only output, ``embedding``)."""
    import tensorflow as tf

    if "top_k_labels" not in outputs:
        vectors = tf.make_ndarray(outputs["embedding"])
        return [f"embedding of {len(v)}: " + ", ".join(f"{x:.4f}" for x in v[:8]) + (", ..." if len(v) > 8 else "")
                for v in vectors]
    labels = tf.make_ndarray(outputs["top_k_labels"])
    scores = tf.make_ndarray(outputs["top_k_scores"])
    return [", ".join(f"{l.decode()} {s:.3f}" for l, s in zip(row_labels, row_scores)) for row_labels, row_scores in zip(labels, scores)]


if __name__ == "__main__":
    sys.exit(main())
