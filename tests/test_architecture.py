"""The dependency rule of ARCHITECTURE.md: subpackages by role, imports one way, no circle.

learners, features and io import nothing else of the package; persist imports learners; kafka imports io; parse
imports io, learners and features; run imports parse and what it does, and persist; serve imports run and what it
does; distribute imports kafka and what it does, learners and persist; nothing imports cli. Checked twice: by
importing each subpackage alone in a fresh interpreter (what it really loads), and by reading every module's import
statements (what it could load, lazy imports included). No module imports another in a circle, not even for a type
checker.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pegasos_stream"

#: Each subpackage and the subpackages it may import (besides itself and `_compiled`, which loads the compiled
#: modules, each in its subpackage): those below it, and what they import in turn (what importing it alone may load).
ALLOWED = {
    "learners": set(),
    "features": set(),
    "testing": set(),
    "io": set(),
    "persist": {"learners"},
    "kafka": {"io"},
    "parse": {"io", "learners", "features"},
    "run": {"io", "parse", "learners", "features", "persist"},
    "serve": {"io", "parse", "run", "learners", "features", "persist"},
    "distribute": {"io", "kafka", "learners", "persist"},
    "users": {"io", "parse", "run", "learners", "features", "persist"},
    "cli": {"learners", "features", "persist", "io", "kafka", "parse", "run", "serve", "distribute", "users"},
}

LOADED = """
import importlib, json, pkgutil, sys
package = importlib.import_module("pegasos_stream.{name}")
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if not module.name.endswith(".__main__"):  # an entry point runs its command when imported
        importlib.import_module(module.name)
print(json.dumps(sorted({{m.split(".")[1] for m in sys.modules if m.startswith("pegasos_stream.")}})))
"""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether ``name`` is a module or a package of the source tree, or a compiled module (known by its stub)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return any(path.with_suffix(suffix).is_file() for suffix in (".py", ".pyi")) or (path / "__init__.py").is_file()


def _imports(path: Path, type_checking: bool = False) -> set[str]:
    """The package modules ``path`` imports when it runs, at any depth of its code (lazy imports
    included; imports for type checkers only too with ``type_checking``, else left out)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    type_only = {  # imports under ``if TYPE_CHECKING:`` never run
        id(inner)
        for node in ast.walk(tree)
        if not type_checking and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            # ``from package import module`` imports that module; ``from module import name``, the module
            submodules = [f"{target}.{alias.name}" for alias in node.names]
            modules = [m for m in submodules if _is_module(m)] or [target]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        found.update(m for m in modules if m.startswith("pegasos_stream"))
    return found


def _graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Each module and the package modules it imports (for type checkers too with ``type_checking``); the
    top-level package is left out (every submodule import passes through it, and it loads nothing until
    asked: the last test)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in _imports(path, type_checking) if m in modules and m not in (name, "pegasos_stream")}
        for name, path in modules.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[str]:
    """Each circle a depth-first walk of ``graph`` closes, as "a -> b -> a"."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    circles = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return circles


def _role(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_every_subpackage_has_a_role_and_the_roles_go_one_way():
    """Each subpackage is in the table (a new one is not left out of the rule), and the table itself is a layering:
    a subpackage may import what those it imports may, and none may import one that may import it."""
    subpackages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(ALLOWED)
    for name, allowed in ALLOWED.items():
        for other in allowed:
            assert ALLOWED[other] <= allowed, f"{name} may import {other}, but not all that {other} may"
            assert name not in ALLOWED[other], f"{name} and {other} may import each other"


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_a_subpackage_imported_alone_loads_only_what_the_rule_allows(name):
    if not (PACKAGE / name).is_dir():
        pytest.skip(f"no {name} subpackage")
    out = subprocess.run(
        [sys.executable, "-c", LOADED.format(name=name)], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out)) - {name, "_compiled"}
    assert loaded <= ALLOWED[name], f"{name} loads {sorted(loaded - ALLOWED[name])}"


def test_every_import_statement_follows_the_dependency_rule():
    broken = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if (role := _role(module)) is not None
        and (other := _role(target)) not in (None, role)
        and other not in ALLOWED[role]
    ]
    assert broken == []


def _compiled_names(path: Path) -> set[str]:
    """The names of `_compiled` a module uses: ``from .._compiled import LOOPS`` and ``_compiled.LOOPS``."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "_compiled":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "_compiled":
            found.add(node.attr)
    return found


def test_each_compiled_module_lies_in_a_subpackage_and_has_its_stub():
    from pegasos_stream import _compiled

    assert set(_compiled.NAMES.values()) == set(_compiled.MODULES)
    for module in _compiled.MODULES:
        assert _role(module) is not None, f"{module} lies in no subpackage of the table"
        stub = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".pyi")
        assert stub.is_file(), f"{module} has no stub"
        assert stub.with_suffix(".c").is_file(), f"{module} has no C source beside its stub"
    assert not list(PACKAGE.glob("_fast*")), "the former compiled module _fast is left in the package"


def test_each_compiled_module_is_used_only_where_its_subpackage_may_be_imported():
    """learners/ uses its loops, parse/ its parsers (and may use the learners' loops), io/ its block reader, features/
    its text reader; a layer never loads the compiled module of a layer above it, so that importing it alone loads
    no other subpackage (`_compiled` loads each module on first use)."""
    from pegasos_stream import _compiled

    broken = []
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        role = _role(module)
        for name in _compiled_names(path) & set(_compiled.NAMES):
            owner = _role(_compiled.NAMES[name])
            if role is not None and owner != role and owner not in ALLOWED[role]:
                broken.append(f"{module} uses {name} ({_compiled.NAMES[name]})")
    assert broken == []


def test_nothing_outside_the_command_line_imports_it():
    graph = _graph()
    importers = sorted(
        m for m, targets in graph.items() if _role(m) != "cli" and any(_role(t) == "cli" for t in targets)
    )
    assert importers == []


def test_the_modules_import_each_other_without_a_circle():
    assert _circles(_graph()) == []


def test_no_circle_even_through_the_imports_for_type_checkers():
    """Every import statement counts, those under ``if TYPE_CHECKING:`` and inside functions too: a module that
    names another's types only for the type checker still depends on it (a `Protocol` below both breaks such a
    circle, as `learners.protocols` does for `linear`, `compiled`, `members` and `steps`)."""
    assert _circles(_graph(type_checking=True)) == []


def test_the_top_level_package_loads_no_subpackage_until_asked():
    code = (
        "import json, sys, pegasos_stream; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pegasos_stream.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_a_run_that_writes_no_checkpoint_reads_no_mail_and_joins_no_group_imports_none_of_their_modules(tmp_path):
    """hashlib (it loads OpenSSL, about 4 MB), tempfile and zipfile serve checkpoints and configuration hashes, the
    email package the reading of messages, socket and uuid a cluster's names and checkpoint locks: an eval of
    feature events that writes no checkpoint runs without importing them."""
    (tmp_path / "events.jsonl").write_bytes(b'{"x": {"a": 1.0}, "label": true}\n{"x": {"a": -1.0}, "label": false}\n')
    job = tmp_path / "job.yaml"
    job.write_text('{"model": {"lambda_": 0.01}, "source": {"type": "file", "path": "events.jsonl"}}', encoding="utf-8")
    code = (
        "import sys\nfrom pegasos_stream.cli.main import main\ntry:\n    main(sys.argv[1:])\nfinally:\n"
        "    modules = ('hashlib', 'tempfile', 'zipfile', 'email', 'socket', 'uuid')\n"
        "    print(sorted(m for m in modules if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "eval", "--config", str(job), "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["events"] == 2
    assert done.stderr.splitlines()[-1] == "[]"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
@pytest.mark.parametrize("given", [None, "2"])
def test_the_command_line_runs_one_blas_thread_unless_the_environment_says(given):
    """OpenBLAS reads ``OPENBLAS_NUM_THREADS`` when numpy loads; the command line sets it to 1 unless it is set."""
    env = {name: value for name, value in os.environ.items() if name != "OPENBLAS_NUM_THREADS"}
    if given:
        env["OPENBLAS_NUM_THREADS"] = given
    code = (
        "import os\nimport pegasos_stream.cli\nimport numpy\n"
        "print(os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    value, threads = out.split()
    assert value == (given or "1")
    if not given:
        assert threads == "1"  # numpy loaded, and no thread of OpenBLAS's started
