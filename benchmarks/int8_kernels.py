"""One int8 TFLite file under each of LiteRT's kernel sets: how much of its agreement with Keras is the kernels'.

The same flatbuffer is run with the reference kernels (portable integer arithmetic, the computation the file
claims, the same on every CPU), the optimised builtin kernels and the XNNPACK delegate (the default; its
microkernels differ between AVX2, AVX-512 and VNNI CPUs). A quantization whose verdict moves between these is one
whose verdict moves between CPUs. Two tiny models, each trained on 3,000 offline digits: the paper ViT and a family
model (registers, MAP head, SiLU GLU, LayerScale), each exported in full int8 and with ``FRAGILE_OPS`` in float.

    python benchmarks/int8_kernels.py [--json out.json]

Prints, per model and file: top-1 agreement with Keras on 200 held-out digits, the median and largest per-image
error (max over classes of |p_tflite - p_keras|) under each kernel set, and the agreement on the images whose
Keras top-two margin is at least 0.5 (the images the export tests verify on).
"""

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = ("BUILTIN_REF", "BUILTIN_WITHOUT_DEFAULT_DELEGATES", "BUILTIN")  # reference, optimised, XNNPACK


def run(path, images, resolver):
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(model_path=path, experimental_op_resolver_type=getattr(litert.OpResolverType, resolver),
                            num_threads=1)
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    it.resize_tensor_input(inp["index"], [1, *images.shape[1:]])
    it.allocate_tensors()
    outputs = []
    for image in images:
        it.set_tensor(inp["index"], image[None].astype("float32"))
        it.invoke()
        outputs.append(it.get_tensor(out["index"])[0])
    return np.asarray(outputs, "float64")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "export")]
    import tempfile

    from export_helpers import family_model, real_images, trained_model  # the export tests' own models

    from keras_vit.export import tflite

    x, _ = real_images(200)
    calibration, _ = real_images(32, offset=3000, split="train")
    rows = []
    for name, model in (("vit", trained_model()), ("family", family_model())):
        expected = np.asarray(model.predict(x, verbose=0), "float64")
        top = np.sort(expected, -1)
        decided = top[:, -1] - top[:, -2] >= 0.5
        for kept in ((), tflite.FRAGILE_OPS):
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "m.tflite")
                with open(path, "wb") as f:
                    f.write(tflite.convert(model, "int8", calibration, batch_size=1, float_ops=kept))
                for kernels in KERNELS:
                    actual = run(path, x, kernels)
                    error = np.abs(actual - expected).max(-1)
                    agree = actual.argmax(-1) == expected.argmax(-1)
                    row = {"model": name, "float_ops": list(kept), "kernels": kernels,
                           "top1_agreement": float(agree.mean()), "median_error": float(np.median(error)),
                           "max_error": float(error.max()), "decided_images": int(decided.sum()),
                           "decided_agreement": float(agree[decided].mean())}
                    rows.append(row)
                    print(f"{name:7} float_ops={'FRAGILE' if kept else 'none':8} {kernels:34} "
                          f"top-1 {row['top1_agreement']:.3f}  decided {row['decided_agreement']:.3f} "
                          f"({row['decided_images']})  median err {row['median_error']:.3f}  max {row['max_error']:.3f}",
                          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
