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
import re
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
# reST in docstrings, shown plainly in --help: :class:`~a.b.C` -> C, :mod:`a.b` -> a.b, ``x`` -> x
_REST_TILDE = re.compile(r":[a-z]+:`~[^`]*?([^.`]+)`")
_REST_ROLE = re.compile(r":[a-z]+:`([^`]+)`")


def plain(text):
    """``text`` (a docstring, a flag's help) without its reST markup, as ``--help`` prints it.

    Example:
    >>> plain("Writes ``metrics.json``; see :func:`keras_vit.train.job.run` and :class:`~keras_vit.train.job.TrainConfig`.")
    'Writes metrics.json; see keras_vit.train.job.run and TrainConfig.'
    """
    if text is None:
        return None
    text = _REST_TILDE.sub(r"\1", text)
    text = _REST_ROLE.sub(r"\1", text)
    return text.replace("``", "")


def command_name(argv):
    """The command named in ``argv`` (the first word that is not an option), or None.

    Example:
    >>> command_name(["--verbose", "predict", "m.keras"]), command_name(["--help"])
    ('predict', None)
    """
    for token in argv:
        if token == "--":
            return None
        if not token.startswith("-"):
            return token
    return None


def build_parser(commands=None):
    """The ``keras-vit`` parser: every command listed, the flags of those in ``commands`` only (default: all).

    A command's flags take their types and choices from the modules that own them;
    ``keras-vit --help`` and ``keras-vit COMMAND --help`` build only what they print, without Keras.
    Every command takes ``--verbose`` (before or after its name), with one meaning: :data:`VERBOSE_HELP`.
    """
    parser = argparse.ArgumentParser(prog="keras-vit", description="Vision Transformer for Keras 3.")
    parser.add_argument("--verbose", dest="show_logs", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        doc = plain(module.__doc__ or "").strip()
        sub = subparsers.add_parser(name, help=doc.splitlines()[0] if doc else None, description=doc or None)
        if commands is None or name in commands:
            module.add_arguments(sub)
            # the global switch after the command too; SUPPRESS: when absent here, `keras-vit --verbose CMD` stays True
            sub.add_argument("--verbose", dest="show_logs", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
            for action in sub._actions:  # argparse keeps no public list of a parser's arguments
                action.help = plain(action.help)
        modules[name] = module
    return parser, modules


def verbose_requested(args):
    """``--verbose`` (before or after the command) or ``KERAS_VIT_VERBOSE=1``: every log line shown.

    Example:
    >>> verbose_requested(argparse.Namespace(show_logs=True)), verbose_requested(argparse.Namespace(show_logs=False))
    (True, False)
    """
    if os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    return bool(getattr(args, "show_logs", False))


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


def attached(argv, flags=("--input-range",)):
    """``argv`` with ``--input-range -1-1`` as ``--input-range=-1-1``: argparse reads a value that starts with "-" and is
    no plain negative number as a flag ("expected one argument").

    Example:
    >>> attached(["predict", "m.keras", "--input-range", "-1-1", "-v"])
    ['predict', 'm.keras', '--input-range=-1-1', '-v']
    """
    out = []
    for token in argv:
        if out and out[-1] in flags and token.startswith("-") and not token.startswith("--"):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def main(argv=None):
    argv = attached(sys.argv[1:] if argv is None else list(argv))
    parser, modules = build_parser(commands=(command_name(argv),))
    args = parser.parse_args(argv)  # --help and bad flags end here, before TensorFlow starts
    quiet_tensorflow(verbose_requested(args))
    try:
        return modules[args.command].run(args) or 0
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback through TensorFlow
        resume = " (the same command resumes from its last backup, if one was saved)" if args.command == "train" else ""
        print(f"keras-vit {args.command}: interrupted{resume}", file=sys.stderr)
        return 130

