"""The house's shape rule for functions (``STYLE.md``): none over 60 lines without a stated reason.

A function's length counts from its first decorator (or its ``def``) to its last line. A longer one passes
only when the comment lines directly above it hold one that starts ``# over 60 lines`` and says why.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rubrics", "envs", "train")
MAX_FUNCTION_LINES = 60
REASON = "# over 60 lines"

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Every function and method under ``node``, nested ones included, with its dotted name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{child.name}", child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _has_reason(lines: list[str], first: int) -> bool:
    """Whether the block of comment lines right above line ``first`` (1-based) holds the reason."""
    above = first - 2
    while above >= 0 and lines[above].lstrip().startswith("#"):
        if lines[above].lstrip().startswith(REASON):
            return True
        above -= 1
    return False


def long_functions(path: Path, root: Path = ROOT) -> list[str]:
    """``file:function:length`` of each function of ``path`` over the limit without a stated reason (the
    file named relative to ``root``)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for name, fn in _functions(ast.parse(source, filename=str(path))):
        first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
        length = (fn.end_lineno or fn.lineno) - first + 1
        if length > MAX_FUNCTION_LINES and not _has_reason(lines, first):
            found.append(f"{path.relative_to(root)}:{name}:{length}")
    return found


def test_no_function_is_over_60_lines_without_a_reason() -> None:
    found = [
        f for pkg in PACKAGES for path in sorted((ROOT / pkg).rglob("*.py")) for f in long_functions(path)
    ]
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them by concept, or say why in a comment starting "
        f"'{REASON}' just above: " + ", ".join(found)
    )


def test_the_rule_counts_decorators_and_reads_the_comment_above(tmp_path: Path) -> None:
    body = "".join(f"    x = {i}\n" for i in range(58))
    short = "@decorator\ndef short():\n" + body  # 2 + 58 = 60 lines with its decorator: allowed
    long = "@decorator\ndef long():\n" + body + "    return x\n"  # 61
    excused = (
        "# over 60 lines: one recipe\n# read whole\n@decorator\ndef excused():\n" + body + "    return x\n"
    )
    cut_off = "# over 60 lines: not directly above\n\ndef cut_off():\n" + body + "    x = 1\n    return x\n"
    method = "class C:\n    def method(self):\n" + "".join(f"    {line}" for line in body.splitlines(True))
    method += "        x = 1\n        return x\n"  # 1 + 58 + 2 = 61
    sample = tmp_path / "sample.py"
    sample.write_text("\n\n".join((short, long, excused, cut_off, method)), encoding="utf-8")
    assert long_functions(sample, tmp_path) == [
        "sample.py:long:61",
        "sample.py:cut_off:61",
        "sample.py:C.method:61",
    ]
