"""Preset weights: the table, downloads from a loopback HTTP server into the Keras cache, every failure path.

Offline: a ``http.server`` on 127.0.0.1 (ephemeral port) serves checkpoints written by the
helpers in the original layout, reached through ``KERAS_VIT_WEIGHTS_URL``; ``KERAS_HOME``
is a temporary folder. A tiny test-only variant and preset are registered by monkeypatching
the two tables (the variant registry and the preset table), so most builds are tiny.
"""

import functools
import hashlib
import http.server
import os
import threading

import numpy as np
import pytest

import keras_vit
import reference
from helpers import TINY, images, original_names, save_npz, tiny_vit, vit_checkpoint
from keras_vit import cli
from keras_vit.architecture import variants
from keras_vit.fetch import cache, hub
from keras_vit.weights import CheckpointError, DownloadError, presets, resolve, sources

TAG = "test_tiny"
FILE = "test/T_8-tiny-res_32.npz"


class Server:
    """A loopback HTTP server over ``root``, counting the GET requests it answers."""

    def __init__(self, root):
        self.requests = []
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)  # shutdown() waits a poll
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A running server over ``tmp_path/bucket``, the env pointing at it, and the cache in ``tmp_path/home``."""
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    server = Server(bucket)
    monkeypatch.setenv(presets.URL_ENV, server.url)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    server.bucket = bucket
    yield server
    if server.thread.is_alive():
        server.stop()


@pytest.fixture
def tiny_preset(monkeypatch):
    """Register the TINY shape as variant "T/8" and a preset ``test_tiny`` for it (32x32)."""
    monkeypatch.setitem(variants.VARIANTS, "T", {k: TINY[k] for k in ("hidden_size", "num_layers", "mlp_dim", "num_heads")})
    preset = presets.Preset("T/8", TAG, 32, FILE)
    monkeypatch.setattr(presets, "PRESETS", [*presets.PRESETS, preset])
    return preset


def publish(bucket, relative, arrays):
    """Write ``arrays`` as an original-layout .npz at ``bucket/relative``; return the local copy's path."""
    path = bucket.joinpath(*relative.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_npz(path, arrays)


def cache_files(home):
    return sorted(os.path.relpath(os.path.join(d, f), home) for d, _, files in os.walk(home) for f in files)


def test_first_build_downloads_second_comes_from_cache_with_server_stopped(served, tiny_preset, tmp_path):
    local = publish(served.bucket, FILE, vit_checkpoint())
    x = images(2)
    expected = np.asarray(tiny_vit(weights=local, classifier_activation=None)(x))

    model = tiny_vit(weights=TAG, classifier_activation=None)
    assert served.requests == ["/" + FILE]
    np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=0, atol=1e-6)
    cached = sources.cache_path(tiny_preset)
    assert model.load_report.path == cached and os.path.isfile(cached)
    kept = os.path.join("models", "keras_vit", "test", "T_8-tiny-res_32.npz")
    assert cache_files(tmp_path / "home") == [kept, kept + cache.VERIFIED_SUFFIX]

    served.stop()
    again = tiny_vit(weights=TAG, classifier_activation=None)
    assert served.requests == ["/" + FILE]  # no second request
    np.testing.assert_allclose(np.asarray(again(x)), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_damaged_download_is_detected_reported_and_not_kept(served, tiny_preset, tmp_path, damage):
    path = publish(served.bucket, FILE, vit_checkpoint())
    data = open(path, "rb").read()
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    else:  # flip bytes inside an array's data: only the CRC-32 of that member tells
        middle = len(data) // 2
        data = data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 16]) + data[middle + 16 :]
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(CheckpointError, match="truncated, corrupt or another file") as error:
        tiny_vit(weights=TAG)
    message = str(error.value)
    assert f"{served.url}/{FILE}" in message and sources.cache_path(tiny_preset) in message
    assert cache_files(tmp_path / "home") == []  # neither the file nor the staging folder stays


def test_published_sha256_is_checked(served, monkeypatch, tiny_preset, tmp_path):
    local = publish(served.bucket, FILE, vit_checkpoint())
    digest = hashlib.sha256(open(local, "rb").read()).hexdigest()
    wrong = presets.Preset("T/8", TAG, 32, FILE, sha256="0" * 64)
    monkeypatch.setattr(presets, "PRESETS", [p for p in presets.PRESETS if p.tag != TAG] + [wrong])
    with pytest.raises(CheckpointError, match=f"SHA-256 {digest} != the published 0000"):
        tiny_vit(weights=TAG)
    assert cache_files(tmp_path / "home") == []
    right = presets.Preset("T/8", TAG, 32, FILE, sha256=digest)
    monkeypatch.setattr(presets, "PRESETS", [p for p in presets.PRESETS if p.tag != TAG] + [right])
    assert tiny_vit(weights=TAG).load_report.path == sources.cache_path(right)


def test_offline_with_nothing_cached_says_url_cache_path_and_how_to_place_the_file(served, tiny_preset, tmp_path):
    served.stop()
    with pytest.raises(DownloadError) as error:
        tiny_vit(weights=TAG)
    message = str(error.value)
    cached = sources.cache_path(tiny_preset)
    assert f"{served.url}/{FILE}" in message and cached in message
    assert "download the file elsewhere and copy it to" in message and presets.URL_ENV in message
    assert cache_files(tmp_path / "home") == []
    # placing the file there by hand, as the message says, works offline
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    save_npz(cached, vit_checkpoint())
    assert tiny_vit(weights=TAG).load_report.path == cached


def test_truncated_file_in_the_cache_is_removed_and_downloaded_again(served, tiny_preset):
    cached = sources.cache_path(tiny_preset)
    os.makedirs(os.path.dirname(cached))
    with open(cached, "wb") as f:
        f.write(b"PK\x03\x04 half a file")
    with pytest.raises(DownloadError, match="the cached copy was damaged and removed") as error:
        tiny_vit(weights=TAG)  # nothing on the server: the second try fails, naming both places
    assert cached in str(error.value) and f"{served.url}/{FILE}" in str(error.value)
    assert not os.path.exists(cached) and served.requests == ["/" + FILE]
    publish(served.bucket, FILE, vit_checkpoint())
    assert tiny_vit(weights=TAG).load_report.path == cached


def test_tag_without_a_file_for_this_builder_lists_the_tags_that_have_one():
    with pytest.raises(ValueError, match=r"No preset 'augreg_in21k' for ViT-H/14. Its presets: 'imagenet21k' \(224\)"):
        keras_vit.ViTH14(weights="augreg_in21k")
    with pytest.raises(ValueError, match=r"No preset 'imagenet21k' for ViT-Ti/16. Its presets: 'augreg_in21k' \(224\), "
                       r"'augreg_in21k_ft_in1k' \(224/384\)"):
        keras_vit.ViTTi16(weights="imagenet21k")


def test_unknown_weights_value_lists_what_is_accepted():
    with pytest.raises(ValueError, match=r"preset tag \(imagenet21k, imagenet21k\+imagenet2012, augreg_in21k, "
                       r"augreg_in21k_ft_in1k, augreg_in1k\) or 'hf://ORG/NAME'. Received: weights='imagenet22k'"):
        tiny_vit(weights="imagenet22k")
    with pytest.raises(TypeError, match="Received: weights=3"):
        tiny_vit(weights=3)


def test_tag_on_a_shape_of_no_registered_variant_says_to_use_a_named_builder():
    with pytest.raises(ValueError, match=r"this model's shape is none of them: build it with a named builder \(ViTTi16"):
        tiny_vit(weights="imagenet21k")
    with pytest.raises(ValueError, match=r"named builder \(R50ViTB16, R26ViTS32, R50ViTL32\)"):
        keras_vit.HybridViT(block_units=(1,), width=0.5, image_size=32, hidden_size=32, num_layers=1,
                            num_heads=2, mlp_dim=64, weights="augreg_in21k")


def test_hf_source_reaches_the_hub_hook(monkeypatch, tmp_path):
    local = save_npz(tmp_path / "from_hub.npz", vit_checkpoint())
    calls = []

    def fetch(source):
        calls.append(source)
        return local

    monkeypatch.setattr(hub, "fetch", fetch)
    assert resolve("hf://org/name") == local
    model = tiny_vit(weights="hf://timm/some_vit")
    assert calls == ["hf://org/name", "hf://timm/some_vit"] and model.load_report.path == local


def test_local_paths_and_none_pass_through(tmp_path):
    path = save_npz(tmp_path / "a.npz", vit_checkpoint())
    assert resolve(None) is None and resolve(path) == path and resolve(tmp_path) == str(tmp_path)


def test_info_presets_prints_builder_tag_resolution_url_and_cached(served, tiny_preset, capsys):
    publish(served.bucket, FILE, vit_checkpoint())
    assert cli.main(["info", "--presets"]) == 0
    before = capsys.readouterr().out
    tiny_vit(weights=TAG)
    capsys.readouterr()
    assert cli.main(["info", "--presets"]) == 0
    after = capsys.readouterr().out
    row = lambda out, tag, url: next(line.split() for line in out.splitlines() if tag in line.split() and url in line)
    assert row(before, TAG, FILE) == ["ViTT8", TAG, "32", "no", f"{served.url}/{FILE}"]
    assert row(after, TAG, FILE) == ["ViTT8", TAG, "32", "yes", f"{served.url}/{FILE}"]
    ti = "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384.npz"
    assert row(after, "augreg_in21k_ft_in1k", ti) == ["ViTTi16", "augreg_in21k_ft_in1k", "384", "no", f"{served.url}/{ti}"]
    assert f"cache: {cache.cache_root()}" in after


def test_table_is_consistent_with_the_registry():
    registered = set(variants.VIT_VARIANTS) | set(variants.HYBRID_VARIANTS)
    assert {p.variant for p in presets.PRESETS} == registered  # every builder has a preset, and nothing else
    assert len({(p.variant, p.tag, p.image_size) for p in presets.PRESETS}) == len(presets.PRESETS)
    paths = [sources.cache_path(p) for p in presets.PRESETS]
    assert len(set(paths)) == len(paths)  # imagenet21k/ViT-B_16.npz and imagenet21k+imagenet2012/ViT-B_16.npz apart
    for p in presets.PRESETS:
        assert p.file.endswith(".npz") and p.image_size in (224, 384)
        assert p.file.split("/")[0] in ("imagenet21k", "imagenet21k+imagenet2012", "augreg")
        assert (p.top1 is None) == (p.top1_source is None) and p.top1_source in (None, *presets.TOP1_SOURCES)
        if p.tag.startswith("augreg_in21k_ft") or p.tag == "augreg_in1k":
            assert p.file.endswith(f"-res_{p.image_size}.npz")


def test_resolution_is_the_file_of_that_size_else_the_nearest():
    assert presets.find("Ti/16", "augreg_in21k_ft_in1k", 384).image_size == 384
    assert presets.find("Ti/16", "augreg_in21k_ft_in1k", (240, 240)).image_size == 224
    assert presets.find("Ti/16", "augreg_in21k_ft_in1k", (320, 352)).image_size == 384
    assert presets.find("B/16", "imagenet21k", 384).file == "imagenet21k/ViT-B_16.npz"  # resized when loaded


def test_env_url_replaces_the_bucket_for_every_preset(monkeypatch):
    monkeypatch.delenv(presets.URL_ENV, raising=False)
    assert all(presets.url_of(p) == f"https://storage.googleapis.com/vit_models/{p.file}" for p in presets.PRESETS)
    monkeypatch.setenv(presets.URL_ENV, "http://mirror.local/vit/")
    assert all(presets.url_of(p) == f"http://mirror.local/vit/{p.file}" for p in presets.PRESETS)


def test_named_builder_downloads_its_real_file(served):
    """ViTTi16(weights="augreg_in21k_ft_in1k") against a full-size Ti/16 file served under its real name."""
    preset = presets.find("Ti/16", "augreg_in21k_ft_in1k", 224)
    ti = dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768, num_classes=1000, grid=(14, 14))
    arrays = vit_checkpoint(**ti, scale=0.05)
    local = publish(served.bucket, preset.file, arrays)
    model = keras_vit.ViTTi16(weights="augreg_in21k_ft_in1k", classifier_activation=None)
    assert served.requests == ["/" + preset.file] and model.load_report.path == sources.cache_path(preset)
    assert len(model.load_report.loaded) == len(arrays)
    x = images(1, size=224)
    # the independent NumPy forward pass of the same file; 5e-5 as the issue asks of every source
    np.testing.assert_allclose(np.asarray(model(x)), reference.vit_logits(x, original_names(arrays)), rtol=0, atol=5e-5)
    assert os.path.getsize(sources.cache_path(preset)) == os.path.getsize(local)


def test_docs_table_matches_the_preset_table():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "models-and-weights.md"), encoding="utf-8") as f:
        text = f.read()
    rows = []
    for line in text.split("## Pretrained weights", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1] in presets.tags():
            top1 = None if cells[4] == "\u2014" else (float(cells[4].split()[0]), cells[4].split()[-1].strip("[]"))
            rows.append((cells[0], cells[1], int(cells[2]), cells[3], top1))
    expected = [
        (variants.builder_name(p.variant), p.tag, p.image_size, p.file, p.top1 and (p.top1, p.top1_source))
        for p in presets.PRESETS
    ]
    assert rows == expected


def test_from_pretrained_preset_builds_the_variant_at_the_files_resolution_with_imagenet_names(served, tiny_preset, monkeypatch):
    """``from_pretrained("VARIANT:TAG")``: the file nearest ``image_size`` downloaded once, ImageNet-1k names for an in1k head."""
    ft = [presets.Preset("T/8", "augreg_in21k_ft_in1k", size, f"test/T_8-ft-res_{size}.npz") for size in (32, 48)]
    monkeypatch.setattr(presets, "PRESETS", [*presets.PRESETS, *ft])
    arrays = vit_checkpoint(num_classes=1000)
    publish(served.bucket, ft[0].file, arrays)
    publish(served.bucket, ft[1].file, vit_checkpoint(num_classes=1000, grid=(6, 6)))

    model = keras_vit.from_pretrained("T/8:augreg_in21k_ft_in1k", classifier_activation=None)
    assert served.requests == ["/" + ft[0].file] and model.name == "vit_t8" and model.input_shape == (None, 32, 32, 3)
    x = images(2)
    # the independent NumPy forward pass of the same file; 5e-5 as the issue asks of every source
    np.testing.assert_allclose(np.asarray(model(x)), reference.vit_logits(x, arrays), atol=5e-5)
    assert model.class_names[:2] == ["tench", "goldfish"]
    assert model.load_report.source == "T/8:augreg_in21k_ft_in1k" and model.load_report.path == sources.cache_path(ft[0])

    tuned = keras_vit.from_pretrained("T/8:augreg_in21k_ft_in1k", image_size=48, num_classes=10)
    assert served.requests[-1] == "/" + ft[1].file and not tuned.load_report.resized  # the 48 file: no resampling
    assert not hasattr(tuned, "class_names")
    served.stop()
    count = len(served.requests)
    assert keras_vit.from_pretrained("T/8:augreg_in21k_ft_in1k").load_report.path == sources.cache_path(ft[0])
    assert len(served.requests) == count  # from the cache, the server stopped


def test_download_prints_plain_lines_where_stdout_is_not_a_terminal(served, tiny_preset, capsys):
    # `keras-vit train --weights TAG > train.log`: Keras' download bar (verbose 1, "dynamic" on every POSIX
    # system) would fill the log with backspaces, carriage returns and colour codes
    publish(served.bucket, FILE, vit_checkpoint())
    capsys.readouterr()
    path = sources.fetch(tiny_preset)
    out, err = capsys.readouterr()
    assert not any(c in out for c in "\r\b\x1b"), repr(out)
    assert f"{served.url}/{FILE}" in out and path in out
    assert not any(c in err for c in "\r\b\x1b"), repr(err)
