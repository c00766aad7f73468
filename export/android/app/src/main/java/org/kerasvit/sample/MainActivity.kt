package org.kerasvit.sample

import android.graphics.BitmapFactory
import android.os.Bundle
import android.widget.TextView
import androidx.appcompat.app.AppCompatActivity
import kotlin.concurrent.thread

/** Classifies `assets/sample.jpg` and shows the top-5 labels, their probabilities, the time and the accelerator. */
class MainActivity : AppCompatActivity() {
    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        val text = TextView(this).apply { setPadding(32, 32, 32, 32) }
        setContentView(text)
        thread {  // keep inference off the UI thread
            val result = ViTClassifier(this).use { classifier ->
                val bitmap = assets.open("sample.jpg").use { BitmapFactory.decodeStream(it) }
                val start = System.nanoTime()
                val top = classifier.classify(bitmap, k = 5)
                val ms = (System.nanoTime() - start) / 1e6
                top.joinToString("\n") { "%-24s %.3f".format(it.label, it.score) } +
                    "\n\n%.1f ms on %s".format(ms, classifier.accelerator)
            }
            runOnUiThread { text.text = result }
        }
    }
}
