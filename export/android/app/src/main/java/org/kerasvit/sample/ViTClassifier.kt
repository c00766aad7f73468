package org.kerasvit.sample

import android.content.Context
import android.graphics.Bitmap
import android.util.Log
import com.google.ai.edge.litert.Accelerator
import com.google.ai.edge.litert.CompiledModel
import com.google.ai.edge.litert.Model

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
 * The input's H and W are read from the file (its `images` tensor), so any export runs as it is: the paper's
 * 224 x 224, the MNIST sample's 28 x 28, a rectangle such as 32 x 48.
 */
class ViTClassifier(context: Context, modelAsset: String = "vit.tflite", labelsAsset: String = "labels.txt",
                    preferGpu: Boolean = true) : AutoCloseable {

    data class Prediction(val label: String, val index: Int, val score: Float)

    val labels: List<String> =
        context.assets.open(labelsAsset).bufferedReader().readLines().filter { it.isNotBlank() }
    private val inputShape: List<Int>? = imagesShape(context, modelAsset)
    /** The export's input height and width, read from the file's `images` tensor ([1, H, W, 3]); 0 for a NaFlex
     *  export, whose inputs are patches (classifyNaFlex). */
    val imageHeight: Int = inputShape?.get(1) ?: 0
    val imageWidth: Int = inputShape?.get(2) ?: 0
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

    /** Bitmap -> float32 NHWC RGB in [0, 255], the whole image resized bilinearly to H x W, no crop (as keras_vit's
     *  predict and serving_bytes, which also antialias when they shrink: a large photo's pixels differ a little). */
    fun toInput(bitmap: Bitmap): FloatArray {
        check(imageHeight > 0) { "the file has no input 'images' of shape [1, H, W, 3]: a NaFlex export takes patches (classifyNaFlex)" }
        val scaled = if (bitmap.width == imageWidth && bitmap.height == imageHeight) bitmap
                     else Bitmap.createScaledBitmap(bitmap, imageWidth, imageHeight, true)
        val pixels = IntArray(imageWidth * imageHeight)
        scaled.getPixels(pixels, 0, imageWidth, 0, 0, imageWidth, imageHeight)
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

    private companion object {
        /** [1, H, W, 3] of the file's `images` input, or null without one (a NaFlex export: patches, patch_coord, patch_valid). */
        fun imagesShape(context: Context, modelAsset: String): List<Int>? {
            val file = Model.load(context.assets, modelAsset)
            try {
                val dims = try {
                    file.getInputTensorType("images").layout?.dimensions?.toList()
                } catch (error: Exception) {  // no input of that name
                    null
                }
                require(dims == null || (dims.size == 4 && dims[0] == 1 && dims[3] == 3)) {
                    "$modelAsset: input 'images' has shape $dims; this sample classifies one image, [1, H, W, 3]: " +
                        "export with --batch-size 1 (the default)"
                }
                return dims
            } finally {
                file.close()
            }
        }
    }

    override fun close() {
        inputBuffers.forEach { it.close() }
        outputBuffers.forEach { it.close() }
        model.close()
    }
}
