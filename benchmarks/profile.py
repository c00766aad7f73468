"""Where the time goes: TensorFlow's profiler over a keras_vit model, op time summed by op type.

    python -m benchmarks.profile --model B/16 --batch-size 8 --precision bfloat16
    python -m benchmarks.profile --model S/16 --batch-size 16 --precision bfloat16 --train --match Gelu

Inference is ``tf.function(model(x, training=False))``; ``--train`` profiles
``train_on_batch`` with AdamW (global-norm clipping) and cross-entropy, as the
benchmark's training rows. ``--match S`` also sums every op whose name contains
``S`` (forward and gradient ops of a layer or an activation). The figures quoted
in docs/performance.md come from this script.
"""

import argparse
import collections
import glob
import os
import tempfile

import numpy as np

from benchmarks import tf_setup


def op_times(fn, calls, match=None):
    """``({op type: ms per call}, {op type: count per call}, ms per call of ops matching ``match``)``."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    folder = tempfile.mkdtemp(prefix="keras-vit-profile-")
    tf.profiler.experimental.start(folder)
    for _ in range(calls):
        fn()
    tf.profiler.experimental.stop()
    (path,) = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals, counts, matched = collections.Counter(), collections.Counter(), 0.0
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            if line.name == "python":
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name  # "scope/op_name:OpType"
                if ":" not in name or "::" in name:
                    continue  # executor and thread-pool events, not ops
                ms = event.duration_ps / 1e9 / calls
                totals[name.rsplit(":", 1)[1]] += ms
                counts[name.rsplit(":", 1)[1]] += 1 / calls
                if match and match.lower() in name.lower():
                    matched += ms
    return totals, counts, matched


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="B/16", help="a paper variant (B/16, S/16, ...) or main")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--precision", default="float32", choices=tuple(tf_setup.PRECISION_POLICIES))
    p.add_argument("--train", action="store_true", help="profile a training step instead of inference")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--match", help="also sum the ops whose name contains this string (any case)")
    args = p.parse_args(argv)

    try:
        tf = tf_setup.tensorflow({"threads": args.threads})
    except RuntimeError:  # TensorFlow already running in this process: its thread counts stay as they are
        import tensorflow as tf
    import keras

    tf_setup.set_precision(args.precision)
    model = tf_setup.build_model(args.model)
    x = tf_setup.images(model, args.batch_size)
    if args.train:
        model.compile(
            optimizer=keras.optimizers.AdamW(1e-4, weight_decay=0.05, global_clipnorm=1.0),
            loss=keras.losses.SparseCategoricalCrossentropy(),
        )
        y = np.arange(args.batch_size) % model.output_shape[-1]

        def step():
            model.train_on_batch(x, y)
    else:
        fn = tf.function(lambda images: model(images, training=False))
        xt = tf.constant(x)

        def step():
            np.asarray(fn(xt))

    for _ in range(2):
        step()  # trace and warm up
    totals, counts, matched = op_times(step, args.calls, args.match)
    whole = sum(totals.values())
    kind = "training step" if args.train else "inference"
    print(f"{args.model} {kind}, batch {args.batch_size}, {args.precision}: {whole:.1f} ms of op time per call")
    for op, ms in totals.most_common(args.top):
        print(f"  {op:32s} {ms:9.1f} ms {100 * ms / whole:5.1f} %  x{counts[op]:.0f}")
    if args.match:
        print(f"  ops named *{args.match}*: {matched:.1f} ms {100 * matched / whole:5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
