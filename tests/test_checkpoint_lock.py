"""One run per checkpoint directory, and room for its checkpoints.

1. ``Checkpoints`` locks its directory: a second one on the same directory is refused with the
   holder's pid, host and start time, and gets it once the first is closed (which removes the lock
   file). A lock left by a process killed with SIGKILL is taken over, with a message naming it.
2. The command line: a run started while another process holds the directory exits 2 (a start-up
   refusal) with one line naming the holder, and touches nothing in the directory.
3. Free space: a start with less room than ``keep + 1`` checkpoints the size of the newest one (or, in a
   directory without one yet, of the first one the run would write) is refused with the figures, with
   status 2 (``shutil.disk_usage`` is replaced to pretend a full disk). A disk that fills during the
   run is one line and status 1, the checkpoints written before kept.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import yaml

from pegasos_stream import PegasosClassifier
from pegasos_stream.persist import checkpoint as ck
from pegasos_stream.persist.checkpoint import CheckpointError, Checkpoints, DirectoryInUse, checkpoints

BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")
STATE = {"counts": [0, 0, 0, 0], "pending": [], "pending_counts": [0, 0, 0], "report": {}}
HOLD = (
    "import sys, time\n"
    "from pegasos_stream.persist.checkpoint import Checkpoints\n"
    "held = Checkpoints(sys.argv[1])\n"
    "print('locked', flush=True)\n"
    "time.sleep(120)\n"
)


def _holding(directory: Path) -> subprocess.Popen:
    """A process that locks ``directory`` and sleeps; returns once it holds the lock."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def _reap(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def test_a_second_checkpoints_on_one_directory_is_refused_until_the_first_closes(tmp_path):
    first = Checkpoints(tmp_path)
    record = json.loads((tmp_path / ".lock").read_text())
    assert (record["pid"], record["host"]) == (os.getpid(), socket.gethostname())
    with pytest.raises(DirectoryInUse) as refused:
        Checkpoints(tmp_path)
    assert str(refused.value) == (
        f"checkpoint directory {tmp_path} is in use by pid {os.getpid()} on host {socket.gethostname()} "
        f"(since {record['started']})"
    )
    first.write(PegasosClassifier(), {**STATE, "counts": [5, 0, 0, 0]}, {})
    first.close()
    first.close()  # idempotent
    assert os.listdir(tmp_path) == ["checkpoint-000000000001.pgs"]
    second = Checkpoints(tmp_path)
    assert second.write(PegasosClassifier(), {**STATE, "counts": [6, 0, 0, 0]}, {}).name.endswith("02.pgs")
    second.close()


def test_the_lock_of_a_killed_process_is_taken_over_with_a_message(tmp_path, caplog):
    holder = _holding(tmp_path)
    try:
        with pytest.raises(DirectoryInUse, match=f"is in use by pid {holder.pid} on host "):
            Checkpoints(tmp_path)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    finally:
        _reap(holder)
    left = json.loads((tmp_path / ".lock").read_text())
    with caplog.at_level(logging.WARNING, logger="pegasos_stream"):
        taken = Checkpoints(tmp_path)
    assert caplog.messages == [
        f"checkpoint directory {tmp_path}: taking over the lock left by pid {holder.pid} on host "
        f"{left['host']} (since {left['started']}), which is gone"
    ]
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == os.getpid()
    taken.close()


def test_a_run_on_a_directory_in_use_exits_2_with_one_line(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"id": i, "x": {"a": i / 7}, "label": i % 3 == 0}) + "\n" for i in range(60)))
    directory = tmp_path / "ck"
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "model": {"kind": "linear", "lambda_": 0.01},
                "features": {"type": "dict"},
                "source": {"type": "file", "path": str(events)},
                "output": {"type": "none"},
                "checkpoint": {"dir": str(directory), "every_events": 20, "keep": 3},
            }
        )
    )
    assert subprocess.run([BIN, "run", "--config", str(job)], capture_output=True, timeout=60).returncode == 0
    before = {path.name: path.read_bytes() for path in checkpoints(directory)}
    holder = _holding(directory)
    try:
        record = json.loads((directory / ".lock").read_text())
        for args in ([], ["--resume"]):
            done = subprocess.run([BIN, "run", "--config", str(job), *args], capture_output=True, text=True, timeout=60)
            assert done.returncode == 2
            assert done.stderr.splitlines() == [
                f"error: checkpoint directory {directory} is in use by pid {holder.pid} on host {record['host']} "
                f"(since {record['started']})"
            ]
    finally:
        _reap(holder)
    assert {path.name: path.read_bytes() for path in checkpoints(directory)} == before


DiskUsage = namedtuple("DiskUsage", "total used free")


@pytest.mark.parametrize("keep", [1, 3])
def test_a_start_without_room_for_keep_plus_one_checkpoints_is_refused(tmp_path, monkeypatch, keep):
    writer = Checkpoints(tmp_path, keep=keep)
    model = PegasosClassifier()
    model.learn_one({f"f{i}": 1.0 for i in range(200)}, True)
    for events in (10, 20, 30, 40):
        writer.write(model, {**STATE, "counts": [events, 0, 0, 0]}, {})
    writer.close()
    sizes = [path.stat().st_size for path in checkpoints(tmp_path)]  # (newest first; they differ by a few bytes)
    size = sizes[0]
    needed = max(size, (keep + 1) * size - sum(sizes[:keep]))  # keep + 1 of the newest, less the room kept ones take
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda path: DiskUsage(10**12, 10**12 - needed + 1, needed - 1))
    with pytest.raises(CheckpointError) as refused:
        Checkpoints(tmp_path, keep=keep)
    assert str(refused.value) == (
        f"checkpoint directory {tmp_path} has {needed - 1} bytes free; its checkpoints need {needed} more "
        f"(keep + 1 = {keep + 1} files of about {size} bytes: a new one is written before the oldest is removed)"
    )
    assert not (tmp_path / ".lock").exists()  # released
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda path: DiskUsage(10**12, 10**12 - needed, needed))
    Checkpoints(tmp_path, keep=keep).close()


def _job(tmp_path: Path, events: int = 300) -> Path:
    """A small job over ``events`` events with checkpoints every 100 in tmp_path/ck (hashed into 2^16 columns:
    weight arrays that make a checkpoint of about 1 MB)."""
    lines = [json.dumps({"id": i, "x": {f"f{i % 7}": 1.0}, "label": i % 2 == 0}) for i in range(events)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict", "hash_bits": 16},
        "source": {"type": "file", "path": "events.jsonl"},
        "output": {"type": "none"},
        "checkpoint": {"dir": "ck", "every_events": 100, "keep": 2},
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(config), encoding="utf-8")
    return job


def test_a_start_without_room_for_its_first_checkpoints_is_refused_with_status_2(tmp_path, monkeypatch, capsys):
    from pegasos_stream import cli

    job = _job(tmp_path)
    monkeypatch.setattr(ck.shutil, "disk_usage", lambda path: DiskUsage(10**12, 10**12 - 1_000_000, 1_000_000))
    assert cli.main(["run", "--config", str(job)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    directory = tmp_path / "ck"
    assert line.startswith(f"error: checkpoint directory {directory} has 1000000 bytes free; its checkpoints need ")
    assert "(keep + 1 = 3 files of about " in line
    assert checkpoints(tmp_path / "ck") == []


def test_a_disk_that_fills_during_the_run_is_one_error_line_and_keeps_the_checkpoints_written(
    tmp_path, monkeypatch, capsys
):
    from pegasos_stream import cli

    job = _job(tmp_path)
    write = ck.write_checkpoint
    written = []

    def write_until_full(path, *args):
        if written:
            raise OSError(28, "No space left on device")
        written.append(path)
        return write(path, *args)

    monkeypatch.setattr(ck, "write_checkpoint", write_until_full)
    assert cli.main(["run", "--config", str(job)]) == 1
    [line] = capsys.readouterr().err.splitlines()
    directory = tmp_path / "ck"
    assert line == (
        f"error: checkpoint directory {directory}: cannot write checkpoint-000000000002.pgs: No space left on device"
        " (the checkpoints written before are kept)"
    )
    [kept] = checkpoints(directory)
    assert ck.read_checkpoint(kept)[1]["events"] == 100
