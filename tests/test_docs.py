"""The README and docs/ stay true: tables match their results files, links resolve, the quick start runs.

The table and link checks read text only (no TensorFlow); the quick start is a slow test.
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import docs_tables  # noqa: E402

DOCS = sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md"))
PAGES = ["README.md", *DOCS, "benchmarks/README.md", "export/README.md"]
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)")


def read(path, root=ROOT):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def github_anchor(heading):
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, root=ROOT):
    text = re.sub(r"```.*?```", "", read(path, root), flags=re.S)
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(path, root=ROOT):
    text = re.sub(r"```.*?```", "", read(path, root), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        yield target


def broken_links(page, root=ROOT):
    """Relative links of ``page`` to a file that does not exist, or to a heading its page lacks."""
    broken = []
    for target in relative_links(page, root):
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(root, resolved)):
            broken.append(f"{target} (no file {resolved})")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved, root):
            broken.append(f"{target} (no heading #{anchor} in {resolved})")
    return broken


# ------------------------------------------------------------ performance tables


def test_performance_tables_match_the_results_files():
    text = read("docs/performance.md")
    assert text.count("<!-- table: ") == text.count("<!-- end table -->") >= 8
    assert docs_tables.differences(text) == [], "run python -m benchmarks.docs_tables --write"


def test_the_check_command_fails_on_an_edited_table(tmp_path):
    text = read("docs/performance.md")
    edited = text.replace("| 5.63 |", "| 6.63 |", 1)
    assert edited != text
    page = tmp_path / "performance.md"
    page.write_text(edited)
    assert docs_tables.main(["--check", str(page)]) == 1
    assert docs_tables.main(["--write", str(page)]) == 0
    assert page.read_text() == text
    assert docs_tables.main(["--check", str(page)]) == 0


def test_tables_name_their_file_and_cpu():
    rendered = docs_tables.render_block("peers cpu-2core-quiet-3.json")
    assert rendered.startswith("*`benchmarks/results/cpu-2core-quiet-3.json`, AMD EPYC, 2 cores (avx512f, avx512_bf16")
    # the B/16 float32 batch-32 row, from the records: 5.588 img/s against timm's 4.653
    row = next(line for line in rendered.splitlines() if line.startswith("| B/16 | 32 | float32 |"))
    assert "5.59" in row and "4.65" in row and f"{5.588 / 4.653:.2f}x" in row
    run = docs_tables.render_block("run cpu-2core-quiet-3.json")
    assert "python -m benchmarks " in run and "--json benchmarks/results/cpu-2core-quiet-3.json" in run


def test_missing_results_file_renders_a_notice_and_bad_markers_are_named(tmp_path):
    assert "No `benchmarks/results/absent.json` yet" in docs_tables.render_block("records absent.json")
    with pytest.raises(ValueError, match="'plot cpu-2core.json'"):
        docs_tables.render_block("plot cpu-2core.json")
    with pytest.raises(ValueError, match="'batch8'"):
        docs_tables.render_block("runtimes cpu-2core.json batch8")
    (tmp_path / "bad.json").write_text('{"command": "x"}')
    with pytest.raises(ValueError, match="bad.json.*no `records` list"):
        docs_tables.render_block("records bad.json", results=str(tmp_path))


# ----------------------------------------------------------------------- links


def test_github_anchor():
    assert github_anchor("Every runtime, ViT-B/16, batch 8") == "every-runtime-vit-b16-batch-8"
    assert github_anchor("Fine-tuning (Section 3.2 of the paper)") == "fine-tuning-section-32-of-the-paper"
    assert github_anchor("`model.predict` is slow") == "modelpredict-is-slow"
    assert github_anchor("keras_vit against timm") == "keras_vit-against-timm"


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_broken_links_are_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Some heading\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok](docs/a.md#some-heading) [web](https://example.com/x.md) [self](#top)\n"
        "[gone](docs/b.md) [bad anchor](docs/a.md#other)\n```\n[in code](nowhere.md)\n```\n# Top\n"
    )
    assert broken_links("README.md", str(tmp_path)) == [
        "docs/b.md (no file docs/b.md)", "docs/a.md#other (no heading #other in docs/a.md)"
    ]


def test_every_docs_page_is_linked_from_the_readme():
    linked = {os.path.normpath(t.partition("#")[0]) for t in relative_links("README.md")}
    assert set(DOCS) <= linked


def test_readme_is_a_front_door():
    text = read("README.md")
    assert len(text.splitlines()) <= 200
    for absent in ("<!-- section:", "issue 7", "tried and dropped", "run 1", "run 2"):
        assert absent not in text.lower()
    for command in ("make train", "make test", "make test-slow"):
        assert command in text


# ------------------------------------------------------------------ quick start


def quick_start_code():
    match = re.search(r"## Quick start\n\n```python\n(.*?)```", read("README.md"), re.S)
    assert match, "README.md has no ```python block under '## Quick start'"
    return match.group(1)


def test_quick_start_uses_the_public_api():
    import keras_vit

    code = quick_start_code()
    assert 8 <= len(code.strip().splitlines()) <= 14
    for name in re.findall(r"keras_vit\.(\w+)", code):
        assert name in keras_vit.__all__, name


@pytest.mark.slow
def test_quick_start_runs(tmp_path):
    """The README's quick start, run as written with ViT-Ti/16 at 32x32 instead of ViT-B/16 at 384x384."""
    from PIL import Image

    import docs_world
    import helpers

    docs_world.flowers(tmp_path / "flowers")
    Image.fromarray(np.full((60, 50, 3), (200, 30, 40), "uint8")).save(tmp_path / "photo.jpg")
    checkpoint = helpers.vit_checkpoint(
        patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768, num_classes=1000, grid=(14, 14)
    )
    helpers.save_npz(tmp_path / "ViT-Ti_16.npz", checkpoint)
    code = quick_start_code()
    tiny = code.replace("ViTB16", "ViTTi16").replace("ViT-B_16.npz", "ViT-Ti_16.npz").replace("384", "32")
    assert tiny.count("ViTTi16") == 1 and "384" not in tiny
    tiny += "\nimport json; json.dump(keras_vit.predict('vit.tflite', ['photo.jpg'], top_k=3), open('out.json', 'w'))\n"
    (tmp_path / "quick_start.py").write_text(tiny)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "quick_start.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("vit.keras", "vit.tflite", "vit.labels.txt"):
        assert (tmp_path / name).is_file(), name
    import json

    (result,) = json.loads((tmp_path / "out.json").read_text())
    labels = [p["label"] for p in result["predictions"]]
    assert sorted(labels) == ["daisy", "roses", "tulips"]  # the class names travelled into the TFLite file
    assert labels[0] == "tulips"  # a red photo, after training on red tulips


MAIN_MODEL_CALL = re.compile(r"`(keras_vit\.conv_stem_vit\([^`]+\))`[^`]{0,200}?174k parameters|"
                             r"174k parameters \(`(keras_vit\.conv_stem_vit\([^`]+\))`")


@pytest.mark.parametrize("page", ["docs/training.md", "docs/models-and-weights.md"])
def test_the_main_jobs_model_is_the_builder_call_the_page_names(page):
    """The 174k-parameter `mnist` model is `conv_stem_vit(stem_channels=(32, 64))`; the pages named the bare builder,
    whose default stem (16, 32) gives 151k, so a reader's `keras_vit.conv_stem_vit()` was not the main job's model."""
    import keras_vit

    match = MAIN_MODEL_CALL.search(read(page))
    assert match, f"{page} names no keras_vit.conv_stem_vit(...) call beside the main job's 174k parameters"
    model = eval(match.group(1) or match.group(2), {"keras_vit": keras_vit})
    assert round(model.count_params() / 1000) == 174
