"""Serving, inference and export under bad input and faults .

Each test failed on the code before its fix.
"""

import base64
import importlib.util
import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import tensorflow as tf

import keras
from helpers import TINY, images, tiny_vit

import keras_vit
from keras_vit import cli, saving
from keras_vit.export import rest, saved_model, tflite
from keras_vit.inference import images as image_io
from keras_vit.inference import tflite_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZE = TINY["image_size"]
LABELS = ["ant", "bee", "cat", "dog", "eel"]
# one float32 model run by Keras, a traced graph or its SavedModel: round-off only (the SavedModel export's own bar,
# keras_vit.export.verify.TOLERANCES); TFLite's float32 kernels (XNNPACK) sum in another order (its bar)
ROUND_OFF = 1e-5
RUNTIME_ATOL = 1e-4


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    model = tiny_vit(num_classes=len(LABELS))
    head = model.get_layer("head")  # a random head, so that outputs differ from image to image
    head.kernel.assign(np.random.default_rng(0).normal(0, 1.0, head.kernel.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def served(model, tmp_path_factory):
    base = tmp_path_factory.mktemp("serving")
    path, _ = saved_model.export_saved_model(model, str(base), name="vit", labels=LABELS)
    return tf.saved_model.load(path)


@pytest.fixture(scope="module")
def tflite_path(model, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tflite") / "vit.tflite")
    tflite.write(tflite.convert(model), path, LABELS)
    return path


# --- 1: wrong-sized images are errors in every format --------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 64, 64, 3), (1, 224, 224, 3), (2, 16, 16, 3), (2, SIZE, SIZE, 1)])
def test_saved_model_rejects_wrong_sized_images(served, shape):
    fn = served.signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError) as info:  # was: 8 rows for 2 images of 64x64
        fn(images=tf.zeros(shape))
    received = "[" + ",".join(map(str, shape)) + "]"
    assert received in info.value.message and f"[?,{SIZE},{SIZE},3]" in info.value.message


def test_rest_wrong_size_is_a_400_and_the_server_keeps_serving(served):
    status, answer = rest.predict(served, {"instances": np.zeros((2, 64, 64, 3)).tolist()})
    assert status == 400 and "[2,64,64,3]" in answer["error"] and f"[?,{SIZE},{SIZE},3]" in answer["error"]
    status, answer = rest.predict(served, {"instances": images(2).tolist()})
    assert status == 200 and len(answer["predictions"]) == 2


def test_graph_traced_for_one_size_fails_on_another(model):
    # the depth of the fix: Patches names the batch in its reshapes, so no caller's graph regroups pixels
    fn = tf.function(lambda x: model(x, training=False)).get_concrete_function(
        tf.TensorSpec((None, SIZE, SIZE, 3), tf.float32)
    )
    np.testing.assert_allclose(fn(tf.constant(images(2))).numpy(), model.predict_on_batch(images(2)), atol=ROUND_OFF)
    with pytest.raises(tf.errors.InvalidArgumentError, match="(?i)reshape"):
        fn(tf.zeros((2, 2 * SIZE, 2 * SIZE, 3)))  # was: 8 rows


def test_keras_model_rejects_wrong_size(model):
    with pytest.raises(ValueError, match=rf"expected shape=\(None, {SIZE}, {SIZE}, 3\), found shape=\(2, 64, 64, 3\)"):
        model(np.zeros((2, 64, 64, 3), "float32"))
    model.predict_on_batch(images(2))
    # predict_on_batch retraces a second size with (batch, None, None, 3): Patches checks it when run
    # (was: "Patches needs a static image size. Received: input_shape=(2, None, None, 3)")
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match=rf"\({SIZE}, {SIZE}\)[^[]*\[2 64 64 3\]"):
        model.predict_on_batch(np.zeros((2, 64, 64, 3), "float32"))
    np.testing.assert_allclose(model.predict_on_batch(images(3)), model(images(3)), atol=ROUND_OFF)  # and still serves


def test_patches_first_static_size_is_fixed():
    layer = keras_vit.Patches(8)
    assert tuple(layer(np.zeros((1, 32, 32, 3), "float32")).shape) == (1, 16, 192)
    with pytest.raises(ValueError, match=r"expected axis 1 of input shape to have value 32.*\(1, 64, 64, 3\)"):
        layer(np.zeros((1, 64, 64, 3), "float32"))
    free = keras_vit.Patches(8)  # a first call without a static size fixes nothing
    free.compute_output_shape((None, 32, 32, 3))
    assert tuple(free(np.zeros((1, 16, 16, 3), "float32")).shape) == (1, 4, 192)


def test_tflite_rejects_wrong_size(tflite_path):
    interpreter = tflite_files.tflite_interpreter(tflite_path)
    with pytest.raises(ValueError, match=rf"\(batch, {SIZE}, {SIZE}, 3\). Received: shape=\(1, 64, 64, 3\)"):
        tflite_files.run_tflite(interpreter, np.zeros((1, 64, 64, 3), "float32"))


def test_tflite_model_resized_to_another_size_refuses_to_run(tflite_path):
    # a TFLite input resized to another size: the model itself refuses it (was: 4 rows for one image)
    interpreter = tflite_files.tflite_interpreter(tflite_path)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], (1, 2 * SIZE, 2 * SIZE, 3))
    with pytest.raises((RuntimeError, ValueError)):
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], np.zeros((1, 2 * SIZE, 2 * SIZE, 3), "float32"))
        interpreter.invoke()


# --- 6: serving_bytes honours EXIF orientation as the Pillow reader does --------------------------------


def _pattern(h=24, w=40):
    """An image that no flip or rotation maps onto itself."""
    pixels = np.zeros((h, w, 3), "uint8")
    pixels[: h // 3, : w // 4] = 255
    pixels[..., 1] = np.linspace(0, 255, w)[None, :].astype("uint8")
    pixels[..., 2] = np.linspace(0, 255, h)[:, None].astype("uint8")
    return pixels


def _tiff_orientation(value, byte_order):
    """EXIF bytes (``Exif\\0\\0`` + TIFF header + IFD0 with one Orientation entry) in either byte order."""
    if byte_order == "II":
        return b"Exif\x00\x00II*\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00" + bytes([value, 0, 0, 0]) + b"\x00" * 4
    return b"Exif\x00\x00MM\x00*\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01" + bytes([0, value, 0, 0]) + b"\x00" * 4


def _encode(pixels, fmt, orientation=None, byte_order="II"):
    from PIL import Image

    extra = {} if orientation is None else {"exif": _tiff_orientation(orientation, byte_order)}
    if fmt == "JPEG":
        extra["quality"] = 95
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt, **extra)
    return buffer.getvalue()


@pytest.mark.parametrize("fmt,byte_order", [("JPEG", "II"), ("JPEG", "MM"), ("PNG", "II")])
def test_exif_orientation_in_the_graph_matches_the_reader(tmp_path, fmt, byte_order):
    from keras_vit.inference import exif

    for value in range(1, 9):
        data = _encode(_pattern(), fmt, value, byte_order)
        path = tmp_path / f"o{value}.{fmt.lower()}"
        path.write_bytes(data)
        expected = image_io.read_image(str(path))  # Pillow's exif_transpose
        assert int(exif.orientation(tf.constant(data))) == value
        decoded = tf.io.decode_image(data, channels=3, expand_animations=False)
        actual = exif.apply_orientation(decoded, exif.orientation(tf.constant(data))).numpy()
        assert actual.shape == expected.shape, (fmt, value)
        # the same pixels; JPEG decoders (libjpeg in Pillow and TensorFlow) differ by a few levels at most
        np.testing.assert_allclose(actual.astype(int), expected.astype(int), atol=8 if fmt == "JPEG" else 0)


@pytest.mark.parametrize("data", [b"", b"\xff\xd8 no exif", b"\xff\xd8\xff\xe1\x00\x08Exif\x00\x00II*\x00\xff\xff", b"x" * 100])
def test_exif_orientation_of_files_without_a_valid_tag_is_1(data):
    from keras_vit.inference import exif

    assert int(exif.orientation(tf.constant(data))) == 1


def test_serving_bytes_classifies_a_rotated_photo_upright(served, tmp_path):
    upright = _pattern(SIZE, SIZE)
    upright[:, : SIZE // 2] = 0  # the left half dark: a rotation changes what the model sees
    stored = np.rot90(upright, k=1)  # a camera held sideways; orientation 6 turns it back (90 clockwise)
    rotated = _encode(np.ascontiguousarray(stored), "PNG", 6)
    path = tmp_path / "photo.png"
    path.write_bytes(rotated)
    np.testing.assert_array_equal(image_io.read_image(str(path)), upright)  # what keras-vit predict sees
    fn = served.signatures["serving_bytes"]
    got = fn(image_bytes=tf.constant([rotated]))["probabilities"].numpy()
    want = served.signatures["serving_default"](images=tf.constant(upright[None].astype("float32")))["probabilities"]
    wrong = served.signatures["serving_default"](images=tf.constant(stored[None].astype("float32")))["probabilities"]
    np.testing.assert_allclose(got, want.numpy(), atol=ROUND_OFF)
    assert np.abs(want.numpy() - wrong.numpy()).max() > 1e-3  # the test can tell upright from rotated


# --- 7: one bad file or folder never stops a predict / attention run ------------------------------------


def _bomb_folder(tmp_path, monkeypatch):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    Image.new("RGB", (20, 20), (200, 10, 10)).save(folder / "a_good.png")
    Image.new("RGB", (200, 200), (10, 200, 10)).save(folder / "b_huge.png")  # 40,000 pixels
    Image.new("RGB", (20, 20), (10, 10, 200)).save(folder / "c_good.png")
    monkeypatch.setattr("PIL.Image.MAX_IMAGE_PIXELS", 10_000)  # more than twice the limit: DecompressionBombError
    return folder


def test_decompression_bomb_is_a_per_file_error(model, tmp_path, monkeypatch):
    folder = _bomb_folder(tmp_path, monkeypatch)
    results = keras_vit.predict(model, [str(folder)], labels=LABELS)  # was: DecompressionBombError, no results
    assert [os.path.basename(r["path"]) for r in results] == ["a_good.png", "b_huge.png", "c_good.png"]
    assert "predictions" in results[0] and "predictions" in results[2]
    assert "too large" in results[1]["error"] and "b_huge.png" in results[1]["error"]


def test_attention_cli_reports_a_decompression_bomb(model, tmp_path, monkeypatch, capsys):
    folder = _bomb_folder(tmp_path, monkeypatch)
    path = str(tmp_path / "model.keras")
    model.save(path)
    code = cli.main(["attention", path, str(folder / "b_huge.png"), "--out", str(tmp_path / "map.png")])
    assert code == 2 and "b_huge.png" in capsys.readouterr().err and not (tmp_path / "map.png").exists()


def test_unlistable_folder_does_not_stop_the_run(model, tmp_path, monkeypatch):
    from PIL import Image

    good, locked = tmp_path / "good", tmp_path / "locked"
    good.mkdir()
    locked.mkdir()
    Image.new("RGB", (20, 20), (200, 10, 10)).save(good / "a.png")
    listdir = os.listdir

    def guarded(path="."):  # what a folder without read permission does (tests may run as root)
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", guarded)
    results = keras_vit.predict(model, [str(locked), str(good)], labels=LABELS)  # was: PermissionError
    assert "Permission denied" in results[0]["error"] and str(locked) in results[0]["error"]
    assert "predictions" in results[1]


def test_permission_errors_are_not_reported_as_missing(tmp_path, monkeypatch):
    from PIL import Image

    path = tmp_path / "hidden" / "a.png"
    path.parent.mkdir()
    Image.new("RGB", (4, 4)).save(path)
    stat = os.stat

    def guarded(p, *args, **kwargs):  # a folder on the path that may not be searched (tests may run as root)
        if os.fspath(p) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return stat(p, *args, **kwargs)

    monkeypatch.setattr(os, "stat", guarded)
    with pytest.raises(PermissionError, match="Permission denied.*a.png") as info:  # was: "No such file"
        image_io.read_image(str(path))
    assert "No such file" not in str(info.value)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_a_permission_error(tmp_path):
    from PIL import Image

    path = tmp_path / "a.png"
    Image.new("RGB", (4, 4)).save(path)
    path.chmod(0)
    with pytest.raises(PermissionError, match="a.png"):
        image_io.read_image(str(path))


# --- 11: the REST emulation answers malformed bodies with 400; the client prints one line ---------------


@pytest.mark.parametrize(
    "body,field",
    [
        ([1, 2], "JSON object"),
        ("instances", "JSON object"),
        (None, "JSON object"),
        ({"signature_name": "serving_bytes", "instances": [{"b64": 12}]}, "b64"),
        ({"signature_name": ["serving_default"], "instances": [[0]]}, "signature_name"),
        ({"signature_name": "serving_bytes", "instances": [{"b64": "a"}]}, "base64"),
        ({"instances": [["not", "numbers"]]}, ""),
        ({"instances": []}, "instances"),
    ],
)
def test_rest_malformed_bodies_are_400(served, body, field):
    status, answer = rest.predict(served, body)  # was: TypeError / AttributeError raised
    assert status == 400 and field in answer["error"], answer
    status, _ = rest.predict(served, {"instances": images(1).tolist()})
    assert status == 200  # and the model keeps serving


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "export", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rest_client_connection_error_is_one_line(tmp_path, capsys):
    import socket

    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code = _load_script("rest_client").main([str(tmp_path / "a.png"), "--server", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"127.0.0.1:{port}" in err and "refused" in err.lower()
    code = _load_script("rest_client").main([str(tmp_path / "missing.png"), "--server", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 1 and "missing.png" in err and len(err.strip().splitlines()) == 1


# --- 12: corrupt files are called corrupt; failed exports leave nothing ---------------------------------


def test_corrupt_keras_file_is_called_corrupt(tmp_path):
    path = tmp_path / "model.keras"
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ValueError, match=r"Corrupt model file .*model\.keras") as info:
        saving.load_model(str(path))
    assert "not found" not in str(info.value).lower()  # was: "File not found: filepath=..."


@pytest.mark.parametrize("entry,message", [(b"{not json", "not valid JSON"), (b"[1, 2]", "expected a JSON object")])
def test_corrupt_metadata_entry_names_file_and_entry(model, tmp_path, entry, message):
    path = str(tmp_path / "model.keras")
    saving.save_model(model, path)
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr(saving.METADATA_ENTRY, entry)
    with pytest.raises(ValueError, match=rf"keras_vit\.json.*model\.keras.*{message}"):  # was: JSONDecodeError
        saving.read_metadata(path)
    (tmp_path / "junk.keras").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"Corrupt model file .*junk\.keras"):  # was: BadZipFile
        saving.read_metadata(str(tmp_path / "junk.keras"))


def test_failed_first_saved_model_export_leaves_no_folder(model, tmp_path):
    def fail(tmp):
        raise RuntimeError("verification failed")

    with pytest.raises(RuntimeError, match="verification failed"):
        saved_model.export_saved_model(model, str(tmp_path), name="vit", labels=LABELS, check=fail)
    assert os.listdir(tmp_path) == []  # was: an empty vit/
    (tmp_path / "kept" / "1").mkdir(parents=True)  # a folder that was there before is kept
    with pytest.raises(RuntimeError):
        saved_model.export_saved_model(model, str(tmp_path), name="kept", labels=LABELS, check=fail)
    assert os.listdir(tmp_path / "kept") == ["1"]


def test_stale_temporaries_of_killed_writers_are_removed(model, tmp_path, tflite_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # a process that has exited: what a killed export leaves behind
    output = tmp_path / "vit.tflite"
    stale_file = tmp_path / f".vit.tflite.tmp-{dead_pid}-0123abcd"
    stale_file.write_bytes(b"half a flatbuffer")
    live_file = tmp_path / f".vit.tflite.tmp-{os.getpid()}-0123abcd"  # a writer still running: kept
    live_file.write_bytes(b"in progress")
    other = tmp_path / f".other.tflite.tmp-{dead_pid}-0123abcd"  # another target's: not ours to judge
    other.write_bytes(b"x")
    saving.atomic_write(str(output), lambda tmp: open(tmp, "wb").write(open(tflite_path, "rb").read()))
    assert not stale_file.exists() and live_file.exists() and other.exists()
    assert output.read_bytes() == open(tflite_path, "rb").read()

    stale_version = tmp_path / f".vit.3.tmp-{dead_pid}-0123abcd"
    (stale_version / "variables").mkdir(parents=True)
    path, _ = saved_model.export_saved_model(model, str(tmp_path), name="vit", labels=LABELS, version=5)
    assert sorted(os.listdir(tmp_path / "vit")) == ["5"]
    assert not stale_version.exists() and live_file.exists()  # the killed export of version 3 is gone


# --- beyond the list: exports killed at random points leave the old state or the new one -------------

_EXPORT_SCRIPT = """
import sys
import numpy as np
from keras_vit.export import export_model
model, folder = sys.argv[1], sys.argv[2]
x = np.random.default_rng(0).uniform(0, 255, (8, 32, 32, 3)).astype("float32")
print("start", flush=True)
export_model(model, "tflite", folder + "/vit.tflite", eval_data=x, num_images=8, report=folder + "/report.json",
             overwrite=True)  # over the old state the test wrote there
export_model(model, "saved_model", folder, name="vit", eval_data=x, num_images=8, warmup=False)
print("done", flush=True)
"""


def _leftovers_are_old_or_new(folder, old_tflite, new_outputs, x):
    """Every visible file is complete; the hidden ones are temporaries named for their writer."""
    import re

    for name in os.listdir(folder):
        if name.startswith("."):
            assert re.fullmatch(r"\..+\.tmp-\d+-[0-9a-f]{8}.*", name), name
    tflite_file = os.path.join(folder, "vit.tflite")
    content = open(tflite_file, "rb").read()
    if content != old_tflite:  # the new file, whole: it loads and gives the new model's scores
        got = tflite_files.run_tflite(tflite_files.tflite_interpreter(tflite_file), x)
        np.testing.assert_allclose(got, new_outputs, atol=RUNTIME_ATOL)
    if os.path.exists(os.path.join(folder, "report.json")):
        assert json.loads(open(os.path.join(folder, "report.json")).read())["format"] == "tflite"
    versions = os.path.join(folder, "vit")
    if os.path.isdir(versions):
        assert os.listdir(versions), "an empty vit/: a version was started, not finished"
    for name in os.listdir(versions) if os.path.isdir(versions) else []:
        loaded = tf.saved_model.load(os.path.join(versions, name))  # a version folder is always complete
        np.testing.assert_allclose(loaded.signatures["serving_default"](images=tf.constant(x))["probabilities"],
                                   new_outputs, atol=ROUND_OFF)


@pytest.mark.slow
def test_exports_killed_at_random_points_leave_old_or_new_state(model, tmp_path):
    import random
    import time

    rng = random.Random(14)  # fixed seed: the same kill points every run
    path = str(tmp_path / "model.keras")
    saving.save_model(model, path, metadata={"class_names": LABELS})
    x = images(8, seed=0)
    new_outputs = model.predict_on_batch(x)
    keras.utils.set_random_seed(1)
    old = tiny_vit(num_classes=len(LABELS))  # the old state: another model's export at the same path
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    command = [sys.executable, "-c", _EXPORT_SCRIPT, path]

    def started(folder):  # an export process, once its imports are done and it starts writing
        process = subprocess.Popen([*command, folder], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert process.stdout.readline().strip() == "start"
        return process, time.monotonic()

    os.makedirs(tmp_path / "out")
    process, start = started(str(tmp_path / "out"))
    assert process.stdout.readline().strip() == "done" and process.wait() == 0
    writing = time.monotonic() - start  # how long the two exports take: the kills fall in this window
    for iteration in range(5):
        folder = tmp_path / f"run{iteration}"
        folder.mkdir()
        tflite.write(tflite.convert(old), str(folder / "vit.tflite"), LABELS)
        old_tflite = (folder / "vit.tflite").read_bytes()
        process, start = started(str(folder))
        time.sleep(max(0.0, start + rng.uniform(0.0, writing) - time.monotonic()))
        process.kill()
        process.wait()
        _leftovers_are_old_or_new(str(folder), old_tflite, new_outputs, x)
        # the next export removes what the killed one left and ends in the new state
        subprocess.run([*command, str(folder)], check=True, env=env, capture_output=True)
        hidden = [n for n in os.listdir(folder) if n.startswith(".")]
        hidden += [n for n in os.listdir(folder / "vit") if n.startswith(".")]
        assert hidden == [], (iteration, hidden)
        _leftovers_are_old_or_new(str(folder), old_tflite, new_outputs, x)
