"""The sinks: an output or dead letter too large for its sink is cut to a bounded form, a sink that cannot take
what it is given says so in one line (never a traceback), and an output file left with a partial last line is
repaired before a run appends to it."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.io.sinks import KEPT_CHARS, KEPT_VALUE_BYTES, JsonLinesSink, SinkError, dead_letter, shortened
from pegasos_stream.persist.checkpoint import latest_valid

try:  # tests/ as a package
    from .streams import binary_events, jsonl
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from streams import binary_events, jsonl


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_prediction_with_a_huge_id_is_shortened_to_its_first_characters_its_length_and_digest():
    long_id = "é" + "x" * 600_000
    shown = shortened({"id": long_id, "predicted": True, "score": 1.5, "proba": 0.8})
    assert shown == {
        "id": long_id[:KEPT_CHARS],
        "id_chars": len(long_id),
        "id_sha256": _digest(long_id.encode()),
        "predicted": True,
        "score": 1.5,
        "proba": 0.8,
    }


def test_a_huge_dead_letter_keeps_the_first_bytes_of_its_record_with_its_size_and_digest():
    value = bytes(range(256)) * 4000  # 1,024,000 bytes
    entry = dead_letter("mail/0/7", "mail/0/7: malformed JSON: " + "y" * 5000, value)
    shown = shortened(entry)
    assert base64.b64decode(shown["value_b64"]) == value[:KEPT_VALUE_BYTES]
    assert (shown["value_bytes"], shown["value_sha256"]) == (len(value), _digest(value))
    assert shown["error"] == entry["error"][:KEPT_CHARS] and shown["error_chars"] == len(entry["error"])
    assert shown["position"] == "mail/0/7" and "position_chars" not in shown
    assert len(json.dumps(shown)) < 2 * KEPT_VALUE_BYTES


def test_an_output_file_left_with_a_partial_last_line_is_repaired_before_the_next_line(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"id": "a", "score": 1.0}\n{"id": "b", "sco')  # a run that stopped mid-line
    sink = JsonLinesSink(path)
    sink.emit({"id": "c"})
    sink.close()
    assert path.read_bytes() == b'{"id": "a", "score": 1.0}\n{"id": "c"}\n'
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}')  # a whole line that lacks only its line end
    JsonLinesSink(path).close()
    assert path.read_bytes() == b'{"id": "a"}\n{"id": "b"}\n'


def test_an_output_file_that_cannot_be_written_is_a_sink_error_naming_it_and_stays_one():
    sink = JsonLinesSink("/dev/full")
    sink.emit({"id": "x"})  # into the file's buffer
    with pytest.raises(SinkError, match=r"^/dev/full: cannot write: No space left on device$"):
        sink.flush()
    with pytest.raises(SinkError, match=r"^/dev/full: cannot write: No space left on device$"):
        sink.close()  # what its buffer held may be lost: it never flushes again


def _job(tmp_path: Path, output: str, events: int = 300) -> Path:
    (tmp_path / "events.jsonl").write_bytes(b"\n".join(jsonl(binary_events(events, seed=3))) + b"\n")
    config = {
        "model": {"kind": "linear", "lambda_": 0.01},
        "features": {"type": "dict"},
        "source": {"type": "file", "path": "events.jsonl"},
        "output": {"type": "file", "path": output},
        "checkpoint": {"dir": "ck", "every_events": 100},
        "run": {"batch_size": 0},
    }
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(config), encoding="utf-8")
    return job


def test_a_full_disk_under_the_output_is_one_error_line_and_no_checkpoint_covers_what_was_lost(tmp_path, capfd):
    job = _job(tmp_path, "/dev/full")
    assert cli.main(["run", "--config", str(job)]) == 1
    err = capfd.readouterr().err
    assert err.splitlines() == ["error: /dev/full: cannot write: No space left on device"], err
    assert latest_valid(tmp_path / "ck") is None  # no line was accepted: no record counts as processed


def test_a_resumed_run_drops_the_partial_line_a_crash_left_and_predicts_it_again(tmp_path):
    job = _job(tmp_path, "out.jsonl")
    assert cli.main(["run", "--config", str(job), "--max-events", "150"]) == 0
    out = tmp_path / "out.jsonl"
    whole = out.read_bytes()
    assert whole.count(b"\n") == 150
    out.write_bytes(whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 12])  # line 150 cut after 11 bytes
    # the checkpoint written at the end covers 150 records: resume from the one at 100, as after a crash
    (tmp_path / "ck" / "checkpoint-000000000002.pgs").unlink()
    assert cli.main(["run", "--config", str(job), "--resume"]) == 0
    ids = [json.loads(line)["id"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert ids == [f"e{i}" for i in range(149)] + [f"e{i}" for i in range(100, 300)]
