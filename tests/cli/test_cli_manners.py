"""The command's manners: help without TensorFlow, every flag explained in plain text, one --verbose, one overwrite rule."""

import argparse
import json
import os
import subprocess
import sys

import pytest

from keras_vit import cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# every command, train included (its domains and model names live in the Keras-free keras_vit.train.choices)
LIGHT_COMMANDS = list(cli.COMMANDS)
HELP_CHILD = """
import contextlib, io, json, sys
from keras_vit.cli import main
for argv in [["--help"]] + [[name, "--help"] for name in sys.argv[1:]]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
print(json.dumps(sorted(m for m in ("tensorflow", "keras", "numpy") if m in sys.modules)))
"""


def test_help_starts_neither_tensorflow_nor_keras():
    child = subprocess.run([sys.executable, "-c", HELP_CHILD, *LIGHT_COMMANDS], capture_output=True, text=True,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), timeout=120)
    assert child.returncode == 0, child.stderr
    imported = json.loads(child.stdout.strip().splitlines()[-1])
    assert "tensorflow" not in imported and "keras" not in imported, imported


def _subparsers(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_flag_has_plain_help():
    parser, _ = cli.build_parser()
    for name, sub in _subparsers(parser).items():
        assert "``" not in sub.description and ":func:" not in sub.description and ":class:" not in sub.description
        for action in sub._actions:
            assert action.help and action.help.strip(), (name, action.option_strings or action.dest)
            for markup in ("``", ":func:", ":class:", ":mod:", ":data:"):
                assert markup not in action.help, (name, action.option_strings, action.help)
    assert "metrics.json" in _subparsers(parser)["train"].description  # the markup gone, the words kept


def test_plain_removes_rest_roles():
    assert cli.plain("see :func:`~keras_vit.train.job.run` and ``x.json``") == "see run and x.json"


@pytest.mark.parametrize("argv, shown", [
    (["--verbose", "resize", "m.keras", "--output", "o.keras"], True),
    (["resize", "m.keras", "--output", "o.keras", "--verbose"], True),
    (["resize", "m.keras", "--output", "o.keras"], False),
])
def test_verbose_is_one_switch_before_or_after_the_command(argv, shown):
    parser, _ = cli.build_parser(commands=("resize",))
    assert cli.verbose_requested(parser.parse_args(argv)) is shown


def test_train_takes_verbose_as_the_switch_and_progress_as_keras_progress(capsys):
    parser, _ = cli.build_parser(commands=("train",))
    args = parser.parse_args(["train", "--progress", "2", "--verbose"])
    assert args.verbose == 2 and cli.verbose_requested(args)
    assert not cli.verbose_requested(parser.parse_args(["train", "--progress", "0"]))
    with pytest.raises(SystemExit):  # --verbose takes no value
        parser.parse_args(["train", "--verbose", "2"])
    assert "unrecognized arguments: 2" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["convert", "no-such-weights.npz"], ["resize", "no-such.keras", "--image-size", "64"]])
def test_keras_outputs_are_refused_before_any_work_unless_overwrite(command, tmp_path, capsys):
    existing = tmp_path / "out.keras"
    existing.write_bytes(b"kept")
    assert cli.main([*command, "--output", str(existing)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--overwrite" in err and str(existing) in err  # not the missing input
    assert existing.read_bytes() == b"kept"
    folder = tmp_path / "folder.keras"
    folder.mkdir()
    assert cli.main([*command, "--output", str(folder)]) == 2  # a folder where a file goes
    assert "is a folder" in capsys.readouterr().err
    assert cli.main([*command, "--output", str(existing), "--overwrite"]) == 2  # past the check, at the input
    assert "exists" not in capsys.readouterr().err
    assert cli.main([*command, "--output", str(tmp_path / "out.h5")]) == 2  # before the input is read (resize loaded
    assert "--output must name a .keras file" in capsys.readouterr().err  # and resized the model first)


@pytest.mark.parametrize("fmt", ["tflite", "onnx"])
def test_export_files_are_refused_before_any_work_unless_overwrite(fmt, tmp_path):
    from keras_vit.export import export_model

    existing = tmp_path / f"m.{fmt}"
    existing.write_bytes(b"kept")
    with pytest.raises(FileExistsError, match=r"exists: pass overwrite=True \(keras-vit: --overwrite\)"):
        export_model("no-such.keras", fmt, str(existing))  # refused before the (missing) model is read
    with pytest.raises(IsADirectoryError, match="is a folder"):
        export_model("no-such.keras", fmt, str(tmp_path), overwrite=True)
    with pytest.raises(FileNotFoundError):
        export_model("no-such.keras", fmt, str(existing), overwrite=True)
    assert existing.read_bytes() == b"kept"


def test_export_flag_overwrite(tmp_path, capsys):
    existing = tmp_path / "m.onnx"
    existing.write_bytes(b"kept")
    assert cli.main(["export", "no-such.keras", "--format", "onnx", "--output", str(existing)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert cli.main(["export", "no-such.keras", "--format", "onnx", "--output", str(existing), "--overwrite"]) == 2
    assert "no-such.keras" in capsys.readouterr().err


def test_export_progress_lines_off_a_terminal():
    import io

    from keras_vit.cli.export import Progress

    stream = io.StringIO()
    progress = Progress(stream)
    progress("converting to TFLite int8")
    for done in range(1, 4):
        progress("calibrating", done, 3)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].endswith("converting to TFLite int8") and lines[1].endswith("calibrating: 3/3 images")


def test_input_range_minus_one_to_one_is_taken_as_the_docs_write_it(tmp_path, capsys):
    """argparse read "-1-1" as a flag: `--input-range -1-1` ended in "expected one argument"."""
    import json

    import numpy as np
    from PIL import Image

    from helpers import tiny_vit

    model = tmp_path / "unit.keras"
    tiny_vit(num_classes=3, include_preprocessing=False).save(model)
    image = tmp_path / "a.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(image)
    for flag in (["--input-range", "-1-1"], ["--input-range=-1-1"]):
        assert cli.main(["predict", str(model), str(image), "--json", *flag]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert len(printed["results"][0]["predictions"]) == 3


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """Ctrl-C during a run printed a KeyboardInterrupt traceback through TensorFlow's frames."""
    from keras_vit.cli import info

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(info, "run", interrupted)
    assert cli.main(["info"]) == 130
    assert capsys.readouterr().err == "keras-vit info: interrupted\n"
