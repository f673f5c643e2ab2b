"""Model publishing as plain code: snapshots split into chunk records and put together again, what is refused,
and the ``publish`` section's checks (``run`` publishing to a broker and ``serve --model-topic``: test_serve)."""

from __future__ import annotations

import hashlib
import json

import pytest

from pegasos_stream.cli.config import ConfigError, config_hash, validate
from pegasos_stream.distribute.publishing import (
    SnapshotAssembler,
    SnapshotRefused,
    chunk_key,
    manifest_key,
    snapshot_records,
)


def _feed(assembler: SnapshotAssembler, records: list[tuple[bytes, bytes | None]]):
    """What the records' last one gives (a snapshot, or the refusal it raises)."""
    for key, value in records[:-1]:
        assert assembler.add(key, value) is None
    try:
        return assembler.add(*records[-1])
    except SnapshotRefused as error:
        return error


def test_a_snapshot_is_split_under_the_record_size_and_put_together_again():
    data = bytes(range(256)) * 40  # 10,240 bytes
    chunks, manifest = snapshot_records(7, data, 3000, {"t": 5, "events": 9, "written_at": 1.5})
    assert (
        [key for key, _ in chunks]
        == [chunk_key(7, i) for i in range(4)]
        == [b"v00000000000000000007/chunk/%06d" % i for i in range(4)]
    )
    assert all(len(value) <= 3000 for _, value in chunks) and manifest[0] == manifest_key(7)
    about = json.loads(manifest[1])
    assert about == {
        "version": 7, "n_chunks": 4, "bytes": len(data), "model_sha256": hashlib.sha256(data).hexdigest(),
        "t": 5, "events": 9, "written_at": 1.5,
    }  # fmt: skip
    assembler = SnapshotAssembler()
    snapshot = _feed(assembler, [(b"some other key", b"x"), *chunks, manifest])
    assert (snapshot.version, snapshot.data, snapshot.manifest) == (7, data, about)
    assert assembler.newest == 7 and assembler.keys == {key for key, _ in [*chunks, manifest]}


def test_a_corrupt_or_missing_chunk_is_refused_and_a_later_version_still_assembles():
    data = b"model bytes " * 500
    chunks, manifest = snapshot_records(3, data, 1024, {})
    corrupt = [*chunks[:2], (chunks[2][0], b"X" + chunks[2][1][1:]), *chunks[3:]]
    refused = _feed(SnapshotAssembler(), [*corrupt, manifest])
    assert isinstance(refused, SnapshotRefused) and refused.version == 3 and "sha256" in str(refused)

    assembler = SnapshotAssembler()
    refused = _feed(assembler, [*chunks[:4], *chunks[5:], manifest])
    assert str(refused) == f"model version 3: 1 of its {len(chunks)} chunks are missing (the first: 4)"
    tombstoned = _feed(SnapshotAssembler(), [*chunks, (chunks[0][0], None), manifest])
    assert "chunks are missing (the first: 0)" in str(tombstoned)

    newer_chunks, newer_manifest = snapshot_records(4, data[::-1], 1024, {})
    assert _feed(assembler, [*newer_chunks, newer_manifest]).data == data[::-1]
    tombstones = [(key, None) for key, _ in [*chunks, manifest]]
    assert _feed(assembler, tombstones) is None
    assert assembler.keys == {key for key, _ in [*newer_chunks, newer_manifest]}


def test_a_manifest_that_does_not_fit_its_key_is_refused():
    chunks, manifest = snapshot_records(5, b"abc", 1024, {})
    refused = _feed(SnapshotAssembler(), [*chunks, (manifest_key(6), manifest[1])])
    assert "does not fit its key" in str(refused)
    assert "is not one" in str(_feed(SnapshotAssembler(), [(manifest_key(5), b"not JSON")]))


@pytest.mark.parametrize(
    ("publish", "checkpoint", "expected"),
    [
        ({"every_events": 10}, None, "publish.topic: required when publish.every_events is set"),
        ({"max_record_bytes": 5000}, None, "publish.topic: required when publish.max_record_bytes is set"),
        ({"topic": "models"}, None, "checkpoint.dir: required when publish.topic is set"),
        ({"topic": "models", "max_record_bytes": 100}, "ck", "publish.max_record_bytes: expected an integer >= 1024"),
        ({"topic": "models", "every_seconds": -1}, "ck", "publish.every_seconds: expected a number >= 0"),
    ],
)
def test_a_publish_section_that_cannot_work_is_one_clear_error(publish, checkpoint, expected):
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.")):
        validate({"publish": publish, "checkpoint": {"dir": checkpoint}}, "job.yaml")


def test_the_publish_section_leaves_the_job_and_its_checkpoints_as_they_were():
    plain = validate({"checkpoint": {"dir": "ck"}})
    published = validate({"checkpoint": {"dir": "ck"}, "publish": {"topic": "models", "every_events": 5}})
    assert config_hash(plain) == config_hash(published)
