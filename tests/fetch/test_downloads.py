"""The one download path and the preset cache: timeouts, truncated bodies, damaged cached files, killed downloads.

Offline: a ``http.server`` on 127.0.0.1 serves, per path, a file, a body cut short, or headers and
then silence; ``KERAS_VIT_DOWNLOAD_TIMEOUT`` is set low so a stall fails in well under 2 s.
"""

import http.server
import io
import os
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest

from helpers import TINY, save_npz, tiny_vit, vit_checkpoint
from keras_vit.architecture import variants
from keras_vit.fetch import cache, transfer
from keras_vit.weights import CheckpointError, DownloadError, npz, presets, sources

TAG = "test_tiny"
FILE = "test/T_8-tiny-res_32.npz"


class Server:
    """Serves ``self.routes[path]``: bytes; ``("truncate", bytes)``: half of them; ``"stall"``: headers, then nothing."""

    def __init__(self):
        self.routes, self.requests, self.release = {}, [], threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests.append(self.path)
                route = server.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                if route == "silent":  # accepts the connection, never answers
                    server.release.wait(10)
                    return
                body = route[1] if isinstance(route, tuple) else route if route != "stall" else b"x" * 1000
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if route == "stall":
                    self.wfile.flush()
                    server.release.wait(10)
                elif isinstance(route, tuple):
                    self.wfile.write(body[: len(body) // 2])
                else:
                    self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()  # shutdown() waits a poll

    def stop(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def served(tmp_path, monkeypatch):
    server = Server()
    monkeypatch.setenv(presets.URL_ENV, server.url)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(transfer.TIMEOUT_ENV, "0.5")
    monkeypatch.setitem(variants.VARIANTS, "T", {k: TINY[k] for k in ("hidden_size", "num_layers", "mlp_dim", "num_heads")})
    server.preset = presets.Preset("T/8", TAG, 32, FILE)
    monkeypatch.setattr(presets, "PRESETS", [*presets.PRESETS, server.preset])
    yield server
    server.stop()


def npz_bytes(arrays):
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def bad_crc(data):
    """Bytes flipped inside an array's data: only the CRC-32 of that member tells."""
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 16]) + data[middle + 16 :]


def short_member(arrays):
    """A valid zip (CRCs right) whose largest member's data is shorter than its ``.npy`` header says."""
    buffer = io.BytesIO()
    largest = max(arrays, key=lambda k: arrays[k].size)
    with zipfile.ZipFile(buffer, "w") as archive:
        for key, value in arrays.items():
            member = io.BytesIO()
            np.save(member, value)
            data = member.getvalue()
            archive.writestr(key + ".npy", data[:-64] if key == largest else data)
    return buffer.getvalue()


DAMAGES = {
    "bad CRC": lambda: bad_crc(npz_bytes(vit_checkpoint())),
    "short member": lambda: short_member(vit_checkpoint()),
    "another architecture": lambda: npz_bytes(vit_checkpoint(num_layers=1)),
}


def cache_files(home):
    return sorted(os.path.relpath(os.path.join(d, f), home) for d, _, files in os.walk(home) for f in files)


def place(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("stall", ["stall", "silent"])
def test_stalled_mirror_is_an_error_within_the_timeout_naming_the_url(served, tmp_path, stall):
    served.routes["/" + FILE] = stall
    start = time.monotonic()
    with pytest.raises(DownloadError, match=r"No data from http://127\.0\.0\.1:\d+/test/T_8-tiny-res_32\.npz for 0\.5 s "
                       r"\(KERAS_VIT_DOWNLOAD_TIMEOUT=0\.5\)") as error:
        tiny_vit(weights=TAG)
    assert time.monotonic() - start < 2
    assert sources.cache_path(served.preset) in str(error.value)
    assert cache_files(tmp_path / "home") == []  # no partial file, no staging folder


def test_truncated_body_is_an_error_naming_the_url_and_leaves_nothing(served, tmp_path):
    served.routes["/" + FILE] = ("truncate", npz_bytes(vit_checkpoint()))
    with pytest.raises(DownloadError, match=r"The download from http://127\.0\.0\.1:\d+/test/T_8-tiny-res_32\.npz "
                       r"stopped after [\d,]+ of [\d,]+ bytes"):
        tiny_vit(weights=TAG)
    assert cache_files(tmp_path / "home") == []


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_cached_preset_is_removed_and_fetched_again(served, tmp_path, damage):
    good = npz_bytes(vit_checkpoint())
    served.routes["/" + FILE] = good
    cached = sources.cache_path(served.preset)
    place(cached, DAMAGES[damage]())
    model = tiny_vit(weights=TAG)
    assert served.requests == ["/" + FILE] and model.load_report.path == cached
    assert open(cached, "rb").read() == good
    assert cache_files(tmp_path / "home") == sorted(
        os.path.relpath(p, tmp_path / "home") for p in (cached, cached + cache.VERIFIED_SUFFIX)
    )
    tiny_vit(weights=TAG)
    assert served.requests == ["/" + FILE]  # verified and recorded: no second download


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_download_is_refused_naming_url_and_cache_path(served, tmp_path, damage):
    served.routes["/" + FILE] = DAMAGES[damage]()
    cached = sources.cache_path(served.preset)
    place(cached, DAMAGES[damage]())  # and the cached copy too: removed, fetched once, refused
    with pytest.raises(CheckpointError, match="truncated, corrupt or another file") as error:
        tiny_vit(weights=TAG)
    message = str(error.value)
    assert f"{served.url}/{FILE}" in message and cached in message and "the cached copy was damaged" in message
    assert served.requests == ["/" + FILE] and cache_files(tmp_path / "home") == []


def test_verification_is_recorded_and_redone_when_the_file_changes(served, monkeypatch):
    served.routes["/" + FILE] = npz_bytes(vit_checkpoint())
    path = sources.fetch(served.preset)
    calls = []
    monkeypatch.setattr(npz, "verify_npz", lambda p: calls.append(p))
    assert sources.fetch(served.preset) == path and calls == []  # size and mtime as recorded
    os.utime(path, ns=(0, 0))
    assert sources.fetch(served.preset) == path and calls == [path]


def test_a_file_given_by_path_is_never_removed(tmp_path):
    path = tmp_path / "mine.npz"
    path.write_bytes(bad_crc(npz_bytes(vit_checkpoint())))
    with pytest.raises(CheckpointError, match="mine.npz"):
        tiny_vit(weights=str(path))
    assert path.exists()


def test_a_killed_downloads_staging_folder_is_removed_at_the_next_fetch(served, tmp_path):
    served.routes["/" + FILE] = npz_bytes(vit_checkpoint())
    root = cache.cache_root()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = os.path.join(root, f".download-{int(dead.stdout)}")
    live = os.path.join(root, f".download-{os.getpid()}-inprogress")
    for folder in (leftover, live):
        place(os.path.join(folder, "T_8-tiny-res_32.npz"), b"PK\x03\x04 partial")
    sources.fetch(served.preset)
    assert not os.path.exists(leftover) and os.path.isdir(live)  # a live process's download is left alone
    assert transfer.remove_stale(root, now=time.time() + transfer.STALE_AFTER_S + 60) == [live]  # and a day later


def test_timeout_variable_must_be_a_positive_number(served, monkeypatch):
    monkeypatch.setenv(transfer.TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match="KERAS_VIT_DOWNLOAD_TIMEOUT must be a positive number of seconds. "
                       "Received: KERAS_VIT_DOWNLOAD_TIMEOUT='soon'"):
        sources.fetch(served.preset)
