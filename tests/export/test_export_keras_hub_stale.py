"""A keras-hub export removes the temporary folder that a killed export to the same folder left, and says so."""

import os
import subprocess
import sys

from helpers import tiny_vit
from keras_vit.export import export_model


def _dead_pid():
    """The id of a process that has exited (what a SIGKILLed export leaves in its temporary folder's name)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_stale_preset_temporary_is_removed_and_reported(tmp_path, capsys):
    output = tmp_path / "preset"
    stale = tmp_path / f".preset.tmp-{_dead_pid()}-0123abcd"
    stale.mkdir()
    (stale / "model.weights.h5").write_bytes(b"half written")
    running = tmp_path / f".preset.tmp-{os.getpid()}-89abcdef"  # a writer still alive: left alone
    running.mkdir()
    other = tmp_path / f".other.tmp-{_dead_pid()}-0123abcd"  # another folder's temporary: not this export's
    other.mkdir()

    report = export_model(tiny_vit(num_classes=3), "keras-hub", str(output), num_images=2)

    assert report.passed and output.is_dir() and (output / "config.json").is_file()
    assert not stale.exists()
    assert running.is_dir() and other.is_dir()
    assert report.details["removed_stale"] == [str(stale)]
    printed = capsys.readouterr().out
    assert f"removed {str(stale)!r}, the temporary folder of an export to {str(output)!r} that did not finish" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([output.name, running.name, other.name])
