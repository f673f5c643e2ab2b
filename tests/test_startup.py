"""What stops a command before its first event is one line on stderr (status 2), never a traceback;
a reader of standard output that goes away ends the command quietly."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.cli.main import BROKEN_PIPE_STATUS

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
EVENTS = b'{"id": 1, "x": {"a": 1.0}, "label": true}\n{"id": 2, "x": {"a": -1.0}, "label": false}\n'


def _cli(*args: str, env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, *COMMAND, *args], capture_output=True, timeout=120, env=env, cwd=ROOT, stdin=subprocess.DEVNULL
    )


def _one_error_line(done: subprocess.CompletedProcess) -> str:
    """The one line of a command refused at start-up (status 2, nothing on stdout)."""
    stderr = done.stderr.decode()
    assert done.returncode == 2, stderr
    assert done.stdout == b""
    [line] = stderr.splitlines()
    assert line.startswith("error: ") or line.startswith("configuration error: "), line
    return line


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A configuration of a small binary job, with its events file."""
    (tmp_path / "events.jsonl").write_bytes(EVENTS)
    path = tmp_path / "job.yaml"
    config = {
        "model": {"lambda_": 0.01},
        "source": {"type": "file", "path": "events.jsonl"},
        "output": {"type": "none"},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_a_missing_input_or_a_directory_is_named_by_its_flag_or_key(tmp_path, job):
    missing = tmp_path / "missing.jsonl"
    line = _one_error_line(_cli("eval", "--config", str(job), "--input", str(missing)))
    assert line == f"error: --input {missing}: cannot read: No such file or directory"
    line = _one_error_line(_cli("run", "--config", str(job), "--input", str(tmp_path)))  # a directory is a maildir
    assert line == (
        f"configuration error: --input {tmp_path}: features.type: messages (source.format raw) are text:"
        " expected email, got 'dict'"
    )
    directory = tmp_path / "folder"
    directory.mkdir()
    line = _one_error_line(_cli("run", "--config", str(job), "--set", f"source.path={directory}"))
    assert line == f"error: source.path {directory}: cannot read: Is a directory"
    (tmp_path / "events.jsonl").unlink()
    line = _one_error_line(_cli("run", "--config", str(job)))
    assert line == f"error: source.path {tmp_path / 'events.jsonl'}: cannot read: No such file or directory"


def test_an_output_or_dead_letter_file_in_a_missing_directory_is_refused_before_the_first_event(tmp_path, job):
    output = tmp_path / "no-such-dir" / "predictions.jsonl"
    line = _one_error_line(_cli("run", "--config", str(job), "--output", str(output)))
    assert line == f"error: --output {output}: the directory {output.parent} does not exist"
    dead = tmp_path / "gone" / "rejected.jsonl"
    args = ["--set", "errors.dead_letter.type=file", "--set", f"errors.dead_letter.path={dead}"]
    line = _one_error_line(_cli("eval", "--config", str(job), *args))
    assert line == f"error: errors.dead_letter.path {dead}: the directory {dead.parent} does not exist"
    line = _one_error_line(_cli("run", "--config", str(job), "--output", str(tmp_path)))
    assert line == f"error: --output {tmp_path}: is a directory"


@pytest.fixture
def open_directory() -> Iterator[Path]:
    """A directory anyone may enter (an unprivileged user runs commands in it)."""
    path = Path(tempfile.mkdtemp(prefix="pegasos-startup-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _unprivileged() -> tuple[str, ...]:
    """The prefix that runs a command as a user without special rights (nobody, when this is root)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root, and no setpriv to drop the privileges a permission test needs")
    return ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def test_a_checkpoint_directory_that_cannot_be_used_is_one_line(open_directory):
    (open_directory / "events.jsonl").write_bytes(EVENTS)
    (open_directory / "events.jsonl").chmod(0o644)
    job = open_directory / "job.yaml"
    job.write_text(yaml.safe_dump({"model": {"lambda_": 0.01}, "output": {"type": "none"}}), encoding="utf-8")
    job.chmod(0o644)
    args = ["run", "--config", str(job), "--input", str(open_directory / "events.jsonl")]
    a_file = open_directory / "a-file"
    a_file.write_text("not a directory")
    line = _one_error_line(_cli(*args, "--set", f"checkpoint.dir={a_file / 'checkpoints'}"))
    assert line == f"error: checkpoint.dir {a_file / 'checkpoints'}: cannot be used: Not a directory"
    line = _one_error_line(_cli(*args, "--set", f"checkpoint.dir={a_file}"))
    assert line == f"error: checkpoint.dir {a_file}: not a directory"

    locked = open_directory / "read-only"
    locked.mkdir(mode=0o555)
    locked.chmod(0o555)
    prefix = _unprivileged()
    line = _one_error_line(_cli(*args, "--set", f"checkpoint.dir={locked / 'checkpoints'}", prefix=prefix))
    assert line == f"error: checkpoint.dir {locked / 'checkpoints'}: cannot be used: Permission denied"
    line = _one_error_line(_cli(*args, "--set", f"checkpoint.dir={locked}", prefix=prefix))
    assert line == f"error: checkpoint.dir {locked}: cannot be used: Permission denied ({locked / '.lock'})"


def test_plot_without_matplotlib_is_refused_before_the_replay(tmp_path, job):
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    line = _one_error_line(_cli("eval", "--config", str(job), "--plot", str(tmp_path / "curve.png"), env=env))
    assert line.startswith("error: --plot needs matplotlib (No module named 'matplotlib')"), line
    assert not (tmp_path / "curve.png").exists()
    missing = tmp_path / "no-such-dir" / "curve.png"
    line = _one_error_line(_cli("eval", "--config", str(job), "--plot", str(missing)))
    assert line == f"error: --plot {missing}: the directory {missing.parent} does not exist"


def _closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """The command run by this process (``cli.main``), as ``_cli`` gives a command run by a process of its own."""
    returncode = cli.main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, returncode, captured.out.encode(), captured.err.encode())


def _bootstrap_waits(monkeypatch, kafka_client: str) -> list[float]:
    """The seconds the source's Kafka client is given to find a broker (the list fills as clients start); each
    client waits 0.2 s of them, so that the test need not wait the default's seconds."""
    waits: list[float] = []
    if kafka_client == "kafka-python":
        from pegasos_stream.kafka import python_client

        real = python_client.KafkaConsumer

        def consumer(**settings):
            waits.append(settings["bootstrap_timeout_ms"] / 1000)
            return real(**{**settings, "bootstrap_timeout_ms": 200})

        monkeypatch.setattr(python_client, "KafkaConsumer", consumer)
    else:
        from pegasos_stream.kafka import confluent_client

        class Consumer(confluent_client.Consumer):
            def list_topics(self, *args, timeout: float = -1, **kwargs):
                waits.append(timeout)
                return super().list_topics(*args, timeout=0.2, **kwargs)

        monkeypatch.setattr(confluent_client, "Consumer", Consumer)
    return waits


def test_an_unreachable_kafka_broker_is_one_line_after_a_few_seconds(job, kafka_client, monkeypatch, capsys):
    """The source's client is given the default few seconds to find a broker (not kafka-python's 30 s), then the
    command stops with one line; run in this process, whose clients are watched (``_bootstrap_waits``)."""
    address = f"127.0.0.1:{_closed_port()}"
    source = [
        "--set",
        "source.type=kafka",
        "--set",
        f"source.client={kafka_client}",
        "--set",
        f"source.bootstrap_servers={address}",
        "--set",
        "source.topics=[t]",
        "--set",
        "source.commit_without_checkpoint=true",  # a Kafka source needs checkpoints, or this
    ]
    waits = _bootstrap_waits(monkeypatch, kafka_client)
    line = _one_error_line(_in_process(capsys, "run", "--config", str(job), *source))
    assert line == (
        f"error: source.bootstrap_servers: no Kafka broker answered at {address} within 5 s "
        "(the wait is source.consumer.bootstrap_timeout_ms)"
    )
    assert waits == [5.0]  # the default wait, not kafka-python's 30 s

    output = ["--set", "output.type=kafka", "--set", f"output.bootstrap_servers={address}", "--set", "output.topic=p"]
    line = _one_error_line(
        _in_process(capsys, "run", "--config", str(job), *output, "--set", "output.producer.bootstrap_timeout_ms=500")
    )
    assert line == (
        f"error: output.bootstrap_servers: no Kafka broker answered at {address} within 0.5 s "
        "(the wait is output.producer.bootstrap_timeout_ms)"
    )


def test_a_set_error_names_the_flag_not_the_file():
    line = _one_error_line(_cli("eval", "--set", "model.lambda_=-1"))
    assert line.startswith("configuration error: --set 'model.lambda_=-1': model.lambda_: "), line
    assert "spam.yaml" not in line
    line = _one_error_line(_cli("eval", "--max-events", "-3"))
    assert line == "configuration error: --max-events -3: run.max_events: expected an integer >= 0, got -3"


@pytest.mark.parametrize("args", [["eval"], ["eval", "--output", "-"]], ids=["summary", "predictions"])
def test_eval_ends_quietly_when_the_reader_of_its_output_goes(args):
    """``eval | head``: the reader closes the pipe early (at once, or after one line of the
    predictions): no traceback, nothing on stderr, the status of a process killed by SIGPIPE."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # the predictions do not all fit in the pipe at once
    process = subprocess.Popen([*COMMAND, *args], stdout=write_end, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        if "--output" in args:
            assert reader.readline().startswith(b'{"id": ')
    stderr = process.communicate(timeout=120)[1].decode()
    assert "Traceback" not in stderr and "Error" not in stderr and "Exception" not in stderr, stderr
    assert process.returncode == BROKEN_PIPE_STATUS
