"""Without the compiled modules: the Python code paths give the results of the compiled ones, the learner and
runner tests pass with PEGASOS_STREAM_PURE_PYTHON=1, and the package installs and runs without a C compiler."""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

import pegasos_stream
from pegasos_stream import PegasosClassifier, _compiled
from pegasos_stream.learners import compiled, rows, weights
from pegasos_stream.learners.rows import Rows

ROOT = Path(__file__).resolve().parents[1]

#: The learner and runner tests run again with the compiled code disabled (about 30 s; 45 s on two busy cores),
#: less the text-reader twin of a committee test (the spam configuration in batches and one at a time).
PURE_PYTHON_TESTS = ["tests/test_runner.py", "tests/test_committee.py", "tests/test_poison.py"]
PURE_PYTHON_SELECTION = ["-m", "not kafka and not slow", "-k", "not (text_events_learned_in_batches and email)"]

needs_compiled = pytest.mark.skipif(_compiled.LOOPS is None, reason="the compiled module is not in use")


def _environment(**variables: str) -> dict[str, str]:
    """This process's environment without the pure-Python switch, plus ``variables``."""
    env = {key: value for key, value in os.environ.items() if key != _compiled.PURE_PYTHON_VARIABLE}
    return {**env, **variables}


def test_the_variable_leaves_every_compiled_module_unused():
    code = (
        "import json, pegasos_stream\n"
        "from pegasos_stream import _compiled\n"
        "from pegasos_stream.features import email\n"
        "from pegasos_stream.parse import fastparse\n"
        "print(json.dumps([pegasos_stream.compiled_available(), _compiled.in_use(),"
        " [getattr(_compiled, name) is None for name in _compiled.NAMES],"
        " email._text is None, fastparse.COMPILED, _compiled.describe()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_environment(PEGASOS_STREAM_PURE_PYTHON="1"),
        capture_output=True,
        text=True,
        check=True,
    )
    available, in_use, no_module, no_text, parsers, described = json.loads(done.stdout)
    assert available is False and not any(in_use.values()) and set(in_use) == set(_compiled.MODULES)
    assert all(no_module) and no_text and parsers is False
    assert described == "pure Python: PEGASOS_STREAM_PURE_PYTHON is set"


@needs_compiled
def test_the_version_says_which_code_runs():
    command = [sys.executable, "-m", "pegasos_stream.cli", "--version"]
    compiled_run = subprocess.run(command, env=_environment(), capture_output=True, text=True, check=True)
    named = ", ".join(name.removeprefix("pegasos_stream.") for name in _compiled.MODULES)
    expected = f"pegasos-stream {pegasos_stream.__version__}, compiled modules in use: {named}"
    assert " ".join(compiled_run.stdout.split()) == expected  # (argparse wraps the line to the terminal's width)
    for value, pure in [("1", True), ("0", False), ("", False)]:
        done = subprocess.run(
            command, env=_environment(PEGASOS_STREAM_PURE_PYTHON=value), capture_output=True, text=True, check=True
        )
        assert ("pure Python" in done.stdout) is pure, (value, done.stdout)


# -- the Python code paths against the compiled ones, on the same input ----------------------------------


@needs_compiled
def test_gather_and_scatter_in_python_match_the_compiled_ones(monkeypatch):
    keys = ["a", 7, "b", ("t", 1), "new", 3.5]
    held = {"a": 1.5, 7: -2.0, "b": 0.25, ("t", 1): 1e-300, 3.5: 4}
    results = []
    for module in (_compiled.LOOPS, None):
        monkeypatch.setattr(compiled, "_loops", module)
        weights_dict = dict(held)
        values, present = compiled.gather(weights_dict, keys)
        stored = compiled.Stored(values, present)
        values[[0, 3]] = [9.0, -1.0]
        values[4] = 0.5
        compiled.scatter(weights_dict, keys, values, stored, np.array([4], dtype=np.int64))
        results.append((values.tolist(), present.tolist(), list(weights_dict.items())))
    assert results[0] == results[1]
    assert results[1][1] == [True, True, True, True, False, True]
    assert results[1][2] == [("a", 9.0), (7, -2.0), ("b", 0.25), (("t", 1), -1.0), (3.5, 4.0), ("new", 0.5)]


@needs_compiled
@pytest.mark.parametrize(
    "indptr, indices, columns",
    [
        ([0, 1, 3], [0, 2, 2], None),
        ([0, 2, 5, 7], [1, 0, 3, 1, 3, 0, 0], ["a", "b", "c", "d"]),
        ([0, 3, 6], [0, 1, 2, 2, 1, 2], [("x", 1), 5, "z"]),
        ([0, 0, 2, 4], [5, 9, 9, 9], None),
    ],
)
def test_the_repeated_column_check_in_python_names_what_the_compiled_one_names(monkeypatch, indptr, indices, columns):
    data = np.ones(len(indices))
    messages = []
    for module in (_compiled.LOOPS, None):
        monkeypatch.setattr(rows, "_loops", module)
        with pytest.raises(ValueError, match="appears more than once") as refused:
            Rows.from_csr(indptr, indices, data, columns)
        messages.append(str(refused.value))
    assert messages[0] == messages[1]


@needs_compiled
def test_a_model_learned_in_python_is_the_compiled_one_bit_for_bit(monkeypatch):
    rng = np.random.default_rng(3)
    xs = [{int(j): float(rng.normal()) for j in rng.choice(40, 6, replace=False)} for _ in range(300)]
    ys = [bool(rng.random() < 0.4) for _ in xs]
    models = []
    for module in (_compiled.LOOPS, None):
        monkeypatch.setattr(compiled, "_loops", module)
        monkeypatch.setattr(weights, "_loops", module)
        monkeypatch.setattr(rows, "_loops", module)
        model = PegasosClassifier(lambda_=1e-3, average=True, fit_intercept=True, class_weight="balanced")
        batch = Rows.from_dicts(xs)
        decisions = model.learn_csr(batch.indptr, batch.indices, batch.data, ys, columns=batch.keys)
        models.append((decisions.tolist(), model._u.to_dict(), model._u.average_to_dict(), model._b, model._t))
    assert models[0] == models[1]


# -- the test suites without the compiled code ----------------------------------------------------------


@pytest.mark.slow
def test_the_learner_and_runner_tests_pass_with_the_compiled_code_disabled():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            *PURE_PYTHON_SELECTION,
            *PURE_PYTHON_TESTS,
        ],
        cwd=ROOT,
        env=_environment(PEGASOS_STREAM_PURE_PYTHON="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 50 and "failed" not in summary and "error" not in summary, summary


# -- an install without a C compiler ---------------------------------------------------------------------


def _copy_project(target: Path) -> None:
    """What a build of the project reads, without anything built or cached."""
    target.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "configs", target / "configs")
    shutil.copytree(
        ROOT / "pegasos_stream",
        target / "pegasos_stream",
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
    )


def _venv(venv: Path) -> tuple[Path, str]:
    """A virtual environment that sees this interpreter's packages (pip, setuptools, numpy, river...), so that
    nothing is downloaded: (its python, its directory of packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    Path(purelib, "test-packages.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n", encoding="utf-8")
    return python, purelib


def _install(python: Path, source: Path, env: dict[str, str]) -> str:
    """Install ``source`` into ``python``'s environment (no index, no build isolation); pip's output."""
    install = subprocess.run(
        [python, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation", "--no-index", source],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]
    return install.stdout + install.stderr


def _install_environment(**variables: str) -> dict[str, str]:
    """The environment of an install: this process's, without PYTHONPATH, plus ``variables``."""
    env = _environment(PIP_DISABLE_PIP_VERSION_CHECK="1", **variables)
    env.pop("PYTHONPATH", None)
    return env


def _compiled_in_use(python: Path, purelib: str, cwd: Path) -> dict[str, bool]:
    """Which compiled modules the package installed in ``purelib`` uses, run by ``python`` from ``cwd``."""
    code = "import json, pegasos_stream._compiled as c; print(json.dumps([c.__file__, c.in_use()]))"
    done = subprocess.run([python, "-c", code], cwd=cwd, env=_install_environment(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    installed, in_use = json.loads(done.stdout)
    assert Path(installed).resolve().is_relative_to(Path(purelib).resolve())
    return in_use


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="CC does not choose the compiler on Windows")
def test_the_package_installs_and_runs_without_a_c_compiler(tmp_path):
    source, elsewhere = tmp_path / "source", tmp_path / "elsewhere"
    _copy_project(source)
    elsewhere.mkdir()
    python, purelib = _venv(tmp_path / "venv")
    env = _install_environment(CC=str(tmp_path / "no-such-compiler"))
    assert "could not be built; it will run its pure-Python code" in _install(python, source, env)

    def run(*args: str) -> str:
        done = subprocess.run(args, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done.stdout

    assert not any(_compiled_in_use(python, purelib, elsewhere).values())
    command = python.parent / "pegasos-stream"
    assert "pure Python, compiled modules not built" in run(str(command), "--version")
    listed = run(str(command), "configs")
    shipped = ["kafka", "kernel-rbf", "personal", "replay-svmlight", "spam"]
    assert [line.split()[0] for line in listed.splitlines()] == shipped
    assert run(str(command), "configs", "spam") == (ROOT / "configs" / "spam.yaml").read_text(encoding="utf-8")
    summary = json.loads(run(str(command), "eval", "--max-events", "50", "--json"))
    assert summary["events"] == summary["learned"] == summary["n"] == 50 and summary["rejected"] == 0
    assert 0.0 <= summary["roc_auc"] <= 1.0


@pytest.mark.slow
@pytest.mark.skipif(os.name == "nt", reason="CC does not choose the compiler on Windows")
@pytest.mark.skipif(shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) is None, reason="no C compiler")
def test_an_install_without_a_c_compiler_never_takes_the_modules_of_an_earlier_build(tmp_path):
    """A checkout holding the build directory of an earlier install with a compiler (its modules newer than the
    sources, which setuptools would skip rebuilding): without a compiler now, they are left out, not installed."""
    source, elsewhere = tmp_path / "source", tmp_path / "elsewhere"
    _copy_project(source)
    elsewhere.mkdir()
    python, purelib = _venv(tmp_path / "venv")
    _install(python, source, _install_environment())
    assert all(_compiled_in_use(python, purelib, elsewhere).values())
    earlier = sorted(path.name for path in (source / "build").rglob("*.so"))
    assert len(earlier) == len(_compiled.MODULES), earlier
    output = _install(python, source, _install_environment(CC=str(tmp_path / "no-such-compiler")))
    assert "could not be built; it will run its pure-Python code" in output
    assert not any(_compiled_in_use(python, purelib, elsewhere).values())
    assert not list((source / "build").rglob("*.so"))
