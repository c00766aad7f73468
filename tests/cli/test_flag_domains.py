"""Every numeric flag of `keras-vit train` and `export` refuses what its API argument refuses, with one message each.

The flags take their argparse types from the domains the API declares (keras_vit.domains): a value is accepted by
both or refused by both, before anything runs, and the refusal names the flag (argparse, exit status 2) or the
argument (ValueError).
"""

import argparse
import contextlib
import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_vit import cli
from keras_vit import domains
from keras_vit.architecture.arguments import positive_pair
from keras_vit.export import orchestration
from keras_vit.train import config as config_lib
from keras_vit.train import job

PARSER, _ = cli.build_parser()
EXPORT_PREFIX = ["export", "missing.keras", "--format", "tflite", "--output", "out.tflite"]


def _subparser(name):
    action = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _numeric_flags(command, table):
    """``{flag: field}`` of the command's flags whose field has an Interval or Choice domain in ``table``."""
    flags = {}
    for action in _subparser(command)._actions:
        domain = table.get(action.dest)
        inner = getattr(domain, "domain", domain)
        if action.option_strings and isinstance(inner, (domains.Interval, domains.Choice)) and action.nargs != 0:
            flags[action.option_strings[0]] = action.dest
    return flags


TRAIN_FLAGS = _numeric_flags("train", config_lib.FIELD_DOMAINS)
EXPORT_FLAGS = {**_numeric_flags("export", orchestration.ARGUMENT_DOMAINS), "--image-size": "image_size"}


def test_every_numeric_flag_has_a_declared_domain():
    """No flag parses numbers with a bare int/float: the types come from the declarations, so they cannot drift."""
    for command in cli.COMMANDS:
        for action in _subparser(command)._actions:
            assert action.type not in (int, float), (command, action.option_strings)
    expected = {"--image-size", "--epochs", "--steps-per-epoch", "--batch-size", "--accumulate", "--ema", "--lr",
                "--weight-decay", "--warmup-epochs", "--label-smoothing", "--layer-decay", "--freeze-blocks",
                "--drop-path", "--mixup", "--cutmix", "--validation-fraction", "--save-freq", "--seed", "--progress"}
    assert expected <= set(TRAIN_FLAGS), expected - set(TRAIN_FLAGS)
    assert {"--version", "--num-images", "--batch-size", "--top-k", "--max-abs-diff", "--min-top1-agreement",
            "--max-patches"} <= set(EXPORT_FLAGS)


def _parse(prefix, flag, value):
    """``(accepted, stderr)`` of the parser on ``FLAG=VALUE`` (the = form: '-inf' is a value, not an option)."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            PARSER.parse_args([*prefix, f"{flag}={_text(value)}"])
        except SystemExit as exit_info:
            assert exit_info.code == 2
            return False, stderr.getvalue()
    return True, ""


def _text(value):
    return repr(value) if isinstance(value, float) else str(value)


def _train_api(field, value):
    try:
        job.TrainConfig(**{field: value})
    except ValueError as error:
        return False, str(error)
    return True, ""


def _export_api(field, value):
    """export_model itself: its arguments are checked before it reads the (missing) model."""
    if field == "image_size":  # checked where the model is resized; the same rule as the builders'
        try:
            positive_pair(value, "image_size")
        except ValueError as error:
            return False, str(error)
        return True, ""
    try:
        orchestration.export_model("missing.keras", "tflite", "out.tflite", **{field: value})
    except FileNotFoundError:
        return True, ""  # past the checks, at the model
    except ValueError as error:
        return False, str(error)
    raise AssertionError("export_model went past a missing model")


VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2.0, max_value=2.0),
    st.integers(min_value=-3, max_value=10**6),
    st.sampled_from([0, 1, 2, -1, 0.0, 1.0, 0.5, 0.9998, 1.5, -5.0, 2**32 - 1, 2**32, float("nan"), float("inf"), -math.inf]),
)


def _agree(flag, field, value, prefix, api):
    by_cli, cli_message = _parse(prefix, flag, value)
    by_api, api_message = api(field, value)
    assert by_cli == by_api, (flag, value, cli_message, api_message)
    if not by_cli:
        assert f"argument {flag}" in cli_message, cli_message
        assert f"`{field}`" in api_message or (field == "image_size" and "image_size" in api_message), api_message


@pytest.mark.parametrize("flag", sorted(TRAIN_FLAGS))
@settings(max_examples=12, deadline=None, derandomize=True)
@given(value=VALUES)
def test_each_train_flag_and_train_config_accept_and_refuse_alike(flag, value):
    _agree(flag, TRAIN_FLAGS[flag], value, ["train"], _train_api)


@pytest.mark.parametrize("flag", sorted(EXPORT_FLAGS))
@settings(max_examples=12, deadline=None, derandomize=True)
@given(value=VALUES)
def test_each_export_flag_and_export_model_accept_and_refuse_alike(flag, value):
    _agree(flag, EXPORT_FLAGS[flag], value, EXPORT_PREFIX, _export_api)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--label-smoothing", "1.5"], "argument --label-smoothing: must be in [0, 1), got 1.5"),
        (["train", "--mixup", "2"], "argument --mixup: must be in [0, 1], got 2"),
        (["train", "--cutmix=-3"], "argument --cutmix: must be in [0, 1], got -3"),
        (["train", "--weight-decay=-5"], "argument --weight-decay: must be a finite number >= 0, got -5"),
        (["train", "--validation-fraction", "1"], "argument --validation-fraction: must be in [0, 1), got 1"),
        (["train", "--ema", "1"], "argument --ema: must be in [0, 1), got 1"),
        ([*EXPORT_PREFIX, "--min-top1-agreement", "1.01"], "argument --min-top1-agreement: must be in [0, 1], got 1.01"),
        (["predict", "m.keras", "x.png", "--top-k", "0"], "argument --top-k: must be a positive int, got 0"),
        (["convert", "src.npz", "--output", "o.keras", "--num-classes", "0"], "argument --num-classes: must be a positive int, got 0"),
        (["resize", "m.keras", "--output", "o.keras", "--image-size", "0"], "argument --image-size: must be N, HxW"),
        # 'none' (any size) is no patch size, nor an export's size: it was taken and ignored
        (["resize", "m.keras", "--output", "o.keras", "--patch-size", "none"],
         "argument --patch-size: must be N or HxW of positive ints ('any size' is no choice here), got none"),
        ([*EXPORT_PREFIX, "--image-size", "none"], "argument --image-size: must be N or HxW of positive ints"),
    ],
)
def test_out_of_domain_flags_exit_2_naming_flag_domain_and_value(argv, message, capsys):
    """Issue 23 item 5: --label-smoothing 1.5 trained towards the wrong class; --mixup 2, --cutmix -3,
    --weight-decay -5 ran; export took --min-top1-agreement 1.01."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("label_smoothing", 1.5, r"`label_smoothing` must be in \[0, 1\)\. Received: label_smoothing=1\.5"),
        ("mixup", 2.0, r"`mixup` must be in \[0, 1\]\. Received: mixup=2\.0"),
        ("cutmix", -3, r"`cutmix` must be in \[0, 1\]\. Received: cutmix=-3"),
        ("weight_decay", -5.0, r"`weight_decay` must be a finite number >= 0\. Received: weight_decay=-5\.0"),
        ("lr", float("nan"), r"`lr` must be a finite number > 0\. Received: lr=nan"),
    ],
)
def test_the_api_refuses_the_same_values_before_anything_is_written(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        job.run(job.TrainConfig(**{field: value}, output=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()


def test_export_model_refuses_a_threshold_out_of_its_domain_before_reading_the_model(tmp_path):
    with pytest.raises(ValueError, match=r"`min_top1_agreement` must be in \[0, 1\]\. Received: min_top1_agreement=1\.01"):
        orchestration.export_model(str(tmp_path / "missing.keras"), "tflite", str(tmp_path / "m.tflite"), min_top1_agreement=1.01)
    with pytest.raises(ValueError, match=r"`max_abs_diff` must be a finite number >= 0\. Received: max_abs_diff=-1"):
        orchestration.export_model(str(tmp_path / "missing.keras"), "tflite", str(tmp_path / "m.tflite"), max_abs_diff=-1)
    assert not list(tmp_path.iterdir())
