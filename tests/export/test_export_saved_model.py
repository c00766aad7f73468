"""SavedModel for TF Serving: signatures, fresh-process loading, REST b64 requests, atomic versions."""

import base64
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from export_helpers import LABELS, NUM_CLASSES, assert_decided, decided_images, real_images, trained_model
from keras_vit.export import ExportVerificationError, export_model, rest, saved_model, verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# a SavedModel runs the float32 graph Keras runs: the two differ by round-off only, and the export's own bar for
# it (verify.TOLERANCES) is this
ROUND_OFF = 1e-5


def _rest_client():
    spec = importlib.util.spec_from_file_location("rest_client", os.path.join(ROOT, "export", "rest_client.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model():
    return trained_model()


@pytest.fixture(scope="module")
def decided(model):
    """64 held-out digits the model decides by a margin (export_helpers.DECIDED_MARGIN): the top-1 classes the
    tests compare with Keras' are the export's to keep, not a near-tie's to flip on another CPU's rounding."""
    return decided_images(model, real_images()[0], 64)


@pytest.fixture(scope="module")
def exported(model, decided, tmp_path_factory):
    """The export the tests read: the next version after an older one being served (3), with warmup requests."""
    base = tmp_path_factory.mktemp("serving")
    (base / "tiny_digits" / "3").mkdir(parents=True)
    report = export_model(model, "saved_model", str(base), labels=LABELS, eval_data=decided, num_images=64)
    return base, report


def test_version_layout_and_report(exported):
    base, report = exported
    assert report.path == os.path.join(str(base), "tiny_digits", "4")  # the next free version
    assert sorted(os.listdir(base / "tiny_digits")) == ["3", "4"]  # no temporary folder left
    # top1_agreement is a count ratio (exact); on decided images a float32 export within ROUND_OFF keeps every class
    assert report.passed and report.max_abs_diff <= ROUND_OFF and report.top1_agreement == 1.0
    assert report.num_images == 64 and report.size_bytes > 0
    # serving_bytes: the one decoder (16-bit aware PNG, any other format) and the antialiased resize
    assert {"DecodeImage", "DecodePng", "ScaleAndTranslate", "TopKV2", "Softmax"} <= set(report.ops)
    assert open(os.path.join(report.path, "assets", "labels.txt")).read().split() == LABELS


def test_signatures_pinned(exported):
    _, report = exported
    loaded = tf.saved_model.load(report.path)
    assert set(loaded.signatures) == {"serving_default", "serving_bytes"}
    pixels = loaded.signatures["serving_default"]
    (spec,) = pixels.structured_input_signature[1].values()
    assert list(pixels.structured_input_signature[1]) == ["images"]
    assert (spec.dtype, spec.shape.as_list()) == (tf.float32, [None, 32, 32, 3])
    data = loaded.signatures["serving_bytes"]
    assert list(data.structured_input_signature[1]) == ["image_bytes"]
    (bspec,) = data.structured_input_signature[1].values()
    assert (bspec.dtype, bspec.shape.as_list()) == (tf.string, [None])
    expected = {
        "probabilities": (tf.float32, [None, NUM_CLASSES]),
        "top_k_ids": (tf.int32, [None, 5]),
        "top_k_labels": (tf.string, [None, 5]),
        "top_k_scores": (tf.float32, [None, 5]),
    }
    for fn in (pixels, data):
        got = {k: (v.dtype, v.shape.as_list()) for k, v in fn.structured_outputs.items()}
        assert got == expected


def test_outputs_match_keras_and_labels(model, decided, exported):
    _, report = exported
    x = decided[:8]
    out = tf.saved_model.load(report.path).signatures["serving_default"](images=tf.constant(x))
    keras_probs = np.asarray(model(x))
    np.testing.assert_allclose(out["probabilities"].numpy(), keras_probs, atol=ROUND_OFF)
    assert_decided(keras_probs, ROUND_OFF)
    ids = out["top_k_ids"].numpy()
    np.testing.assert_array_equal(ids[:, 0], keras_probs.argmax(-1))
    labels = out["top_k_labels"].numpy().astype(str)
    np.testing.assert_array_equal(labels, np.array(LABELS)[ids])
    np.testing.assert_allclose(out["top_k_scores"].numpy(), np.take_along_axis(keras_probs, ids, -1), atol=ROUND_OFF)


@pytest.fixture(scope="module")
def fresh_process(decided, exported, tmp_path_factory):
    """One new Python process (a TensorFlow start is ~5-8 s): it loads the export with keras_vit and Keras blocked
    and writes what it computed to answer.json, then runs TF Serving's saved_model_cli on the export as the
    ``saved_model_cli`` console script does (its stdout is the process's)."""
    _, report = exported
    folder = tmp_path_factory.mktemp("fresh")
    np.save(folder / "x.npy", decided[:4])
    png = tf.io.encode_png(tf.cast(tf.round(decided[0]), tf.uint8)).numpy()
    (folder / "digit.png").write_bytes(png)
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["keras_vit"] = None  # any import of keras_vit (or keras) now fails
        sys.modules["keras"] = None
        sys.path = [p for p in sys.path if p not in ("", {ROOT!r})]
        import numpy as np, tensorflow as tf
        loaded = tf.saved_model.load({report.path!r})
        x = np.load({str(folder / 'x.npy')!r})
        pixels = loaded.signatures["serving_default"](images=tf.constant(x))
        data = loaded.signatures["serving_bytes"](image_bytes=tf.constant([open({str(folder / 'digit.png')!r}, "rb").read()]))
        assert "keras_vit" not in [m for m in sys.modules if sys.modules[m] is not None]
        with open({str(folder / 'answer.json')!r}, "w") as f:
            json.dump({{"probabilities": pixels["probabilities"].numpy().tolist(),
                       "bytes_labels": data["top_k_labels"].numpy().astype(str).tolist()}}, f)
        del sys.modules["keras"], sys.modules["keras_vit"]  # the CLI runs as it would beside keras
        from tensorflow.python.tools.saved_model_cli import main  # what bin/saved_model_cli calls
        sys.argv = ["saved_model_cli", "show", "--dir", {report.path!r}, "--all"]
        sys.exit(main())
        """
    )
    env = dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(folder), env=env, timeout=300)
    answer = folder / "answer.json"
    return result, json.loads(answer.read_text()) if answer.exists() else None


def test_loads_in_fresh_process_without_keras_vit(model, decided, fresh_process):
    result, answer = fresh_process
    assert answer is not None, result.stderr[-3000:]
    keras_probs = np.asarray(model(decided[:4]))
    np.testing.assert_allclose(np.array(answer["probabilities"]), keras_probs, atol=ROUND_OFF)
    # decided[0] is already 32x32 RGB; the PNG holds it rounded to uint8, which Keras reads here too
    rounded = np.asarray(model(np.round(decided[:1])))
    assert_decided(rounded, ROUND_OFF)
    assert answer["bytes_labels"][0][0] == LABELS[int(rounded.argmax())]


def _encode(image, fmt):
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.asarray(image, dtype="uint8")).save(buffer, format=fmt)
    return buffer.getvalue()


def test_rest_b64_instances_request(model, decided, exported, tmp_path):
    _, report = exported
    x = decided
    png = tmp_path / "a.png"
    png.write_bytes(_encode(np.round(x[1]), "PNG"))
    big = tf.image.resize(x[2:3], (64, 48)).numpy()[0]  # another size: resized in the graph
    jpeg = tmp_path / "b.jpg"
    jpeg.write_bytes(_encode(np.round(np.clip(big, 0, 255)), "JPEG"))
    body = _rest_client().build_request([str(png), str(jpeg)])
    assert body["signature_name"] == "serving_bytes"
    assert set(body["instances"][0]["image_bytes"]) == {"b64"}
    body = json.loads(json.dumps(body))  # exactly what goes over the wire
    status, answer = rest.predict(tf.saved_model.load(report.path), body)
    assert status == 200, answer
    predictions = answer["predictions"]
    assert len(predictions) == 2
    # the reference: the one decoder and resize rule (what keras-vit predict reads), then the Keras model
    from keras_vit.inference import decoding

    files = [base64.b64decode(i["image_bytes"]["b64"]) for i in body["instances"]]
    pixels = np.stack([decoding.decode_and_resize(f, (32, 32)).numpy() for f in files])
    keras_probs = np.asarray(model(np.clip(pixels, 0, 255)))
    np.testing.assert_allclose([p["probabilities"] for p in predictions], keras_probs, atol=ROUND_OFF)
    assert_decided(keras_probs, ROUND_OFF)
    assert [p["top_k_labels"][0] for p in predictions] == [LABELS[i] for i in keras_probs.argmax(-1)]


def test_rest_client_pixels_are_the_predict_pixels(model, decided, exported, tmp_path):
    """--pixels reads files with keras_vit's reader: serving_default answers what keras_vit.predict says."""
    from PIL import Image

    import keras_vit
    from keras_vit.inference import images as image_io

    _, report = exported
    digit = tf.image.resize(decided[3:4], (40, 24)).numpy()[0]  # stored 24 wide x 40 high ...
    exif = Image.Exif()
    exif[0x0112] = 8  # ... and shown rotated 90 degrees counter-clockwise: 40 wide x 24 high
    path = tmp_path / "digit.jpg"
    Image.fromarray(np.round(np.clip(digit, 0, 255)).astype("uint8")).save(path, exif=exif, quality=95)
    body = json.loads(json.dumps(_rest_client().build_pixel_request([str(path)], (32, 32))))
    # exact: float32 pixels survive JSON (shortest repr round trip)
    sent = np.array(body["instances"][0]["images"], "float32")
    np.testing.assert_array_equal(sent, image_io.load_image(path, (32, 32)))
    status, answer = rest.predict(tf.saved_model.load(report.path), body)
    assert status == 200, answer
    (result,) = keras_vit.predict(model, str(path), top_k=NUM_CLASSES, labels=LABELS)
    want = np.zeros(NUM_CLASSES)
    for p in result["predictions"]:
        want[p["index"]] = p["probability"]
    np.testing.assert_allclose(answer["predictions"][0]["probabilities"], want, rtol=0, atol=ROUND_OFF)


def test_undecodable_bytes_is_an_error_response_not_a_crash(exported):
    _, report = exported
    loaded = tf.saved_model.load(report.path)
    fn = loaded.signatures["serving_bytes"]
    with pytest.raises(tf.errors.InvalidArgumentError):
        fn(image_bytes=tf.constant([b"this is not an image"]))
    bad = {"signature_name": "serving_bytes", "instances": [{"b64": base64.b64encode(b"\x89PNG garbage").decode()}]}
    status, answer = rest.predict(loaded, bad)
    assert status == 400 and "error" in answer and answer["error"]
    # the same loaded model keeps answering good requests
    good = tf.io.encode_png(tf.zeros((32, 32, 3), tf.uint8)).numpy()
    status, answer = rest.predict(loaded, {"signature_name": "serving_bytes", "instances": [{"b64": base64.b64encode(good).decode()}]})
    assert status == 200 and len(answer["predictions"]) == 1
    assert fn(image_bytes=tf.constant([good]))["probabilities"].shape == (1, NUM_CLASSES)


def test_existing_version_is_never_overwritten(model, exported):
    base, report = exported
    stamp = os.path.getmtime(os.path.join(report.path, "saved_model.pb"))
    with pytest.raises(FileExistsError, match=r"tiny_digits/4'.*never overwritten"):
        export_model(model, "saved_model", str(base), version=4, labels=LABELS, num_images=8)
    assert os.path.getmtime(os.path.join(report.path, "saved_model.pb")) == stamp
    assert sorted(os.listdir(base / "tiny_digits")) == ["3", "4"]


def test_an_output_that_is_a_file_is_refused_by_name(model, tmp_path):
    """Refused with the arguments' checks (saved_model.version_path), before the images are read and the model run."""
    (tmp_path / "afile").write_text("kept")
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "tiny_digits").write_text("kept")
    for output in (tmp_path / "afile", tmp_path / "base"):
        with pytest.raises(NotADirectoryError, match=r"'.*(afile|tiny_digits)' is a file"):
            export_model(model, "saved_model", str(output), labels=LABELS, num_images=8)
    assert (tmp_path / "afile").read_text() == (tmp_path / "base" / "tiny_digits").read_text() == "kept"


def test_warmup_requests_replay(exported):
    """The export's assets.extra/tf_serving_warmup_requests: one request per signature, which the SavedModel serves."""
    pytest.importorskip("tensorflow_serving.apis.prediction_log_pb2")
    from tensorflow_serving.apis import prediction_log_pb2

    _, report = exported
    records = list(tf.data.TFRecordDataset(os.path.join(report.path, "assets.extra", "tf_serving_warmup_requests")))
    logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in records]
    assert [log.predict_log.request.model_spec.signature_name for log in logs] == ["serving_default", "serving_bytes"]
    assert set(logs[1].predict_log.request.inputs) == {"image_bytes"}
    loaded = tf.saved_model.load(report.path)  # replay them as TF Serving's warmup does
    for log in logs:
        request = log.predict_log.request
        inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
        out = loaded.signatures[request.model_spec.signature_name](**inputs)
        assert out["probabilities"].shape == (1, NUM_CLASSES)


def test_grpc_client_request_is_served(model, decided, exported, tmp_path):
    pytest.importorskip("tensorflow_serving.apis.predict_pb2")
    spec = importlib.util.spec_from_file_location("grpc_client", os.path.join(ROOT, "export", "grpc_client.py"))
    grpc_client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(grpc_client)
    _, report = exported
    x = decided
    path = tmp_path / "a.png"
    path.write_bytes(_encode(np.round(x[3]), "PNG"))
    request = grpc_client.build_request([str(path)], "tiny_digits", version=4)
    assert (request.model_spec.name, request.model_spec.signature_name) == ("tiny_digits", "serving_bytes")
    assert request.model_spec.version.value == 4
    # what TF Serving does with it: the TensorProto becomes the signature's input
    tensor = tf.make_ndarray(request.inputs["image_bytes"])
    out = tf.saved_model.load(report.path).signatures["serving_bytes"](image_bytes=tf.constant(tensor))
    np.testing.assert_allclose(out["probabilities"].numpy(), np.asarray(model(np.round(x[3:4]))), atol=ROUND_OFF)


def test_failure_mid_export_leaves_no_version(model, decided, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(saved_model, "write_warmup", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export_model(model, "saved_model", str(tmp_path), name="m", eval_data=decided, num_images=8)
    assert not (tmp_path / "m").exists()  # neither the version nor the temporary folder, nor m/ itself


def test_failed_verification_leaves_no_version(model, decided, tmp_path, monkeypatch):
    report_path = tmp_path / "report.json"
    # a bar no export meets (an override must be >= 0: keras_vit.domains, so the table itself)
    monkeypatch.setitem(verify.TOLERANCES, ("saved_model", "float32"), {"max_abs_diff": -1.0})
    with pytest.raises(ExportVerificationError) as info:
        export_model(model, "saved_model", str(tmp_path), name="m", eval_data=decided, num_images=8,
                     report=str(report_path))
    assert not info.value.report.passed and info.value.report.path == str(tmp_path / "m" / "1")
    assert not (tmp_path / "m").exists()  # no empty <base>/<name>/ left
    assert json.loads(report_path.read_text())["passed"] is False
    with pytest.raises(ExportVerificationError):  # a base folder made for the export goes with it
        export_model(model, "saved_model", str(tmp_path / "new"), name="m", eval_data=decided, num_images=8)
    assert not (tmp_path / "new").exists()


def test_saved_model_cli_lists_signatures(fresh_process):
    result, _ = fresh_process
    assert result.returncode == 0, result.stderr[-2000:]
    for needle in ("signature_def['serving_default']", "signature_def['serving_bytes']", "inputs['images']",
                   "inputs['image_bytes']", "DT_STRING", "outputs['top_k_labels']", "shape: (-1, 32, 32, 3)"):
        assert needle in result.stdout


def test_logits_model_serves_probabilities(tmp_path):
    """A model without softmax (classifier_activation=None) still serves probabilities."""
    from helpers import tiny_vit

    model = tiny_vit(classifier_activation=None)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(0, 0.5, head.kernel.shape))
    x, _ = real_images(16)
    report = export_model(model, "saved_model", str(tmp_path), eval_data=x, warmup=False)
    out = tf.saved_model.load(report.path).signatures["serving_default"](images=tf.constant(x))
    np.testing.assert_allclose(out["probabilities"].numpy(), tf.nn.softmax(model(x)).numpy(), atol=ROUND_OFF)
    assert out["top_k_labels"].numpy()[0, 0].decode().startswith("class_")  # default names


def test_rest_client_over_http(decided, exported, tmp_path, capsys):
    """export/rest_client.py against an HTTP endpoint answering like TF Serving's REST API."""
    import http.server
    import threading

    _, report = exported
    loaded = tf.saved_model.load(report.path)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            assert self.path == "/v1/models/tiny_digits:predict"
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, answer = rest.predict(loaded, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)  # shutdown() waits a poll
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        good = tmp_path / "digit.png"
        good.write_bytes(_encode(np.round(decided[5]), "PNG"))
        bad = tmp_path / "broken.png"
        bad.write_bytes(b"not a png")
        client = _rest_client()
        assert client.main([str(good), "--server", url, "--model", "tiny_digits"]) == 0
        assert re.search(r"digit\.png: digit_\d \d\.\d{3}", capsys.readouterr().out)
        assert client.main([str(bad), "--server", url, "--model", "tiny_digits"]) == 1
        assert "error 400" in capsys.readouterr().err
        assert client.main([str(good), "--pixels", "--size", "32", "32", "--server", url, "--model", "tiny_digits"]) == 0
        assert "digit_" in capsys.readouterr().out
    finally:
        server.shutdown()
        server.server_close()


def test_each_export_traces_the_model_twice_and_the_decoder_once_per_process(monkeypatch, tmp_path):
    """Keras traced an endpoint given with its input signature once to list its variables and again inside
    tf.saved_model.save (another cache key), and serving_bytes traced the model and the decoder in each: 4 traces of
    the model and 2 of the decoder per export. The archive now traces serving_default once before Keras sees it
    (tf.saved_model.save traces it once more where it stores the function itself), serving_bytes calls that trace,
    and every export embeds the process's one trace of the decoder."""
    from helpers import tiny_vit
    from keras_vit.inference import decoding

    model = tiny_vit(num_classes=3)  # what the files serve is checked by the other tests of this module
    model_traces, decoder_traces = [], []
    outputs_of, decode = saved_model.signature_outputs, decoding.decode

    def counted_outputs(*args, **kwargs):
        outputs = outputs_of(*args, **kwargs)
        return lambda logits: model_traces.append(1) or outputs(logits)

    monkeypatch.setattr(saved_model, "signature_outputs", counted_outputs)
    monkeypatch.setattr(decoding, "decode", lambda data: decoder_traces.append(1) or decode(data))
    monkeypatch.setattr(decoding, "_TRACED", [])  # this process's trace, as if none had been made
    for version in (1, 2):
        saved_model.export_saved_model(model, tmp_path, "m", version=version, labels=["a", "b", "c"])
    assert (len(model_traces), len(decoder_traces)) == (4, 1)


def test_the_verification_reference_is_one_eager_call_for_one_batch_of_an_untraced_model(monkeypatch):
    """export.common.keras_reference: one batch of a model with no predict step is one eager call (the trace would
    cost more than the batch); more images, or a model traced already, go through model.predict; the same numbers."""
    import keras

    from helpers import images, tiny_vit
    from keras_vit.export.common import keras_reference

    model, x = tiny_vit(num_classes=3), images(5)
    predict, calls = keras.Model.predict, []
    monkeypatch.setattr(keras.Model, "predict", lambda self, *a, **k: calls.append(k["batch_size"]) or predict(self, *a, **k))
    eager = keras_reference(model, x)
    assert calls == [] and eager.shape == (5, 3)
    np.testing.assert_allclose(keras_reference(model, x, batch_size=2), eager, atol=ROUND_OFF)
    assert calls == [2]
    np.testing.assert_allclose(keras_reference(model, x[:1]), eager[:1], atol=ROUND_OFF)  # traced now: predict
    assert calls == [2, 32]
