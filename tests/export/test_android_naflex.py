"""The Android sample's NaFlex input (export/android/.../NaFlexInput.kt) mirrors keras_vit's rule line by line: its
constant, the grid rule's expressions (run here in Python as the Kotlin writes them, against the NumPy rule), the patch
layout (the Kotlin's index formulas against naflex_grid.patchify) and the order it writes the file's inputs in."""

import inspect
import math
import os
import re

import numpy as np

from keras_vit.layers import naflex_grid

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "export", "android", "app", "src", "main", "java", "org", "kerasvit", "sample")


def _kotlin(name):
    with open(os.path.join(SAMPLE, name), encoding="utf-8") as f:
        return f.read()


def _expression(text, pattern):
    match = re.search(pattern, text)
    assert match, f"not in the Kotlin: {pattern}"
    return match.group(1).strip()


def test_the_constant_and_the_search_mirror_the_python_rule():
    kotlin, python = _kotlin("NaFlexInput.kt"), inspect.getsource(naflex_grid.target_size)
    assert float(_expression(kotlin, r"const val SEARCH_EPS = ([0-9.e-]+)")) == naflex_grid.SEARCH_EPS
    pairs = [  # (the Python line, the Kotlin line): the same step of timm's search on each side
        ("lb, rb = eps / 10.0, 100.0", "var lb = eps / 10.0"), ("lb, rb = eps / 10.0, 100.0", "var rb = 100.0"),
        ("while (rb - lb) >= eps:", "while ((rb - lb) >= eps)"), ("mid = (lb + rb) / 2.0", "val mid = (lb + rb) / 2.0"),
        ("lb = mid", "lb = mid"), ("rb = mid", "rb = mid"), ("return prepare(ratio)", "return prepare(lb)"),
        ("return int(max(scaled_h, ph)), int(max(scaled_w, pw))", "return Pair(max(scaledH, ph), max(scaledW, pw))"),
    ]
    for py, kt in pairs:
        assert py in python and kt in kotlin, (py, kt)


def _kotlin_target_size(kotlin):
    """The Kotlin targetSize run in Python: its own expressions, evaluated as the Kotlin writes them."""
    scaled_h = _expression(kotlin, r"val scaledH = (.*?)\.toInt\(\)\n").replace(".toInt()", "")
    scaled_w = _expression(kotlin, r"val scaledW = (.*?)\.toInt\(\)\n").replace(".toInt()", "")
    fits = _expression(kotlin, r"return (\(tH / ph\) \* \(tW / pw\) <= maxPatches)")

    def size(h, w, ph, pw, max_patches, eps=1e-5):
        def prepare(ratio):
            env = {"ceil": math.ceil, "h": h, "w": w, "ph": ph, "pw": pw, "ratio": ratio}
            return max(eval(scaled_h, env), ph), max(eval(scaled_w, env), pw)

        def feasible(ratio):
            t_h, t_w = prepare(ratio)  # whole multiples of the patch: Kotlin's Int / Int is exact here
            return eval(fits.replace("/", "//"), {"tH": t_h, "tW": t_w, "ph": ph, "pw": pw, "maxPatches": max_patches})

        lb, rb = eps / 10.0, 100.0
        while (rb - lb) >= eps:
            mid = (lb + rb) / 2.0
            if feasible(mid):
                lb = mid
            else:
                rb = mid
        return prepare(lb)

    return size


def test_the_kotlin_rule_gives_the_python_sizes():
    size = _kotlin_target_size(_kotlin("NaFlexInput.kt"))
    rng = np.random.default_rng(0)
    for h, w, p, n in zip(rng.integers(1, 3000, 200), rng.integers(1, 3000, 200), rng.choice([14, 16], 200),
                          rng.integers(16, 1024, 200)):
        assert size(int(h), int(w), int(p), int(p), int(n)) == naflex_grid.target_size((int(h), int(w)), int(p), int(n))


def test_the_kotlin_patch_layout_is_naflex_grid_s():
    kotlin = _kotlin("NaFlexInput.kt")
    source = _expression(kotlin, r"val argb = pixels\[(.*)\]\n")
    target = _expression(kotlin, r"val at = (.*?)  //")
    order = [kotlin.index(s) for s in ("shr 16) and 0xFF).toFloat()      // R", "shr 8) and 0xFF).toFloat()   // G",
                                       "(argb and 0xFF).toFloat()           // B")]
    assert order == sorted(order)
    h, w, ph, pw, budget = 8, 12, 4, 4, 9
    image = np.random.default_rng(1).integers(0, 255, (h, w, 3))
    rows, cols, width = h // ph, w // pw, ph * pw * 3
    patches = np.zeros(budget * width)
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c
            for y in range(ph):
                for x in range(pw):
                    pixel = eval(source, {"r": r, "c": c, "y": y, "x": x, "ph": ph, "pw": pw, "w": w})
                    at = eval(target, {"n": n, "width": width, "y": y, "x": x, "pw": pw})
                    patches[at : at + 3] = image.reshape(-1, 3)[pixel]
    expected, coords, valid = naflex_grid.patchify(image.astype("float32"), (ph, pw), budget)
    np.testing.assert_allclose(patches.reshape(budget, width), expected, rtol=0, atol=1e-6)  # whole numbers, copied
    assert "val n = r * cols + c  // row-major" in kotlin and coords[:valid.sum()].tolist() == [
        [n // cols, n % cols] for n in range(rows * cols)]


def test_the_classifier_writes_the_inputs_in_the_file_s_order():
    kotlin = _kotlin("ViTClassifier.kt")
    written = re.findall(r"inputBuffers\[(\d)\]\.writeFloat\(input\.\w+\)\s+// (\w+)", kotlin)
    assert [name for _, name in sorted(written)] == list(naflex_grid.KEYS)  # the TFLite file's input order
