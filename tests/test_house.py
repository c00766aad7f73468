"""The house rules the import-linter contracts cannot state: small modules, and imports inside functions only to defer.

(`lint-imports`, run by `make test`, checks the floors and circles; see docs/architecture.md.)
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "keras_vit")
MAX_LINES = 450


def modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def test_no_module_is_over_450_lines():
    sizes = {os.path.relpath(path, ROOT): sum(1 for _ in open(path, encoding="utf-8")) for path in modules()}
    assert sizes and not {path: n for path, n in sizes.items() if n > MAX_LINES}


def function_level_imports(path):
    """``(line number, source line, the comment above)`` of every import inside a function of ``path``.

    The comment above is the run of comment and import lines right above it (one comment may explain a
    block of imports).
    """
    with open(path, encoding="utf-8") as f:
        source = f.read()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    above, i = [], inner.lineno - 2
                    while i >= 0 and lines[i].strip().startswith(("#", "import ", "from ", ")")) or (
                        i >= 0 and lines[i].startswith((" ", "\t")) and lines[i].strip().endswith(",")
                    ):
                        above.append(lines[i])
                        i -= 1
                    found.append((inner.lineno, lines[inner.lineno - 1], "\n".join(above)))
    return found


def test_imports_inside_functions_only_defer_a_dependency_and_say_so():
    """Outside cli/ (which imports each command's module when it runs), an import in a function defers a heavy
    or optional dependency (TensorFlow on the other backends, an optional extra), with a comment that says so on
    its line or the line above. A keras_vit module imported that way must be one that starts such a dependency;
    lint-imports sees these imports too, so none can hide an import against the floors."""
    unexplained = []
    for path in modules():
        relative = os.path.relpath(path, ROOT)
        if relative.startswith(os.path.join("keras_vit", "cli") + os.sep):
            continue
        for number, line, above in function_level_imports(path):
            if "deferred" not in line and "deferred" not in above:
                unexplained.append(f"{relative}:{number}: {line.strip()}")
    assert not unexplained, "imports inside functions without a '# deferred: why' comment:\n" + "\n".join(unexplained)


def test_the_checks_see_what_they_check(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import os\n\ndef f():\n    # deferred: optional\n    import json\n    from keras_vit import x\n")
    assert [n for n, _, _ in function_level_imports(str(path))] == [5, 6]
