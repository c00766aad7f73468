"""A page read top to bottom does not write the same export twice: the second would be refused.

``export_model`` and ``keras-vit export`` / ``convert`` / ``resize`` refuse an existing ``.tflite``, ``.onnx`` or
``.keras`` output (``FileExistsError``; ``overwrite=True`` / ``--overwrite`` replaces it) and an existing keras-hub
preset folder (never replaced). The docs-run test runs each block in a fresh folder, so a page whose second block
wrote what its first had written passed there and failed for a reader who ran the page in order: README's
command-line job after its Python quick start (``vit.tflite``), export-and-serving's Android step, family's
Python fine-tuning after its commands (``dinov2.tflite``), interoperability's ``keras-vit export --format keras-hub``
after ``export_model(model, "keras-hub", "vit_preset")``.
"""

import re
import textwrap

import pytest

import docs_blocks
from test_docs import DOCS, read

# export_model(SOURCE, "FORMAT", "PATH", ...): the formats whose output is one path the export refuses to replace
EXPORT_CALL = re.compile(r"export_model\([^,]+,\s*\"(tflite|onnx|keras-hub)\",\s*\"([^\"]+)\"([^\n]*)")
SAVING = {"export": ("tflite", "onnx", "keras-hub"), "convert": None, "resize": None}  # None: any --format


# every fence, indented ones in list items too (docs_blocks.blocks reads the fences at the margin)
ANY_FENCE = re.compile(r"^([ \t]*)```(\S*)[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)


def all_blocks(page):
    text = read(page)
    return [docs_blocks.Block(page, text[: m.start()].count("\n") + 1, m.group(2), textwrap.dedent(m.group(3)))
            for m in ANY_FENCE.finditer(text)]


def writes(page):
    """``[(path, replaces, where)]``: each output a page's code writes, in order, and whether it may replace one."""
    found = []
    for block in all_blocks(page):
        if block.language == "python":
            for match in EXPORT_CALL.finditer(block.text):
                replaces = match.group(1) != "keras-hub" and "overwrite=True" in match.group(3)
                found.append((match.group(2), replaces, f"{page}:{block.line}"))
        elif block.is_code:
            for command in docs_blocks.commands(block.text):
                argv = docs_blocks.parse_command(command).argv
                if argv[:1] != ["keras-vit"] or len(argv) < 2 or argv[1] not in SAVING or "--output" not in argv:
                    continue
                fmt = argv[argv.index("--format") + 1] if "--format" in argv else None
                if SAVING[argv[1]] is not None and fmt not in SAVING[argv[1]]:
                    continue  # a SavedModel export adds a version: it never meets its own earlier output
                found.append((argv[argv.index("--output") + 1], fmt != "keras-hub" and "--overwrite" in argv,
                              f"{page}:{block.line}"))
    return found


def clashes(found):
    seen, problems = {}, []
    for path, replaces, where in found:
        if path.rstrip("/") in seen and not replaces:
            problems.append(f"{where}: writes {path}, which {seen[path.rstrip('/')]} wrote: refused when run in order")
        seen.setdefault(path.rstrip("/"), where)
    return problems


def test_the_scan_reads_indented_blocks():
    assert ("vit.tflite", False, "docs/export-and-serving.md:10") in writes("docs/export-and-serving.md")
    assert any(where.startswith("docs/export-and-serving.md:1") and int(where.split(":")[1]) > 100
               for _, _, where in writes("docs/export-and-serving.md"))  # the Android step, inside a list item


def test_the_scan_finds_a_second_write():
    found = [("vit.tflite", False, "a:1"), ("vit.tflite", False, "a:9"), ("vit.tflite", True, "a:12"), ("p", False, "a:20")]
    assert clashes(found) == ["a:9: writes vit.tflite, which a:1 wrote: refused when run in order"]


@pytest.mark.parametrize("page", ["README.md", *DOCS])
def test_no_page_writes_an_export_twice(page):
    assert clashes(writes(page)) == []
