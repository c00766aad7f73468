package org.kerasvit.sample

import android.content.Context
import android.graphics.Bitmap
import android.util.Log
import com.google.ai.edge.litert.Accelerator
import com.google.ai.edge.litert.CompiledModel

/**
 * Runs a ViT exported by `keras-vit export MODEL.keras --format tflite` with LiteRT's CompiledModel API:
 * on the GPU accelerator when the phone has one that takes the model, else on the CPU (XNNPACK).
 *
 * keras_vit's TFLite files are graphs the GPU delegate takes whole (no tensor of rank 5, no 5-D transpose,
 * only ops it parses, static shapes: the export prints "GPU delegate: all N ops"), so on the GPU nothing
 * falls back to the CPU in the middle of the graph.
 *
 * Input contract of every keras_vit TFLite export (float32, float16, dynamic and int8 alike):
 * one tensor `images`, float32, shape [1, H, W, 3] (NHWC, batch 1), RGB channel order, raw pixel
 * values in [0, 255] (NOT normalised: the model scales them itself). Output: float32
 * [1, classes], softmax probabilities. Labels: `labels.txt` (one per line, head order), written
 * beside the .tflite by the exporter (`MODEL.labels.txt`) and also zipped inside it.
 *
 * @param imageSize the export's H = W (`keras-vit info MODEL.keras`; 224 for the paper's models).
 */
class ViTClassifier(context: Context, modelAsset: String = "vit.tflite", labelsAsset: String = "labels.txt",
                    val imageSize: Int = 224, preferGpu: Boolean = true) : AutoCloseable {

    data class Prediction(val label: String, val index: Int, val score: Float)

    val labels: List<String> =
        context.assets.open(labelsAsset).bufferedReader().readLines().filter { it.isNotBlank() }
    /** The accelerator the model was compiled for: GPU, or CPU (XNNPACK) when the GPU one is missing or refuses it. */
    val accelerator: Accelerator
    private val model: CompiledModel

    init {
        var chosen = if (preferGpu) Accelerator.GPU else Accelerator.CPU
        model = try {
            CompiledModel.create(context.assets, modelAsset, CompiledModel.Options(chosen))
        } catch (error: Exception) {  // no GPU accelerator (litert-gpu), or a GPU driver that refuses the model
            if (chosen == Accelerator.CPU) throw error
            Log.w("ViTClassifier", "GPU accelerator unavailable, running on the CPU (XNNPACK): $error")
            chosen = Accelerator.CPU
            CompiledModel.create(context.assets, modelAsset, CompiledModel.Options(Accelerator.CPU))
        }
        accelerator = chosen
    }

    private val inputBuffers = model.createInputBuffers()
    private val outputBuffers = model.createOutputBuffers()

    /** Bitmap -> float32 NHWC RGB in [0, 255], resized bilinearly to H x W (what the SavedModel's bytes signature does). */
    fun toInput(bitmap: Bitmap): FloatArray {
        val scaled = if (bitmap.width == imageSize && bitmap.height == imageSize) bitmap
                     else Bitmap.createScaledBitmap(bitmap, imageSize, imageSize, true)
        val pixels = IntArray(imageSize * imageSize)
        scaled.getPixels(pixels, 0, imageSize, 0, 0, imageSize, imageSize)
        val input = FloatArray(3 * pixels.size)
        var i = 0
        for (argb in pixels) {  // row-major, so the array is [row][col][channel]
            input[i++] = ((argb shr 16) and 0xFF).toFloat()  // R
            input[i++] = ((argb shr 8) and 0xFF).toFloat()   // G
            input[i++] = (argb and 0xFF).toFloat()           // B
        }
        return input
    }

    /** The k most probable classes, best first. */
    fun classify(bitmap: Bitmap, k: Int = 5): List<Prediction> {
        inputBuffers[0].writeFloat(toInput(bitmap))
        model.run(inputBuffers, outputBuffers)
        val scores = outputBuffers[0].readFloat()
        require(scores.size == labels.size) { "labels.txt has ${labels.size} names, the model ${scores.size} classes" }
        return topK(scores, k)
    }

    /**
     * The k most probable classes of a NaFlex file (`--max-patches N` at export): the bitmap at its own aspect
     * ratio, resized by the grid rule and cut into patches (NaFlexInput), no crop. Its three inputs, in the file's
     * order: patches, patch_coord, patch_valid (NaFlexInput's contract).
     */
    fun classifyNaFlex(bitmap: Bitmap, patchSize: Int, maxPatches: Int, k: Int = 5): List<Prediction> {
        val input = NaFlexInput.fromBitmap(bitmap, patchSize, patchSize, maxPatches)
        inputBuffers[0].writeFloat(input.patches)  // patches
        inputBuffers[1].writeFloat(input.coords)   // patch_coord
        inputBuffers[2].writeFloat(input.valid)    // patch_valid
        model.run(inputBuffers, outputBuffers)
        val scores = outputBuffers[0].readFloat()
        require(scores.size == labels.size) { "labels.txt has ${labels.size} names, the model ${scores.size} classes" }
        return topK(scores, k)
    }

    fun topK(scores: FloatArray, k: Int): List<Prediction> =
        scores.indices.sortedByDescending { scores[it] }.take(k).map { Prediction(labels[it], it, scores[it]) }

    override fun close() {
        inputBuffers.forEach { it.close() }
        outputBuffers.forEach { it.close() }
        model.close()
    }
}
