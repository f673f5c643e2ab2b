"""No block of the package above cyclomatic complexity 15, by radon's measure.

Every function, method, class, closure and inner class, as ``radon cc --show-closures`` lists them: a
function with a higher score does too many things for a reader to hold in their head at once.
"""

from __future__ import annotations

from pathlib import Path

from radon.complexity import add_inner_blocks, cc_visit

PACKAGE = Path(__file__).resolve().parents[1] / "pegasos_stream"
LIMIT = 15


def _offenders() -> list[str]:
    """``file:line name complexity`` of each block above the limit, in file and line order."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for block in add_inner_blocks(cc_visit(path.read_text(encoding="utf-8"))):
            if block.complexity > LIMIT:
                where = path.relative_to(PACKAGE.parent).as_posix()
                found.append((where, block.lineno, block.fullname, block.complexity))
    return [f"{where}:{line} {name} {complexity}" for where, line, name, complexity in sorted(found)]


def test_no_function_is_above_cyclomatic_complexity_15():
    offenders = _offenders()
    assert not offenders, f"above cyclomatic complexity {LIMIT} (split them):\n" + "\n".join(offenders)
