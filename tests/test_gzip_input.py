"""A gzip input that is cut short, corrupt or not gzip at all: every record decompressed before the damage is read,
then the source stops with an error that names the file and where, whichever decompressor reads it (ISA-L's, or the
standard library's); the command says so in one line, with a checkpoint at the last record, and never a traceback."""

from __future__ import annotations

import gzip
import json
import random
import zlib

import pytest
import yaml

from pegasos_stream import cli
from pegasos_stream.io import sources
from pegasos_stream.io.mail import MessageFileSource
from pegasos_stream.io.sources import FileSource, GzipInput, SourceError
from pegasos_stream.persist.checkpoint import latest_valid

WORDS = ["offer", "meeting", "free", "money", "report", "click", "lunch", "budget", "winner", "thanks", "unsubscribe"]


@pytest.fixture(params=["isal", "zlib"])
def decompressor(request, monkeypatch) -> str:
    """Each decompressor in turn: ISA-L's (where it is installed), then the standard library's alone."""
    if request.param == "isal":
        if sources._FastGzipFile is None:
            pytest.skip("isal is not installed here")
    else:
        monkeypatch.setattr(sources, "_FastGzipFile", None)
    return request.param


def _lines(n: int, seed: int = 7) -> list[bytes]:
    """``n`` JSON events of varied text, as JSON lines."""
    rng = random.Random(seed)
    texts = (" ".join(rng.choices(WORDS, k=rng.randint(5, 60))) + f" {rng.random()}" for _ in range(n))
    return [json.dumps({"id": i, "text": text, "label": i % 3 == 0}).encode() for i, text in enumerate(texts)]


def _prefix(compressed: bytes) -> bytes:
    """All that zlib decompresses of ``compressed`` before it ends or breaks off."""
    decompressor = zlib.decompressobj(wbits=31)
    try:
        return decompressor.decompress(compressed)
    except zlib.error:
        return b""


def _read_all(source) -> tuple[list[bytes], SourceError]:
    """Every record's value ``source`` hands out, and the error it then stops with."""
    values = []
    try:
        for record in source:
            values.append(bytes(record.value))
    except SourceError as error:
        return values, error
    finally:
        source.close()
    raise AssertionError(f"{source.name}: read to its end, damage unsaid")


@pytest.mark.parametrize("kept", [0.03, 0.5, 0.97])
def test_a_file_cut_short_gives_every_record_decompressed_then_says_where(tmp_path, decompressor, kept):
    whole = gzip.compress(b"\n".join(_lines(4000)) + b"\n")
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(whole[: int(len(whole) * kept)])
    expected = _prefix(path.read_bytes())
    values, error = _read_all(FileSource(path))
    assert b"\n".join(values) == expected.rstrip(b"\n")  # the last line, cut, handed out too (the parser refuses it)
    assert str(error) == (
        f"{path}: its gzip data ends before the end-of-stream marker (the file is cut short, or still being written), "
        f"after {len(expected):,} bytes decompressed (the last record read: line {len(values):,})"
    )


def test_a_resumed_source_reads_on_to_the_damage(tmp_path, decompressor):
    whole = gzip.compress(b"\n".join(_lines(4000)) + b"\n")
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    first = FileSource(path)
    head = [bytes(record.value) for _, record in zip(range(1000), first, strict=False)]
    offset, line = first.offset, first.line
    first.close()
    values, error = _read_all(FileSource(path, offset=offset, line=line))
    assert b"\n".join(head + values) == _prefix(path.read_bytes()).rstrip(b"\n")
    assert f"(the last record read: line {line + len(values):,})" in str(error)


def test_a_seek_past_the_damage_stops_at_it(tmp_path, decompressor):
    whole = gzip.compress(b"\n".join(_lines(4000)) + b"\n")
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    decompressed = GzipInput(path)
    end = len(_prefix(path.read_bytes()))
    assert decompressed.seek(end + 10**6) == decompressed.tell() == end
    assert decompressed.damage is not None and decompressed.disk_file.closed is False
    decompressed.close()
    assert decompressed.disk_file.closed


def test_a_file_that_is_not_gzip_is_said_to_be_so(tmp_path, decompressor):
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(b'{"id": 1, "x": {}}\n' * 100)
    values, error = _read_all(FileSource(path))
    assert values == []
    assert str(error).startswith(f"{path}: not gzip data, though its name ends in .gz (")
    assert str(error).endswith("after 0 bytes decompressed (the last record read: none)")


@pytest.mark.parametrize("where", [200, 0.5])
def test_corrupt_data_stops_the_source_with_what_it_may_have_read(tmp_path, decompressor, where):
    whole = bytearray(gzip.compress(b"\n".join(_lines(4000)) + b"\n"))
    at = where if isinstance(where, int) else int(len(whole) * where)
    whole[at : at + 4] = bytes(byte ^ 0xA5 for byte in whole[at : at + 4])
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(whole)
    _, error = _read_all(FileSource(path))
    assert str(error).startswith(f"{path}: its gzip data is corrupt (")
    assert "the records read before it may hold damaged bytes" in str(error)


def test_both_decompressors_give_the_same_bytes_and_positions(tmp_path, monkeypatch):
    data = b"\n".join(_lines(3000)) + b"\n"
    path = tmp_path / "events.jsonl.gz"
    path.write_bytes(gzip.compress(data[: len(data) // 2]) + gzip.compress(data[len(data) // 2 :]))  # two members
    read = []
    for fast in (sources._FastGzipFile, None):
        monkeypatch.setattr(sources, "_FastGzipFile", fast)
        decompressed = GzipInput(path)
        assert decompressed.seek(12345) == 12345 and decompressed.tell() == 12345
        buffer, chunks = bytearray(1 << 16), []
        while n := decompressed.readinto(buffer):
            chunks.append(bytes(buffer[:n]))
        assert decompressed.damage is None and decompressed.tell() == len(data)
        decompressed.close()
        read.append(b"".join(chunks))
    assert read == [data[12345:], data[12345:]]


def test_an_mbox_cut_short_gives_its_whole_messages_then_says_where(tmp_path, decompressor):
    messages = [
        f"From sender{i}@example.com Mon Jan  1 00:00:00 2024\nSubject: note {i}\n\n{' '.join(WORDS * 40)} {i}\n"
        for i in range(300)
    ]
    whole = gzip.compress("".join(messages).encode())
    path = tmp_path / "inbox.mbox.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    values, error = _read_all(MessageFileSource(path, label=True))
    complete = _prefix(path.read_bytes()).count(b"\nFrom sender")  # the messages followed by the next one's start
    subjects = [value.split(b"\n", 1)[0] for value in values[:complete]]
    assert subjects == [b"Subject: note %d" % i for i in range(complete)]
    assert f"(the last record read: message {len(values):,})" in str(error)


def test_eval_run_and_predict_of_a_file_cut_short_say_it_in_one_line_and_keep_what_they_read(tmp_path, capsys):
    whole = gzip.compress(b"\n".join(_lines(3000)) + b"\n")
    events = tmp_path / "events.jsonl.gz"
    events.write_bytes(whole[: len(whole) // 2])
    read = _prefix(events.read_bytes()).count(b"\n") + 1  # the whole lines and the cut one
    config = tmp_path / "job.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"lambda_": 0.01},
                "features": {"type": "email"},
                "source": {"type": "file", "path": str(events), "fields": {"id": "id", "text": "text"}},
                "output": {"type": "none"},
                "checkpoint": {"dir": str(tmp_path / "checkpoints")},
            }
        ),
        encoding="utf-8",
    )
    for command in ("eval", "run"):
        assert cli.main([command, "--config", str(config)]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert err.count(f"rejected {events}:{read}: malformed JSON") == 1  # the cut line, set aside
        assert err.splitlines()[-1].startswith(f"error: {events}: its gzip data ends before the end-of-stream marker")
    checkpoint = latest_valid(tmp_path / "checkpoints")
    assert checkpoint is not None
    _, _, manifest = checkpoint
    assert manifest["events"] == read and manifest["t"] == read - 1  # all but the cut line learned
    assert manifest["source"]["line"] == read
    assert cli.main(["predict", "--model", str(tmp_path / "checkpoints"), str(events)]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == read - 1 and "Traceback" not in err
    assert f"rejected {events}: its gzip data ends before the end-of-stream marker" in err
