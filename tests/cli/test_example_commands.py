"""The ``keras-vit`` commands of the shell examples (examples/*.sh) parse with today's flags.

examples/multi_worker.sh passed ``--verbose 2`` to ``train`` after ``--verbose`` became the one switch every
command takes and Keras' progress moved to ``--progress``: both workers stopped at ``unrecognized arguments: 2``.
"""

import pathlib
import re
import shlex

import pytest

from keras_vit import cli

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def example_commands(text):
    """The argument lists after ``-m keras_vit.cli`` (or ``keras-vit``) in a shell script, ``\\`` lines joined and
    shell variables (``$OUT``, ``"$OUT"``) standing for a word."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        if line.lstrip().startswith("#"):
            continue
        match = re.search(r"(?:-m keras_vit\.cli|\bkeras-vit)\s+(.*)$", line)
        if match:
            words = shlex.split(re.sub(r"\$\{?\w+\}?", "VALUE", match.group(1)), comments=True)
            found.append([w for w in words if w not in ("&", "&&", ";")])
    return found


def test_the_scanner_finds_a_continued_command():
    script = '# run the same keras-vit command.\nX=1 \\\n  $PY -m keras_vit.cli train --epochs 2 \\\n  --output "$OUT" &\n'
    assert example_commands(script) == [["train", "--epochs", "2", "--output", "VALUE"]]


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.sh")))
def test_every_command_of_a_shell_example_parses(script):
    commands = example_commands((EXAMPLES / script).read_text())
    assert commands, f"examples/{script} runs no keras-vit command"
    for argv in commands:
        parser, _ = cli.build_parser(commands=(cli.command_name(argv),))
        try:
            parser.parse_args(argv)
        except SystemExit as exit_:
            pytest.fail(f"examples/{script}: keras-vit {shlex.join(argv)} does not parse (exit {exit_.code})")
