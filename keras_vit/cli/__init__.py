"""The ``keras-vit`` command line.

Each subcommand lives in the module that owns its feature; this file only
maps names to modules, imported when the command runs. A command module has
``add_arguments(parser)`` and ``run(args) -> int``, and its docstring's first
line is the command's help.
"""

import argparse
import importlib
import logging
import os
import sys

from keras_vit.hardware import terminal

COMMANDS = {
    "info": "keras_vit.cli.info",
    "export": "keras_vit.cli.export",
    "quantization-report": "keras_vit.cli.quantization_report",
    "predict": "keras_vit.cli.predict",
    "attention": "keras_vit.cli.attention",
    "train": "keras_vit.cli.train",
    "convert": "keras_vit.cli.convert",
    "resize": "keras_vit.cli.resize",
}

# what the command set in its own environment before TensorFlow started (see keras_vit.hardware.onednn.onednn_environment)
ENVIRONMENT_SET = {}

VERBOSE_ENV = "KERAS_VIT_VERBOSE"
VERBOSE_HELP = f"show TensorFlow's and LiteRT's information and warnings too (or {VERBOSE_ENV}=1)"
# TensorFlow's Python loggers (deprecation notes, tracing advice): errors only unless --verbose
PYTHON_LOGGERS = ("absl", "tensorflow")


def build_parser():
    parser = argparse.ArgumentParser(prog="keras-vit", description="Vision Transformer for Keras 3.")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        help_text = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None
        sub = subparsers.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(sub)
        modules[name] = module
    return parser, modules


def verbose_requested(argv):
    """``keras-vit --verbose COMMAND ...`` (before the command), or ``KERAS_VIT_VERBOSE=1``: every log line shown.

    Read before the parser exists, since TensorFlow starts (and prints) before the arguments are
    parsed; after the command, ``--verbose`` is the command's own (``train --verbose 2``: Keras' progress).

    Example:
    >>> verbose_requested(["--verbose", "predict", "m.keras"]), verbose_requested(["train", "--verbose", "2"])
    (True, False)
    """
    if os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    for token in argv:
        if token == "--verbose":
            return True
        if not token.startswith("-") or token == "--":
            return False
    return False


def quiet_tensorflow(verbose=False):
    """Start TensorFlow with its C++ start-up lines (oneDNN notices, CUDA probing) filtered out.

    TensorFlow 2.21 writes them to file descriptor 2 before absl's logging is initialised, and its
    CUDA build logs an ERROR for the ``cuInit`` it cannot make on a machine without an NVIDIA driver,
    so ``TF_CPP_MIN_LOG_LEVEL`` alone does not silence them. With ``TF_CPP_MIN_LOG_LEVEL=2`` (set
    unless the user set it) the import and the device probing run under
    :func:`keras_vit.hardware.terminal.native_stderr_filtered`, which writes back every line but
    TensorFlow's and LiteRT's information and warnings (real errors stay); the ``absl`` and
    ``tensorflow`` Python loggers show errors only. ``verbose`` (``--verbose``,
    ``KERAS_VIT_VERBOSE=1``) or ``TF_CPP_MIN_LOG_LEVEL=0`` shows everything. Only the ``keras-vit``
    command calls this; importing the library changes nothing.

    On an AVX2 CPU where TensorFlow would leave its oneDNN kernels off, it
    turns them on first (``TF_ENABLE_ONEDNN_OPTS=1``, unless the user set the
    variable): keras_vit's default path is faster than timm there only with them.
    It does so under another Keras backend too, where TensorFlow starts later if
    at all (a SavedModel to predict with, an export, tf.data).
    """
    if verbose:
        os.environ[terminal.LEVEL_ENV] = "0"
    else:
        os.environ.setdefault(terminal.LEVEL_ENV, "2")
        if terminal.native_log_level() >= 2:
            for name in PYTHON_LOGGERS:
                logging.getLogger(name).setLevel(logging.ERROR)
    if "tensorflow" in sys.modules:
        return
    from keras_vit.hardware import onednn

    ENVIRONMENT_SET.update(onednn.onednn_environment())
    os.environ.update(ENVIRONMENT_SET)
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return
    with terminal.native_stderr_filtered():
        try:
            import tensorflow as tf
        except ImportError:
            return  # reported, with stderr back, by the command that needs it
        tf.config.list_physical_devices()  # the CUDA probing (cuInit) happens here, once, filtered


def main(argv=None):
    quiet_tensorflow(verbose_requested(sys.argv[1:] if argv is None else argv))
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args) or 0
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2

