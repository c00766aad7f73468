"""The deployment kit in export/: TF Serving config files parse and agree with the compose file and exporter."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KIT = os.path.join(ROOT, "export")

# fields of tensorflow_serving's BatchingParameters (session_bundle_config.proto)
BATCHING_FIELDS = {
    "max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads",
    "thread_pool_name", "allowed_batch_sizes", "pad_variable_length_inputs",
}


def _read(*parts):
    with open(os.path.join(KIT, *parts), encoding="utf-8") as f:
        return f.read()


def test_models_config_parses_as_model_server_config():
    pytest.importorskip("tensorflow_serving.config.model_server_config_pb2")
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse(_read("serving", "models.config"), model_server_config_pb2.ModelServerConfig())
    (model,) = config.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == ("vit", "/models/vit", "tensorflow")
    assert model.model_version_policy.latest.num_versions == 2


def test_batching_parameters_use_known_fields():
    fields = []
    for line in _read("serving", "batching_parameters.txt").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.match(r"(\w+)\s*(\{\s*value:\s*\d+\s*\}|:\s*(\d+|true|false))$", line)
            assert match, f"unparsable line: {line!r}"
            fields.append(match.group(1))
    assert set(fields) <= BATCHING_FIELDS
    assert "max_batch_size" in fields and "batch_timeout_micros" in fields


def test_compose_serves_the_config_on_the_exported_base_path():
    compose = _read("compose.yaml")
    assert "image: tensorflow/serving" in compose
    assert "${MODELS_DIR:-./models}:/models" in compose and "./serving:/config" in compose
    for flag in ("--model_config_file=/config/models.config", "--enable_batching=true",
                 "--batching_parameters_file=/config/batching_parameters.txt", "--enable_model_warmup=true"):
        assert flag in compose
    assert '"8500:8500"' in compose and '"8501:8501"' in compose
    assert os.path.isdir(os.path.join(KIT, "models"))


def test_android_sample_states_the_input_contract():
    kotlin = _read("android", "app", "src", "main", "java", "org", "kerasvit", "sample", "ViTClassifier.kt")
    # LiteRT's CompiledModel API on the GPU accelerator, with a CPU (XNNPACK) fallback
    assert "import com.google.ai.edge.litert.CompiledModel" in kotlin
    assert "CompiledModel.Options(chosen)" in kotlin and "CompiledModel.Options(Accelerator.CPU)" in kotlin
    assert kotlin.index("Accelerator.GPU") < kotlin.index("catch (error: Exception)")
    assert "[1, H, W, 3]" in kotlin and "[0, 255]" in kotlin and "RGB" in kotlin
    # R, G, B order from ARGB ints, as raw float values (no normalisation)
    order = [kotlin.index(s) for s in ("shr 16) and 0xFF).toFloat()  // R", "shr 8) and 0xFF).toFloat()   // G", "(argb and 0xFF).toFloat()           // B")]
    assert order == sorted(order)
    gradle = _read("android", "app", "build.gradle.kts")
    assert "com.google.ai.edge.litert:litert:" in gradle and "com.google.ai.edge.litert:litert-gpu:" in gradle
    readme = _read("README.md")
    for needle in ("float32", "NHWC", "RGB", "[0, 255]", "labels.txt", "--quantize float16", "--quantize dynamic",
                   "GPU delegate: all N ops"):
        assert needle in readme


def test_android_sample_reads_the_input_size_from_the_file(tmp_path):
    """The sample hard-coded IMAGE_SIZE = 224 (H = W), so the MNIST export the docs copy into it (28 x 28) and every
    rectangular export got a buffer of the wrong size; it reads [1, H, W, 3] of the file's input, named as the export
    names it."""
    from ai_edge_litert.interpreter import Interpreter

    from helpers import images, tiny_vit
    from keras_vit.export import export_model

    sources = ("android", "app", "src", "main", "java", "org", "kerasvit", "sample")
    kotlin = _read(*sources, "ViTClassifier.kt") + _read(*sources, "MainActivity.kt")
    assert "IMAGE_SIZE" not in kotlin and "imageSize" not in kotlin
    (name,) = re.findall(r'getInputTensorType\("(\w+)"\)', kotlin)
    assert "createScaledBitmap(bitmap, imageWidth, imageHeight, true)" in kotlin
    path = str(tmp_path / "vit.tflite")
    export_model(tiny_vit(image_size=(32, 48)), "tflite", path, eval_data=images(2, (32, 48)), num_images=2)
    (detail,) = Interpreter(path).get_input_details()
    assert (detail["name"], detail["shape"].tolist()) == (name, [1, 32, 48, 3])


def _android_assets():
    """The asset files the Android sample opens: ``assets.open("...")`` and the ``...Asset: String = "..."`` defaults."""
    sources = os.path.join(KIT, "android", "app", "src", "main", "java", "org", "kerasvit", "sample")
    names = set()
    for name in sorted(os.listdir(sources)):
        text = _read("android", "app", "src", "main", "java", "org", "kerasvit", "sample", name)
        names |= set(re.findall(r'assets\.open\("([^"]+)"\)', text))
        names |= set(re.findall(r'\w+Asset: String = "([^"]+)"', text))
    return names


@pytest.mark.parametrize("page", ["export/README.md", "docs/export-and-serving.md"])
def test_android_steps_put_every_asset_the_app_opens(page):
    assets = _android_assets()
    assert {"sample.jpg", "vit.tflite", "labels.txt"} <= assets  # the parser finds what the app reads
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    steps = text[text.index("`MainActivity.kt`"):]  # the steps follow the paragraph that names the app
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", steps, flags=re.S)[:1])
    missing = [name for name in sorted(assets) if f"export/android/app/src/main/assets/{name}" not in blocks]
    assert not missing, f"{page}: the Android steps never put {missing} where MainActivity/ViTClassifier open them"
