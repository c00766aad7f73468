"""The ``keras-vit`` command line.

Each subcommand lives in the module that owns its feature; this file only
maps names to modules, imported when the command runs. A command module has
``add_arguments(parser)`` and ``run(args) -> int``, and its docstring's first
line is the command's help.
"""

import argparse
import contextlib
import importlib
import os
import sys

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


def build_parser():
    parser = argparse.ArgumentParser(prog="keras-vit", description="Vision Transformer for Keras 3.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        help_text = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else None
        sub = subparsers.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(sub)
        modules[name] = module
    return parser, modules


@contextlib.contextmanager
def native_stderr_hidden():
    """Send file descriptor 2 to /dev/null for the block (TensorFlow's C++ lines bypass ``sys.stderr``).

    Nothing is hidden when ``TF_CPP_MIN_LOG_LEVEL`` is 0 or 1 (the user asked
    for the lines); descriptor 2 is restored before any exception leaves.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") in ("0", "1"):
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_tensorflow():
    """Import TensorFlow with its C++ start-up lines (oneDNN notices, CUDA probing) hidden.

    TensorFlow 2.21 writes them to file descriptor 2 before absl's logging is
    initialised, so ``TF_CPP_MIN_LOG_LEVEL`` alone does not silence them.
    ``TF_CPP_MIN_LOG_LEVEL=0`` (or 1) shows them again. Only the ``keras-vit``
    command calls this; importing the library changes nothing.

    On an AVX2 CPU where TensorFlow would leave its oneDNN kernels off, it
    turns them on first (``TF_ENABLE_ONEDNN_OPTS=1``, unless the user set the
    variable): keras_vit's default path is faster than timm there only with them.
    It does so under another Keras backend too, where TensorFlow starts later if
    at all (a SavedModel to predict with, an export, tf.data).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules:
        return
    from keras_vit.hardware import onednn

    ENVIRONMENT_SET.update(onednn.onednn_environment())
    os.environ.update(ENVIRONMENT_SET)
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return
    with native_stderr_hidden():
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass  # reported, with stderr back, by the command that needs it


def main(argv=None):
    quiet_tensorflow()
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    try:
        return modules[args.command].run(args) or 0
    except (ValueError, FileNotFoundError, OSError) as error:
        print(f"keras-vit {args.command}: error: {error}", file=sys.stderr)
        return 2

