"""The code blocks of the README and docs/ as the docs-run test sees them (text only, no TensorFlow).

A page's fenced blocks are :class:`Block` s; a ``bash`` block is split into :func:`commands` (``\\``
continuations joined, ``# comments`` dropped) and a command into its environment, its arguments and a
``> file`` redirection (:func:`parse_command`). :func:`substitute` applies the docs-run test's table of
stand-ins to a block's text; :func:`with_flags` sets a command's flags to tiny values.
"""

import dataclasses
import re
import shlex

FENCE = re.compile(r"^```(\S*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
CODE_LANGUAGES = ("python", "bash", "sh", "console")
# fenced blocks that are not code: printed output, a folder listing (each fence must name one of these or code)
TEXT_LANGUAGES = ("text",)
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclasses.dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    language: str
    text: str

    def first_line(self):
        """The first line that is not blank, a comment or an import, without its comment (bash: the first command)."""
        for line in self.text.splitlines():
            stripped = _strip_comment(line)
            if stripped and not re.match(r"^(import |from \S+ import )", stripped):
                return re.sub(r"\s+", " ", stripped)
        return ""

    @property
    def is_code(self):
        return self.language in CODE_LANGUAGES


def blocks(page, text):
    """Every fenced block of ``text`` (the content of ``page``), in order."""
    return [Block(page, text[: m.start()].count("\n") + 1, m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def keyed(found, width=60):
    """``{key: block}``: the key is ``"page: "`` and the block's first line cut at ``width`` characters, then
    `` (2)``, `` (3)``... for a later block of the same page that begins the same way."""
    keys = {}
    for block in found:
        key = f"{block.page}: {block.first_line()[:width]}"
        n = 1
        while (f"{key} ({n})" if n > 1 else key) in keys:
            n += 1
        keys[f"{key} ({n})" if n > 1 else key] = block
    return keys


def commands(text):
    """The commands of a shell block: continuation lines joined, comments and blank lines dropped, ``$ `` prompts cut."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = re.sub(r"^\s*\$ ", "", line)
        if shlex.split(line, comments=True):
            found.append(_strip_comment(line))
    return found


def _strip_comment(line):
    """``line`` without a trailing ``# comment`` outside quotes."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.strip()


@dataclasses.dataclass(frozen=True)
class Command:
    env: dict
    argv: list
    stdout: str | None  # the file of a `> file` redirection


def parse_command(command):
    """The environment assignments, the argument list and the ``>`` target of one shell command."""
    words = shlex.split(command)
    env = {}
    while words and ENV_ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    stdout = None
    if ">" in words:
        at = words.index(">")
        stdout, words = words[at + 1], words[:at]
    return Command(env, words, stdout)


def substitute(text, table):
    """``text`` with each ``(pattern, replacement, why)`` of ``table`` applied (regular expressions, in order)."""
    for pattern, replacement, _ in table:
        text = re.sub(pattern, replacement, text)
    return text


def with_flags(argv, flags):
    """``argv`` with each ``--flag value`` of ``flags`` set: replaced where given, appended where not."""
    argv = list(argv)
    for flag, value in flags.items():
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def drop_lines(text, dropped):
    """``text`` with each line containing a key of ``dropped`` replaced by a ``pass`` naming the reason.

    Returns ``(text, unmatched keys)``: a key that matches no line is stale and the caller says so.
    """
    lines, used = [], set()
    for line in text.splitlines():
        hit = next((key for key in dropped if key in line), None)
        if hit is None:
            lines.append(line)
        else:
            used.add(hit)
            indent = line[: len(line) - len(line.lstrip())]
            lines.append(f"{indent}pass  # not run here: {dropped[hit]}")
    return "\n".join(lines) + "\n", sorted(set(dropped) - used)


def printed_claims(text):
    r"""What a block says its ``print(...)`` lines show: the comment of each, up to a ``": "`` that explains it.

    >>> printed_claims("x = 1\nprint(x.shape)   # (2, 3): 4 x 4 patches\nprint(y)\n")
    ['(2, 3)']
    """
    return [m.group(1).split(": ")[0].strip() for m in re.finditer(r"^print\(.*\)\s+#\s*(.+)$", text, re.M)]
