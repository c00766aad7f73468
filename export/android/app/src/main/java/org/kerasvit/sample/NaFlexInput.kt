package org.kerasvit.sample

import android.graphics.Bitmap
import kotlin.math.ceil
import kotlin.math.max

/**
 * The input of a NaFlex TFLite file (`keras-vit export NAFLEX.keras --format tflite --max-patches N`): one image at
 * its own aspect ratio (no crop), resized by NaFlex's grid rule under a budget of N patches and cut into patches.
 *
 * Line by line the rule of keras_vit/layers/naflex_grid.py (timm's get_image_size_for_seq; tests/export/
 * test_android_naflex.py checks the two agree): a binary search over the scale r in [eps / 10, 100] until the
 * interval is narrower than eps, r feasible when ceil(h r / ph) * ceil(w r / pw) <= N.
 *
 * Input contract of a keras_vit NaFlex TFLite file (batch 1, all float32): `patches` [1, N, ph * pw * 3], each
 * patch's pixels row by row, RGB fastest, raw values in [0, 255]; `patch_coord` [1, N, 2], (row, col) of each
 * patch as whole numbers; `patch_valid` [1, N], 1 for the image's patches, 0 for the padding (zero patches at
 * (0, 0)) after them. Output: float32 [1, classes], softmax probabilities.
 */
object NaFlexInput {
    const val SEARCH_EPS = 1e-5  // timm's get_image_size_for_seq default

    class Patches(val patches: FloatArray, val coords: FloatArray, val valid: FloatArray, val rows: Int, val cols: Int)

    /** (height, width) in pixels an image of h x w is resized to under the budget: naflex_grid.target_size. */
    fun targetSize(h: Int, w: Int, ph: Int, pw: Int, maxPatches: Int, eps: Double = SEARCH_EPS): Pair<Int, Int> {
        fun prepare(ratio: Double): Pair<Int, Int> {  // timm's prepare_target_hw with divisible_by_patch=True
            val scaledH = ph * ceil(h * ratio / ph).toInt()
            val scaledW = pw * ceil(w * ratio / pw).toInt()
            return Pair(max(scaledH, ph), max(scaledW, pw))
        }

        fun feasible(ratio: Double): Boolean {
            val (tH, tW) = prepare(ratio)
            return (tH / ph) * (tW / pw) <= maxPatches
        }

        var lb = eps / 10.0
        var rb = 100.0
        while ((rb - lb) >= eps) {
            val mid = (lb + rb) / 2.0
            if (feasible(mid)) {
                lb = mid
            } else {
                rb = mid
            }
        }
        require(lb > eps && lb < 100.0) { "No scale fits a ${h}x$w image into $maxPatches patches of ${ph}x$pw" }
        return prepare(lb)
    }

    /** A bitmap resized by the rule (bilinear, as Bitmap.createScaledBitmap filters) and cut: naflex_grid.patchify. */
    fun fromBitmap(bitmap: Bitmap, ph: Int, pw: Int, maxPatches: Int): Patches {
        val (tH, tW) = targetSize(bitmap.height, bitmap.width, ph, pw, maxPatches)
        val scaled = if (bitmap.width == tW && bitmap.height == tH) bitmap
                     else Bitmap.createScaledBitmap(bitmap, tW, tH, true)
        val pixels = IntArray(tW * tH)
        scaled.getPixels(pixels, 0, tW, 0, 0, tW, tH)
        return patchify(pixels, tH, tW, ph, pw, maxPatches)
    }

    /** ARGB pixels (row-major, h x w, sides divisible by the patch) as the padded patches, coordinates and mask. */
    fun patchify(pixels: IntArray, h: Int, w: Int, ph: Int, pw: Int, maxPatches: Int): Patches {
        val rows = h / ph
        val cols = w / pw
        require(rows * cols <= maxPatches) { "$rows x $cols patches are more than max_patches=$maxPatches" }
        val width = ph * pw * 3
        val patches = FloatArray(maxPatches * width)  // zeros past the image's patches
        val coords = FloatArray(maxPatches * 2)       // (0, 0) past them
        val valid = FloatArray(maxPatches)            // 0 past them
        for (r in 0 until rows) {
            for (c in 0 until cols) {
                val n = r * cols + c  // row-major, as naflex_grid.patchify
                coords[2 * n] = r.toFloat()
                coords[2 * n + 1] = c.toFloat()
                valid[n] = 1f
                for (y in 0 until ph) {
                    for (x in 0 until pw) {
                        val argb = pixels[(r * ph + y) * w + (c * pw + x)]
                        val at = n * width + (y * pw + x) * 3  // (ph, pw, 3) flattened, the channel fastest
                        patches[at] = ((argb shr 16) and 0xFF).toFloat()      // R
                        patches[at + 1] = ((argb shr 8) and 0xFF).toFloat()   // G
                        patches[at + 2] = (argb and 0xFF).toFloat()           // B
                    }
                }
            }
        }
        return Patches(patches, coords, valid, rows, cols)
    }
}
