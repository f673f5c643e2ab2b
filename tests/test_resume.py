"""Exact resume: `pegasos-stream run --resume` after SIGKILL, corrupt checkpoints, standard input, Kafka.

The proof is the model digest (``model_sha256``, SHA-256 of the learner's canonical state): a job
killed with SIGKILL at many instants (during start-up, between checkpoints, while a checkpoint
is being written) and resumed each time ends with the digest, and the runner counts, of one
uninterrupted run over the same input. Equal digests mean the learner took every example exactly
once, in order: an example learned twice or skipped changes t and the weights. The rest of the
job's state is compared too: the runner's counts, pending examples and metric state in the final
checkpoint, and the metrics the last run prints (accuracy, F1, ROC AUC over all events).

Predictions are at-least-once: a run emits them as it goes and flushes them before each
checkpoint, so the events between the last checkpoint and a kill are predicted again by the
resumed run. Each repeat is the same prediction (the same model state gives the same score), so
the output is the reference output with stretches replayed, never with a gap or a different value.

Corrupt checkpoints: `--resume` falls back to the newest sound one and says so, never
overwrites a corrupt file (new ones are numbered past it); with none sound it says it starts from
the beginning, and does for files (for Kafka it does not: the last test, failing, shows it).

Timing: the file job is about one second of work; the Kafka one pays a consumer-group join after
each kill (the killed member's 6 s session must expire first), about 12 s a restart, so it kills 4
times. Every wait is bounded and every process started here is killed and reaped.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import logging
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from kafka_helpers import kafka_source_config

from pegasos_stream.cli.config import load_config
from pegasos_stream.cli.inputs import resume_position
from pegasos_stream.io.sinks import repair_last_line
from pegasos_stream.persist.checkpoint import MAGIC, checkpoints, latest_valid, read_checkpoint, write_checkpoint
from pegasos_stream.run.pending import PendingLabels
from pegasos_stream.testing.kafka_broker import committed_offset

BIN = shutil.which("pegasos-stream", path=str(Path(sys.executable).parent)) or shutil.which("pegasos-stream")
EVERY = 50  # events between checkpoints
#: A linear learner with every piece of state in play (averaging, intercept); the stream's
#: ~48,000 distinct features make each checkpoint about 1 MB, so writing one takes a while.
MODEL = {"kind": "linear", "lambda_": 1e-3, "fit_intercept": True, "average": True}


# -- the stream ----------------------------------------------------------------------------


@dataclass
class Stream:
    path: Path
    lines: list[bytes]
    predicted: list[tuple[int, str]]  # (line number from 1, event id) of every line that is predicted


BAD_LINES = [
    b'{"id": "broken", "x": {"a": 1.0',  # malformed JSON
    b"\xff\xfe not UTF-8",
    b"[1, 2, 3]",  # not an object
    b'{"id": "text-value", "x": {"a": "1.5"}, "label": true}',
    b'{"id": "infinite", "x": {"a": 1e400}, "label": false}',
    b'{"id": "bad-label", "x": {"a": 1.0}, "label": "maybe"}',
    b'{"id": "not-a-dict", "x": [1.0, 2.0], "label": true}',
]


def _make_stream(path: Path, n_lines: int = 3000, seed: int = 11, vocabulary: int = 50_000, nnz: int = 60) -> Stream:
    """JSON lines: labelled events, unlabelled ones whose label comes 1-150 lines later (so the
    pending buffer is never empty), labels for unknown ids, malformed records, blank lines."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    predicted: list[tuple[int, str]] = []
    due: list[tuple[int, str, bool]] = []  # (line index at which the label comes, id, label)
    i = 0
    while len(lines) < n_lines:
        due.sort()
        while due and due[0][0] <= len(lines) and len(lines) < n_lines:
            _, event_id, label = due.pop(0)
            lines.append(json.dumps({"id": event_id, "label": label}).encode())
        if len(lines) >= n_lines:
            break
        i += 1
        r = rng.random()
        if r < 0.02:
            lines.append(rng.choice(BAD_LINES))
            continue
        if r < 0.03:
            lines.append(b"" if r < 0.025 else json.dumps({"id": f"nobody{i}", "label": True}).encode())
            continue
        keys = rng.sample(range(vocabulary), nnz)
        x = {f"w{k}": round(rng.gauss(0, 1), 6) for k in keys}
        score = sum(((k * 2654435761) % 1000 / 500 - 1) * v for k, v in zip(keys, x.values()))
        label = score + rng.gauss(0, 1) > 0
        event_id = f"e{i}"
        if r < 0.27:
            lines.append(json.dumps({"id": event_id, "x": x}).encode())
            due.append((len(lines) + rng.randint(1, 150), event_id, label))
        else:
            lines.append(json.dumps({"id": event_id, "x": x, "label": label}).encode())
        predicted.append((len(lines), event_id))
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return Stream(path, lines, predicted)


def _job(directory: Path, source: dict, *, keep: int = 3, run: dict | None = None) -> Path:
    """A job configuration in ``directory``: checkpoints in directory/ck, predictions in directory/out.jsonl."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "model": MODEL,
        "features": {"type": "dict"},
        "source": source,
        "output": {"type": "file", "path": str(directory / "out.jsonl")},
        "evaluation": {"stats_every_seconds": 60},
        "checkpoint": {"dir": str(directory / "ck"), "every_events": EVERY, "keep": keep},
    }
    if run:
        config["run"] = run
    path = directory / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _file_job(directory: Path, stream_path: Path, keep: int = 3) -> Path:
    return _job(directory, {"type": "file", "path": str(stream_path)}, keep=keep)


def _run(job: Path, *args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([BIN, "run", "--config", str(job), *args], capture_output=True, timeout=timeout, **kwargs)


def _inspect(path: Path) -> dict:
    done = subprocess.run([BIN, "inspect", str(path), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _pending(runner: dict) -> list[list]:
    """The pending examples of a checkpoint's runner state (columns) as [id, x, score, age] entries."""
    store = PendingLabels(max_pending=10**9, max_age_seconds=math.inf, clock=lambda: 0.0)
    store.restore_columns(runner["pending"], 0.0)
    return [[key, waiting.x, waiting.score, -waiting.arrived] for key, waiting in store.items()]


def _runner_state(path: Path) -> dict:
    """The runner part of a checkpoint, less the pending examples' ages (wall-clock time)."""
    runner = read_checkpoint(path)[0]["runner"]
    runner["pending"] = [[key, x, score] for key, x, score, _age in _pending(runner)]
    return runner


def _outputs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _assert_replayed_reference(outputs: list[dict], reference: list[dict]) -> int:
    """``outputs`` is ``reference`` with stretches repeated (at-least-once), nothing skipped and
    every value identical; returns the number of repeated predictions."""
    position = {p["id"]: i for i, p in enumerate(reference)}
    assert len(position) == len(reference)
    cursor = repeats = 0
    for n, prediction in enumerate(outputs):
        assert prediction["id"] in position, prediction
        at = position[prediction["id"]]
        assert prediction == reference[at], (n, prediction, reference[at])  # same score, proba, label
        assert at <= cursor, f"output line {n}: {prediction['id']} skips {reference[cursor]['id']}"
        repeats += at < cursor
        cursor = max(cursor, at + 1)
    assert cursor == len(reference), f"output ends at {cursor} of {len(reference)} predictions"
    return repeats


def _metrics(stderr: bytes | str) -> dict:
    """The end-of-run summary (the last line of stderr) less the throughput: the prequential
    metrics, computed from the restored metric state, and the counts."""
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    summary = json.loads(text.strip().splitlines()[-1])
    del summary["examples_per_s"]
    return summary


@dataclass
class Reference:
    checkpoint: Path
    summary: dict  # inspect --json of the final checkpoint
    runner: dict
    outputs: list[dict]
    metrics: dict


def _reference(job: Path, *args: str, timeout: float = 120) -> Reference:
    done = _run(job, *args, timeout=timeout)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    directory = job.parent / "ck"
    final = checkpoints(directory)[0]
    return Reference(
        final, _inspect(directory), _runner_state(final), _outputs(job.parent / "out.jsonl"), _metrics(done.stderr)
    )


@pytest.fixture(scope="module")
def stream(tmp_path_factory) -> Stream:
    return _make_stream(tmp_path_factory.mktemp("stream") / "events.jsonl")


@pytest.fixture(scope="module")
def reference(stream, tmp_path_factory) -> Reference:
    """One uninterrupted run over the whole file."""
    ref = _reference(_file_job(tmp_path_factory.mktemp("reference"), stream.path))
    assert ref.summary["events"] == sum(1 for line in stream.lines if line.strip())
    assert ref.runner["counts"][1] == len(stream.predicted)
    assert ref.runner["pending"], "some labels never come: the final checkpoint holds pending examples"
    assert [p["id"] for p in ref.outputs] == [event_id for _, event_id in stream.predicted]
    return ref


def _assert_same_job_result(directory: Path, reference: Reference, stderr: bytes | str, stdin: bool = False) -> None:
    """The job's final checkpoint and the last run's summary are those of the reference."""
    assert _metrics(stderr) == reference.metrics  # accuracy, F1, ROC AUC, counts, pending, t
    final = checkpoints(directory)[0]
    summary = _inspect(directory)
    assert summary["path"] == str(final)
    assert summary["model_sha256"] == reference.summary["model_sha256"]
    if stdin:  # standard input has line numbers, no offsets
        assert summary["source"] == {"line": reference.summary["source"]["line"]}
    else:  # the end of the file (offset and line; the reference's file may be another), or of the topic
        assert _offsets(summary["source"]) == _offsets(reference.summary["source"])
    assert (summary["t"], summary["weights"], summary["events"]) == (
        reference.summary["t"],
        reference.summary["weights"],
        reference.summary["events"],
    )
    runner = _runner_state(final)
    events, _predicted, learned, rejected = runner["counts"]
    assert (events, learned, rejected) == (
        reference.runner["counts"][0],
        reference.runner["counts"][2],
        reference.runner["counts"][3],
    )
    assert runner == reference.runner  # counts, pending examples, their counters, the metrics


def _offsets(position: dict) -> dict:
    """A source position less the identity of its input."""
    return {key: value for key, value in position.items() if key != "input"}


# -- directory watching (the kill triggers) ------------------------------------------------


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _newest_number(directory: Path) -> int:
    numbers = [int(n[11:23]) for n in _names(directory) if n.startswith("checkpoint-") and n.endswith(".pgs")]
    return max(numbers, default=0)


def _temporaries(directory: Path) -> set[str]:
    return {n for n in _names(directory) if n.startswith(".tmp-")}


def _assert_every_checkpoint_loads(directory: Path) -> dict | None:
    """SIGKILL never leaves a corrupt checkpoint (atomic writes); the newest one's manifest."""
    for path in checkpoints(directory):
        read_checkpoint(path)
    skipped: list[str] = []
    found = latest_valid(directory, report=skipped.append)
    assert skipped == []
    if found is None:
        return None
    path, state, manifest = found
    return {
        "path": path,
        "t": state["model"].t,
        "events": manifest["events"],
        "source": manifest["source"],
        "pending": len(_pending(state["runner"])),
    }


def _spawn(job: Path, log: Path, *args: str, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    with open(log, "wb") as err:
        return subprocess.Popen(
            [BIN, "run", "--config", str(job), "--resume", *args], stdin=stdin, stdout=subprocess.DEVNULL, stderr=err
        )


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _kill(proc: subprocess.Popen, mode: str, rng: random.Random, directory: Path, limit: float = 45.0) -> dict | None:
    """SIGKILL ``proc`` at an instant chosen by ``mode``; None if it finished by itself first.

    "early": after 0-0.3 s (interpreter start-up, imports, the first events);
    "between": a few ms after its k-th checkpoint (k random in 1..8), between two checkpoints;
    "write": while its k-th checkpoint is being written (its temporary file exists).
    """
    base, known = _newest_number(directory), _temporaries(directory)
    started = time.monotonic()
    k = rng.randint(1, 8)
    if mode == "early":
        try:
            proc.wait(timeout=rng.uniform(0.0, 0.3))
            return None
        except subprocess.TimeoutExpired:
            pass
    else:
        while True:
            if proc.poll() is not None:
                return None
            assert time.monotonic() - started < limit, f"no trigger for {mode!r} within {limit} s"
            written = _newest_number(directory) - base
            if mode == "between" and written >= k:
                time.sleep(rng.uniform(0.0, 0.01))
                break
            if mode == "write" and written >= k - 1 and _temporaries(directory) - known:
                break
            time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    if proc.returncode != -signal.SIGKILL:
        assert proc.returncode == 0
        return None
    return {
        "mode": mode,
        "after_s": round(time.monotonic() - started, 3),
        "wrote": _newest_number(directory) - base,
        "mid_write": bool(_temporaries(directory) - known),  # its temporary file is left behind
    }


# -- 3. SIGKILL, file source -----------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_at_many_instants_then_resume_gives_the_uninterrupted_model(stream, reference, tmp_path):
    job = _file_job(tmp_path, stream.path)
    directory = tmp_path / "ck"
    rng = random.Random(20240611)
    middle = ["early"] * 3 + ["write"] * 6 + ["between"] * 5
    rng.shuffle(middle)
    schedule = ["early", *middle]  # the very first kill comes before any checkpoint exists
    kills, last_stderr = [], None
    for attempt, mode in enumerate(schedule):
        log = tmp_path / f"run-{attempt}.err"
        proc = _spawn(job, log)
        try:
            kill = _kill(proc, mode, rng, directory)
        finally:
            _reap(proc)
        if kill is None:  # ended by itself: the job is done
            last_stderr = log.read_text()
            break
        kill["newest"] = _assert_every_checkpoint_loads(directory)
        kills.append(kill)
    if last_stderr is None:
        done = _run(job, "--resume")  # the last run goes to the end
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        last_stderr = done.stderr.decode()
    assert "resuming from " in last_stderr

    described = "\n".join(map(str, kills))
    print(described)
    assert len(kills) >= 12, described
    progress = [k["newest"]["events"] if k["newest"] else 0 for k in kills]
    assert len(set(progress)) >= 7, described  # kills spread along the stream
    assert sum(k["mid_write"] for k in kills) >= 2, described  # some while a checkpoint was written
    assert sum(k["wrote"] == 0 for k in kills) >= 2, described  # some before that run's first checkpoint
    assert kills[0]["newest"] is None, described  # the very first: no checkpoint yet
    assert any(k["newest"] and k["newest"]["pending"] for k in kills), described  # pending examples were saved

    _assert_same_job_result(directory, reference, last_stderr)
    # The model learned each event exactly once (the digest above); the predictions are
    # at-least-once: every prediction is there, in order, some repeated after a restart.
    repeats = _assert_replayed_reference(_outputs(tmp_path / "out.jsonl"), reference.outputs)
    assert repeats > 0


# -- 2. corrupt checkpoints and --resume -----------------------------------------------------


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _number(path: Path) -> int:
    return int(path.name[11:23])


@pytest.mark.slow
def test_resume_falls_back_past_a_corrupt_newest_checkpoint(stream, reference, tmp_path):
    job = _file_job(tmp_path, stream.path, keep=100)
    directory = tmp_path / "ck"
    assert _run(job, "--max-events", "1000").returncode == 0
    files = checkpoints(directory)
    newest, previous = files[0], files[1]
    _flip_middle_byte(newest)
    corrupt = newest.read_bytes()
    state, manifest = read_checkpoint(previous)

    done = _run(job, "--resume", "--max-events", "1500")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    assert lines[:2] == [
        f"skipping {newest}: checksum mismatch: the file is truncated or corrupted",
        f"resuming from {previous} (t={state['model'].t}, {manifest['events']} events)",
    ]
    assert newest.read_bytes() == corrupt  # left as it was, not overwritten
    written = [p for p in checkpoints(directory) if p not in files]
    assert written and min(map(_number, written)) == _number(newest) + 1  # numbered past it
    assert read_checkpoint(written[0])[1]["events"] == 1500

    done = _run(job, "--resume")
    assert done.returncode == 0
    assert f"resuming from {written[0]} " in done.stderr.decode()
    _assert_same_job_result(directory, reference, done.stderr)


@pytest.mark.slow
def test_resume_with_every_checkpoint_corrupt_starts_from_the_beginning(stream, reference, tmp_path):
    """The CLI reports each refused file (newest first), says it starts from the beginning, and
    does: fresh learner, counts from 0, the file read from its first line; new checkpoints are
    numbered past the corrupt ones, which stay as they are."""
    job = _file_job(tmp_path, stream.path, keep=100)
    directory = tmp_path / "ck"
    assert _run(job, "--max-events", "300").returncode == 0
    files = checkpoints(directory)
    assert len(files) == 6  # every 50 events; the one at 300 is also the last (no duplicate final)
    damage = [lambda p: p.write_bytes(b""), lambda p: p.write_bytes(p.read_bytes()[:-1]), _flip_middle_byte]
    for n, path in enumerate(files):
        damage[n % 3](path)
    before = {p: p.read_bytes() for p in files}
    reasons = [
        "not a pegasos-stream checkpoint (or truncated before its header)",
        "checksum mismatch: the file is truncated or corrupted",
        "checksum mismatch: the file is truncated or corrupted",
    ]

    done = _run(job, "--resume", "--max-events", "200")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    assert lines[: len(files) + 1] == [f"skipping {p}: {reasons[n % 3]}" for n, p in enumerate(files)] + [
        f"no checkpoint in {directory}: starting from the beginning"
    ]
    assert not any(line.startswith("resuming from") for line in lines)
    assert json.loads(lines[-1])["events"] == 200  # counted from zero
    assert {p: p.read_bytes() for p in files} == before
    written = [p for p in checkpoints(directory) if p not in files]
    assert min(map(_number, written)) == _number(files[0]) + 1
    _, manifest = read_checkpoint(written[0])
    assert manifest["events"] == 200 and manifest["t"] <= 200
    assert manifest["source"]["line"] < 300  # read again from the start of the file

    done = _run(job, "--resume")
    assert done.returncode == 0
    _assert_same_job_result(directory, reference, done.stderr)


@pytest.mark.slow
def test_resume_of_a_gzip_file_and_with_another_configuration(stream, reference, tmp_path):
    """Offsets of a .gz file are offsets into the decompressed stream; a changed configuration
    is resumed with a warning when --accept-config says to."""
    compressed = tmp_path / "events.jsonl.gz"
    compressed.write_bytes(gzip.compress(stream.path.read_bytes()))
    job = _file_job(tmp_path, compressed)
    assert _run(job, "--max-events", "1234").returncode == 0
    _, manifest = read_checkpoint(checkpoints(tmp_path / "ck")[0])
    assert manifest["events"] == 1234 and manifest["source"]["offset"] > compressed.stat().st_size / 10
    newest = checkpoints(tmp_path / "ck")[0]
    done = _run(job, "--resume", "--accept-config", "--set", "evaluation.stats_every_seconds=59")
    assert done.returncode == 0
    assert done.stderr.decode().splitlines()[:2] == [
        f"warning: {newest} was written with another configuration",
        f"resuming from {newest} (t={manifest['t']}, 1234 events)",
    ]
    _assert_same_job_result(tmp_path / "ck", reference, done.stderr)


def test_resume_refuses_a_checkpoint_of_another_configuration_unless_told_to_accept_it(stream, tmp_path):
    """Another λ, or another kind of model: the run refuses to start (one line, exit 2, nothing
    written) rather than continue the checkpoint's model in place of the configured one; with
    --accept-config it continues it, with a warning."""
    job = _file_job(tmp_path, stream.path, keep=100)
    directory = tmp_path / "ck"
    assert _run(job, "--max-events", "200").returncode == 0
    files = {p: p.read_bytes() for p in checkpoints(directory)}
    newest = checkpoints(directory)[0]
    kernel = tmp_path / "kernel.yaml"
    kernel.write_text(
        yaml.safe_dump({**yaml.safe_load(job.read_text()), "model": {"kind": "kernel", "lambda_": 1e-3}}),
        encoding="utf-8",
    )
    for changed in (["--config", str(job), "--set", "model.lambda_=0.5"], ["--config", str(kernel)]):
        done = subprocess.run([BIN, "run", *changed, "--resume"], capture_output=True, timeout=120)
        assert done.returncode == 2
        assert done.stderr.decode().splitlines() == [
            f"configuration error: {newest} was written with another configuration; "
            "resume with --accept-config to continue its model and state under this one"
        ]
        assert {p: p.read_bytes() for p in checkpoints(directory)} == files
    done = _run(job, "--resume", "--accept-config", "--set", "model.lambda_=0.5", "--max-events", "300")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stderr.decode().splitlines()[0] == f"warning: {newest} was written with another configuration"
    assert read_checkpoint(checkpoints(directory)[0])[1]["events"] == 300


@pytest.mark.slow
def test_resume_skips_a_crafted_newer_checkpoint_whose_member_claims_1e11_elements(stream, reference, tmp_path):
    """A checksummed newer file whose array member claims 10^11 float64 (800 GB) in 64 bytes is
    refused from its header, with a message, and the run resumes from the good one before it."""
    job = _file_job(tmp_path, stream.path, keep=100)
    directory = tmp_path / "ck"
    assert _run(job, "--max-events", "1000").returncode == 0
    good = checkpoints(directory)[0]
    state, manifest = read_checkpoint(good)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**11,)})
    payload = io.BytesIO(good.read_bytes()[len(MAGIC) + 32 :])
    with zipfile.ZipFile(payload, "a") as archive:
        archive.writestr("huge.npy", header.getvalue() + bytes(64))
    crafted = directory / f"checkpoint-{_number(good) + 1:012d}.pgs"
    crafted.write_bytes(MAGIC + hashlib.sha256(payload.getvalue()).digest() + payload.getvalue())

    done = _run(job, "--resume")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stderr.decode().splitlines()[:2] == [
        f"skipping {crafted}: unreadable payload: member huge.npy claims {8 * 10**11} bytes of data in 64",
        f"resuming from {good} (t={state['model'].t}, {manifest['events']} events)",
    ]
    _assert_same_job_result(directory, reference, done.stderr)


# -- 5. standard input -------------------------------------------------------------------------


def _resumed_output_start(output: Path, scratch: Path) -> int:
    """Where a resumed run's output starts in the file ``output`` a killed run left: its size once
    `io.sinks.repair_last_line`, which the resumed run calls first, has ended or dropped its last line (on a copy in
    ``scratch``, the file itself left for the run)."""
    if not output.exists():
        return 0
    shutil.copyfile(output, scratch)
    repair_last_line(scratch)
    return scratch.stat().st_size


@pytest.mark.slow
def test_stdin_resume_skips_the_lines_already_covered(stream, reference, tmp_path):
    job = _file_job(tmp_path, stream.path)  # --input - makes it a stdin job
    directory, output = tmp_path / "ck", tmp_path / "out.jsonl"
    data = stream.path.read_bytes()
    proc = _spawn(job, tmp_path / "first.err", "--input", "-", stdin=subprocess.PIPE)

    def feed() -> None:
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except (BrokenPipeError, OSError):  # killed while reading
            pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 45
        while _newest_number(directory) < 25:  # about 1,250 events in
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.002)
        time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        _reap(proc)
        writer.join(timeout=10)
        if not proc.stdin.closed:
            with contextlib.suppress(OSError):
                proc.stdin.close()
    assert proc.returncode == -signal.SIGKILL
    newest = _assert_every_checkpoint_loads(directory)
    covered = newest["source"]["line"]
    assert newest["source"] == {"line": covered} and covered > 1000
    already = _resumed_output_start(output, tmp_path / "killed-output.jsonl")
    left = json.loads((directory / ".lock").read_text())  # the killed run's lock
    assert left["pid"] == proc.pid

    done = _run(job, "--resume", "--input", "-", input=data)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    assert lines[:3] == [
        f"checkpoint directory {directory}: taking over the lock left by pid {proc.pid} on host {left['host']} "
        f"(since {left['started']}), which is gone",
        f"standard input cannot be re-read: skipping its first {covered} lines",
        f"resuming from {newest['path']} (t={newest['t']}, {newest['events']} events)",
    ]
    assert not any("warning" in line for line in lines)  # same configuration
    _assert_same_job_result(directory, reference, done.stderr, stdin=True)
    # The resumed run predicted exactly the events after the covered lines, once each, in order.
    with open(output, "rb") as out:
        out.seek(already)
        resumed = [json.loads(line) for line in out.read().splitlines()]
    expected_ids = [event_id for line, event_id in stream.predicted if line > covered]
    assert [p["id"] for p in resumed] == expected_ids
    by_id = {p["id"]: p for p in reference.outputs}
    assert resumed == [by_id[event_id] for event_id in expected_ids]
    _assert_replayed_reference(_outputs(output), reference.outputs)


# -- 4. SIGKILL, Kafka source ------------------------------------------------------------------


def _kafka_job(directory: Path, broker: str, topic: str, group: str, total: int, client: str) -> Path:
    source = kafka_source_config(broker, topic, group, client)
    # The run ends after the topic's last record (events are cumulative across resumes); the
    # idle stop is only a bound in case something goes wrong.
    return _job(directory, source, run={"max_events": total, "stop_when_idle": 40})


def test_sigkill_kafka_source_resumes_exactly_and_commits_only_checkpointed_offsets(
    stream, tmp_path, kafka_client, kafka_broker, kafka_topic, produce
):
    topic = kafka_topic(1)  # one partition: a fixed order of records, so a fixed model
    messages = stream.lines[:1500]  # a blank line is an empty message here, a rejected record
    produce(kafka_broker, topic, messages)
    reference = _reference(
        _kafka_job(tmp_path / "reference", kafka_broker, topic, f"{topic}-ref", len(messages), kafka_client),
        timeout=120,
    )
    assert reference.summary["source"] == {"offsets": [[topic, 0, len(messages)]]}
    assert reference.summary["events"] == len(messages)

    group = f"{topic}-killed"
    job = _kafka_job(tmp_path / "killed", kafka_broker, topic, group, len(messages), kafka_client)
    directory = tmp_path / "killed" / "ck"
    rng = random.Random(4)
    kills = []
    # Two kills while a checkpoint is being written: a commit sent before the checkpoint is
    # durable would show there as a committed offset past the stored one.
    for attempt, mode in enumerate(["write", "between", "write", "between"]):
        proc = _spawn(job, tmp_path / f"kafka-{attempt}.err")
        try:
            kill = _kill(proc, mode, rng, directory, limit=60)
        finally:
            _reap(proc)
        assert kill is not None, (tmp_path / f"kafka-{attempt}.err").read_text()[-3000:]
        newest = _assert_every_checkpoint_loads(directory)
        committed = committed_offset(kafka_broker, group, topic)
        [[stored_topic, partition, stored]] = newest["source"]["offsets"]
        assert (stored_topic, partition) == (topic, 0)
        # Offsets are committed only once a checkpoint covering them is on disk.
        assert committed is not None and committed <= stored, (committed, newest)
        kill.update(events=newest["events"], committed=committed)
        kills.append(kill)
    print("\n".join(map(str, kills)))
    assert len({k["events"] for k in kills}) == len(kills), kills  # each kill further along

    done = _run(job, "--resume", timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"resuming from " in done.stderr
    _assert_same_job_result(directory, reference, done.stderr)
    assert _inspect(directory)["source"] == {"offsets": [[topic, 0, len(messages)]]}
    assert committed_offset(kafka_broker, group, topic) == len(messages)
    _assert_replayed_reference(_outputs(tmp_path / "killed" / "out.jsonl"), reference.outputs)


def test_kafka_resume_with_every_checkpoint_corrupt_reads_the_topic_from_the_beginning(
    stream, tmp_path, kafka_client, kafka_broker, kafka_topic, produce
):
    """With no usable checkpoint `run --resume` says "starting from the beginning". For a file
    it is (the tests above); for Kafka it must be too: the group's committed offsets cover the
    records only the lost learner had learned, so a fresh learner that starts at them has
    silently skipped them. Expected: the topic re-read from offset 0, the uninterrupted model."""
    topic = kafka_topic(1)
    messages = stream.lines[:300]
    produce(kafka_broker, topic, messages)
    group = f"{topic}-group"
    job = _kafka_job(tmp_path, kafka_broker, topic, group, len(messages), kafka_client)
    directory = tmp_path / "ck"
    first = _run(job, timeout=90)
    assert first.returncode == 0, first.stderr.decode()[-3000:]
    uninterrupted = _inspect(directory)
    assert uninterrupted["events"] == len(messages)
    assert committed_offset(kafka_broker, group, topic) == len(messages)
    files = checkpoints(directory)
    for path in files:
        path.write_bytes(path.read_bytes()[:-1])

    done = _run(job, "--resume", "--stop-when-idle", "8", timeout=90)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    assert lines[len(files)] == f"no checkpoint in {directory}: starting from the beginning"
    again = _inspect(directory)
    assert again["path"] != uninterrupted["path"]
    assert (again["events"], again["source"]) == (len(messages), {"offsets": [[topic, 0, len(messages)]]}), (
        f"said 'starting from the beginning' but read {again['events']} of the topic's {len(messages)} records"
        f" (t={again['t']}): it started at the group's committed offset"
    )
    assert again["model_sha256"] == uninterrupted["model_sha256"]


# -- 6. another input, or the same one grown or changed ----------------------------------------


def _labelled_lines(n: int, seed: int) -> list[bytes]:
    """``n`` JSON lines, each a labelled event: a run learns every one of them (its t grows by one an event)."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        x = {f"w{k}": round(rng.gauss(0, 1), 6) for k in rng.sample(range(50_000), 60)}
        lines.append(json.dumps({"id": f"s{seed}-{i}", "x": x, "label": sum(x.values()) > 0}).encode())
    return lines


def _write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@dataclass
class TwoInputs:
    first: Path  # 2,000 events
    second: Path  # 1,500 events: a smaller file than the first, whose offsets pass its end
    both: Path  # the first, then the second
    reference: dict  # inspect --json of one uninterrupted run over both


SECOND_EVENTS = 1500


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory) -> TwoInputs:
    directory = tmp_path_factory.mktemp("inputs")
    first, second = _labelled_lines(2000, 1), _labelled_lines(SECOND_EVENTS, 2)
    inputs = TwoInputs(
        _write_lines(directory / "a.jsonl", first),
        _write_lines(directory / "b.jsonl", second),
        _write_lines(directory / "ab.jsonl", first + second),
        {},
    )
    assert inputs.second.stat().st_size < inputs.first.stat().st_size
    inputs.reference = _reference(_file_job(directory / "reference", inputs.both)).summary
    return inputs


def _another_input_line(reading: Path, checkpoint: Path, taken_from: Path) -> str:
    return (
        f"file {reading.resolve()} is not the input of {checkpoint} (file {taken_from.resolve()}): reading it from"
        " its beginning"
    )


@pytest.mark.slow
def test_resume_on_another_input_reads_it_from_its_beginning(two_inputs, tmp_path):
    """A checkpoint at the end of a.jsonl, resumed on b.jsonl (smaller: a's offset would have skipped all of it):
    b is read from its first line, as one line says, and the model is that of one run over a, then b."""
    job = _file_job(tmp_path, two_inputs.first)
    assert _run(job).returncode == 0
    before = _inspect(tmp_path / "ck")
    done = _run(job, "--resume", "--input", str(two_inputs.second))
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stderr.decode().splitlines()[:2] == [
        _another_input_line(two_inputs.second, Path(before["path"]), two_inputs.first),
        f"resuming from {before['path']} (t={before['t']}, {before['events']} events)",
    ]
    after = _inspect(tmp_path / "ck")
    assert (after["t"], after["events"]) == (before["t"] + SECOND_EVENTS, before["events"] + SECOND_EVENTS)
    assert after["model_sha256"] == two_inputs.reference["model_sha256"]
    assert after["source"]["input"]["path"] == str(two_inputs.second.resolve())


@pytest.mark.slow
def test_resume_on_the_same_input_grown_goes_on_where_it_stopped(two_inputs, tmp_path):
    """A log appended to since its checkpoint: the run reads on from the stored offset."""
    log = tmp_path / "log.jsonl"
    log.write_bytes(two_inputs.first.read_bytes())
    job = _file_job(tmp_path, log)
    assert _run(job).returncode == 0
    before = _inspect(tmp_path / "ck")
    with open(log, "ab") as appended:
        appended.write(two_inputs.second.read_bytes())
    done = _run(job, "--resume")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stderr.decode().splitlines()[0] == (
        f"resuming from {before['path']} (t={before['t']}, {before['events']} events)"
    )
    after = _inspect(tmp_path / "ck")
    assert after["t"] == before["t"] + SECOND_EVENTS
    assert after["model_sha256"] == two_inputs.reference["model_sha256"]


@pytest.mark.parametrize("change", ["first bytes", "shorter"])
def test_resume_on_the_same_input_changed_in_the_part_read_is_refused(two_inputs, tmp_path, change):
    """The file a checkpoint read, rewritten in its first bytes (same size) or cut shorter than it was: one line,
    status 2, nothing written."""
    log = tmp_path / "log.jsonl"
    data = two_inputs.both.read_bytes()
    log.write_bytes(data)
    job = _file_job(tmp_path, log)
    assert _run(job, "--max-events", "2500").returncode == 0
    files = {path: path.read_bytes() for path in checkpoints(tmp_path / "ck")}
    newest = checkpoints(tmp_path / "ck")[0]
    if change == "first bytes":
        log.write_bytes(data.replace(b'"id": "s1-0"', b'"id": "s9-0"', 1))
        reason = "its first 65536 bytes are not those it held then"
    else:
        log.write_bytes(data[: len(data) // 2])
        reason = f"it holds {len(data) // 2} bytes, fewer than the {len(data)} it held then"
    done = _run(job, "--resume")
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        f"error: {log} changed since {newest} read it ({reason}): its position there would fall elsewhere; to learn"
        " it as a new input, give it under another name"
    ]
    assert {path: path.read_bytes() for path in checkpoints(tmp_path / "ck")} == files


def _as_written_before_inputs_were_named(path: Path) -> None:
    """Rewrite checkpoint ``path`` as an earlier version wrote it: a position without its input, and the digest of
    a configuration hash that held the input's path."""
    state, manifest = read_checkpoint(path)
    extra = {key: value for key, value in manifest.items() if key not in ("format", "version", "state")}
    extra["source"] = _offsets(extra["source"])
    extra["config_sha256"] = hashlib.sha256(b"a digest of the configuration and its input's path").hexdigest()
    write_checkpoint(path, state, extra)


@pytest.mark.slow
@pytest.mark.parametrize("same_input", [True, False])
def test_a_checkpoint_without_an_input_resumes_on_the_input_its_configuration_names(two_inputs, tmp_path, same_input):
    """A checkpoint of an earlier version (no input in its position, a configuration hash of the input's path):
    resumed on the path its stored configuration names, it goes on at its offset as it did (there is no digest of
    that file to check); resumed on another, that one is read from its beginning."""
    job = _file_job(tmp_path, two_inputs.both if same_input else two_inputs.first)
    assert _run(job, "--max-events", "2000").returncode == 0
    newest = checkpoints(tmp_path / "ck")[0]
    _as_written_before_inputs_were_named(newest)
    done = _run(job, "--resume") if same_input else _run(job, "--resume", "--input", str(two_inputs.second))
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    resuming = f"resuming from {newest} (t=2000, 2000 events)"
    expected = (
        [resuming] if same_input else [_another_input_line(two_inputs.second, newest, two_inputs.first), resuming]
    )
    assert lines[: len(expected)] == expected
    assert not any("warning" in line for line in lines)
    assert _inspect(tmp_path / "ck")["model_sha256"] == two_inputs.reference["model_sha256"]


@pytest.mark.slow
def test_sigkill_on_a_new_input_then_resume_gives_old_t_plus_its_events(two_inputs, tmp_path):
    """The run on the new input is killed between two of its checkpoints; resumed on the same new input, it goes on
    from its own checkpoint: t is the first input's t plus the new input's events, the model that of one run."""
    job = _file_job(tmp_path, two_inputs.first)
    assert _run(job).returncode == 0
    before = _inspect(tmp_path / "ck")
    directory = tmp_path / "ck"
    proc = _spawn(job, tmp_path / "killed.err", "--input", str(two_inputs.second))
    try:
        kill = _kill(proc, "between", random.Random(7), directory)
    finally:
        _reap(proc)
    assert kill is not None, (tmp_path / "killed.err").read_text()[-3000:]
    newest = _assert_every_checkpoint_loads(directory)
    assert newest is not None and newest["source"]["input"]["path"] == str(two_inputs.second.resolve())
    assert before["events"] < newest["events"] < before["events"] + SECOND_EVENTS

    done = _run(job, "--resume", "--input", str(two_inputs.second))
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    lines = done.stderr.decode().splitlines()
    assert f"resuming from {newest['path']} (t={newest['t']}, {newest['events']} events)" in lines
    assert not any("is not the input" in line for line in lines)
    after = _inspect(directory)
    assert after["t"] == before["t"] + SECOND_EVENTS
    assert after["events"] == before["events"] + SECOND_EVENTS
    assert after["model_sha256"] == two_inputs.reference["model_sha256"]


def test_kafka_topics_a_checkpoint_holds_no_offsets_of_start_where_the_group_committed(caplog):
    """A position's Kafka offsets name their topic and partition: they are never applied to another topic, and the
    topics they do not cover are said to start at the group's committed offsets."""
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "kafka.yaml", ["source.topics=[mail, new]"])
    stored = {"offsets": [["mail", 0, 17]]}
    with caplog.at_level(logging.INFO, logger="pegasos_stream"):
        assert resume_position(config, {"source": stored, "config": config}, Path("ck/checkpoint.pgs")) == stored
    assert caplog.messages == [
        "ck/checkpoint.pgs holds no offsets of the topics new: they start at the consumer group's committed offsets"
        " (source.start where none)"
    ]
