package org.kerasvit.sample

import android.content.Context
import android.graphics.Bitmap
import org.tensorflow.lite.Interpreter
import java.io.FileInputStream
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.MappedByteBuffer
import java.nio.channels.FileChannel

/**
 * Runs a ViT exported by `keras-vit export MODEL.keras --format tflite` with the LiteRT Interpreter.
 *
 * Input contract of every keras_vit TFLite export (float32, float16, dynamic and int8 alike):
 * one tensor `images`, float32, shape [1, H, W, 3] (NHWC, batch 1), RGB channel order, raw pixel
 * values in [0, 255] (NOT normalised: the model scales to [-1, 1] itself). Output: float32
 * [1, classes], softmax probabilities. Labels: `labels.txt` (one per line, head order), written
 * beside the .tflite by the exporter and also zipped inside it.
 */
class ViTClassifier(context: Context, modelAsset: String = "vit.tflite", labelsAsset: String = "labels.txt",
                    numThreads: Int = 2) : AutoCloseable {

    data class Prediction(val label: String, val index: Int, val score: Float)

    private val interpreter: Interpreter
    val labels: List<String>
    val height: Int
    val width: Int
    private val numClasses: Int
    private val input: ByteBuffer

    init {
        interpreter = Interpreter(loadModel(context, modelAsset), Interpreter.Options().setNumThreads(numThreads))
        val shape = interpreter.getInputTensor(0).shape()  // [1, H, W, 3]
        require(shape.size == 4 && shape[0] == 1 && shape[3] == 3) { "Expected input [1, H, W, 3], got ${shape.contentToString()}" }
        height = shape[1]
        width = shape[2]
        numClasses = interpreter.getOutputTensor(0).shape()[1]
        labels = context.assets.open(labelsAsset).bufferedReader().readLines().filter { it.isNotBlank() }
        require(labels.size == numClasses) { "labels.txt has ${labels.size} names, the model $numClasses classes" }
        input = ByteBuffer.allocateDirect(4 * height * width * 3).order(ByteOrder.nativeOrder())
    }

    private fun loadModel(context: Context, asset: String): MappedByteBuffer {
        context.assets.openFd(asset).use { fd ->
            FileInputStream(fd.fileDescriptor).channel.use { channel ->
                return channel.map(FileChannel.MapMode.READ_ONLY, fd.startOffset, fd.declaredLength)
            }
        }
    }

    /** Bitmap -> float32 NHWC RGB in [0, 255], resized bilinearly to the model's H x W (what the SavedModel's bytes signature does). */
    fun toInputBuffer(bitmap: Bitmap): ByteBuffer {
        val scaled = if (bitmap.width == width && bitmap.height == height) bitmap
                     else Bitmap.createScaledBitmap(bitmap, width, height, true)
        val pixels = IntArray(width * height)
        scaled.getPixels(pixels, 0, width, 0, 0, width, height)
        input.rewind()
        for (argb in pixels) {  // row-major, so the buffer is [row][col][channel]
            input.putFloat(((argb shr 16) and 0xFF).toFloat())  // R
            input.putFloat(((argb shr 8) and 0xFF).toFloat())   // G
            input.putFloat((argb and 0xFF).toFloat())           // B
        }
        input.rewind()
        return input
    }

    /** The k most probable classes, best first. */
    fun classify(bitmap: Bitmap, k: Int = 5): List<Prediction> {
        val output = Array(1) { FloatArray(numClasses) }
        interpreter.run(toInputBuffer(bitmap), output)
        return topK(output[0], k)
    }

    fun topK(scores: FloatArray, k: Int): List<Prediction> =
        scores.indices.sortedByDescending { scores[it] }.take(k).map { Prediction(labels[it], it, scores[it]) }

    override fun close() = interpreter.close()
}
