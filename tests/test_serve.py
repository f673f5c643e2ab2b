"""``pegasos-stream serve``: a trained model predicts a stream, a co-process's lines and HTTP requests, and never
learns; a newer checkpoint replaces it, a corrupt one is refused; models published by ``run`` to a model topic
are followed. Real processes, real pipes, real sockets, a real broker."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import json
import math
import os
import queue
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from http_helpers import free_port, http_json
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.admin._configs import ConfigResource
from kafka_helpers import GROUP_SETTINGS

from pegasos_stream import cli
from pegasos_stream.distribute.publishing import snapshot_records
from pegasos_stream.parse.parsing import USER_LINE
from pegasos_stream.persist.checkpoint import (
    checkpoint_path,
    checkpoint_sequence,
    latest_valid,
    model_digest,
    read_checkpoint,
)
from pegasos_stream.testing.kafka_broker import committed_offset

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
#: Seconds to wait for an answer, a log line or an exit: long enough for a loaded machine, far past the real thing.
WAIT = 30
#: rspamd's client (the rspamd package, which .ci/run installs); the checks that drive it are skipped without it.
RSPAMC = shutil.which("rspamc")


def _events(ids: range, shift: float = 0.0) -> list[bytes]:
    """Labelled feature events; ``shift`` moves the boundary, so that models trained on others differ."""
    return [
        json.dumps({"id": i, "x": {"a": (i % 7) - 3.0 + shift, "b": 1.0}, "label": i % 7 > 3}).encode() for i in ids
    ]


def _train(directory: Path, events: list[bytes], job: dict | None = None) -> Path:
    """A checkpoint of ``run`` on ``events`` (in ``directory``'s parent), with a dict-features job."""
    work = directory.parent
    job = job or {"model": {"lambda_": 0.01}, "source": {"group_id": "trainers"}}
    (work / "job.yaml").write_text(yaml.safe_dump({**job, "checkpoint": {"dir": str(directory)}}))
    (work / "train.jsonl").write_bytes(b"\n".join(events) + b"\n")
    args = ["run", "--config", str(work / "job.yaml"), "--input", str(work / "train.jsonl"), "--output", os.devnull]
    assert cli.main(args) == 0
    found = latest_valid(directory)
    assert found is not None
    return found[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    """Two checkpoints of different models: the second learned from other events."""
    first = _train(tmp_path_factory.mktemp("first") / "ck", _events(range(100)))
    second = _train(tmp_path_factory.mktemp("second") / "ck", _events(range(300), shift=1.5))
    return first, second


def _install(checkpoint: Path, directory: Path, sequence: int) -> Path:
    """Put ``checkpoint`` in ``directory`` as its checkpoint ``sequence``, atomically, as ``run`` writes one."""
    target = checkpoint_path(directory, sequence)
    shutil.copyfile(checkpoint, directory / ".tmp-copy.pgs")
    os.replace(directory / ".tmp-copy.pgs", target)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Serve:
    """``pegasos-stream serve ARGS`` in a process of its own: its standard output and error read by threads,
    so that every wait has a deadline."""

    def __init__(self, *args: str, cwd: Path | None = None) -> None:
        self.process = subprocess.Popen(
            [*COMMAND, "serve", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd
        )
        self.answers: queue.Queue[bytes] = queue.Queue()
        self.log: queue.Queue[str] = queue.Queue()
        self.said: list[str] = []
        self._returned: set[int] = set()  # the lines of said that wait_for returned
        assert self.process.stdout is not None and self.process.stderr is not None
        threading.Thread(target=self._read, args=(self.process.stdout, self.answers.put), daemon=True).start()
        threading.Thread(target=self._read, args=(self.process.stderr, self._said), daemon=True).start()

    @staticmethod
    def _read(stream, put) -> None:
        for line in stream:
            put(line)
        put(None)

    def _said(self, line: bytes | None) -> None:
        self.log.put("" if line is None else line.decode())

    def ask(self, line: bytes) -> dict:
        """Write one line, and read the one answer it gets."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()
        answer = self.answers.get(timeout=WAIT)
        assert answer, f"no answer; stderr: {self.said}"
        return json.loads(answer)

    def wait_for(self, text: str) -> str:
        """The first line of standard error that holds ``text`` and that no earlier call returned (every line
        is kept in ``said``)."""
        deadline = time.monotonic() + WAIT
        looked = 0
        while True:
            for index in range(looked, len(self.said)):
                if text in self.said[index] and index not in self._returned:
                    self._returned.add(index)
                    return self.said[index]
            looked = len(self.said)
            line = self.log.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line, f"ended without saying {text!r}: {self.said}"
            self.said.append(line)

    def stop(self, sig: int | None = None) -> int:
        """End the input (or send ``sig``), and the exit status."""
        if sig is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
        else:
            self.process.send_signal(sig)
        return self.process.wait(timeout=WAIT)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)


@pytest.fixture
def serve():
    """Starts ``Serve`` processes, killed at the end of the test if still running."""
    started: list[Serve] = []

    def start(*args: str, cwd: Path | None = None) -> Serve:
        started.append(Serve(*args, cwd=cwd))
        return started[-1]

    yield start
    for process in started:
        process.kill()


def _predicted(line: dict) -> tuple:
    return line["id"], line["predicted"], line["score"], line["proba"]


def test_a_co_process_answers_each_line_as_it_comes_with_the_model_of_a_file(models, serve, tmp_path):
    """One line written, its answer read, then the next: a server that waited for more input, or did not
    flush, would never answer (the read would time out). Every line is answered, in order: a line without a
    prediction with an error object naming why, so that a client reading one answer per line never blocks."""
    first = models[0]
    before = _sha256(first)
    server = serve("--model", str(first), "--input", "-", "--output", "-")
    events = [*_events(range(5)), b'{"id": "late", "label": true}', b"not JSON", *_events(range(5, 8))]
    answers = [server.ask(event) for event in events[:5]]
    server.process.stdin.write(b"\n".join(events[5:]) + b"\n")  # a label alone and a bad record among them
    server.process.stdin.flush()
    answers += [json.loads(server.answers.get(timeout=WAIT)) for _ in range(5)]
    assert server.stop() == 0
    server.wait_for('"events": 10')
    unanswered = answers[5:7]
    assert unanswered[0] == {"position": "<stdin>:6", "error": "nothing to predict (a label alone, or a comment)"}
    assert unanswered[1]["position"] == "<stdin>:7" and "<stdin>:7: malformed JSON" in unanswered[1]["error"]
    answers = answers[:5] + answers[7:]
    assert [a["id"] for a in answers] == list(range(8))
    assert {a["model_version"] for a in answers} == {1}
    written = read_checkpoint(first)[1]["written_at"]
    assert all(0 <= a["model_age_s"] <= time.time() - written + 1 for a in answers)
    assert any("rejected <stdin>:7: malformed JSON" in line for line in server.said)
    assert _sha256(first) == before


def test_a_stream_is_predicted_as_predict_predicts_it_and_the_model_is_left_as_it_was(models, tmp_path):
    """The same predictions as ``pegasos-stream predict`` with the same checkpoint, from a file to a file."""
    directory = models[1].parent
    before = {path: _sha256(path) for path in directory.iterdir()}
    digest = model_digest(read_checkpoint(models[1])[0]["model"])
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join([*_events(range(40)), b'{"id": "x", "x": {"a": "no"}}']) + b"\n")
    dead = tmp_path / "dead.jsonl"
    served = subprocess.run(
        [
            *COMMAND,
            "serve",
            "--model",
            str(directory),
            "--input",
            str(events),
            "--output",
            str(tmp_path / "out.jsonl"),
            "--set",
            f"errors.dead_letter={{type: file, path: {dead}}}",
        ],
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert served.returncode == 0, served.stderr
    predicted = subprocess.run(
        [*COMMAND, "predict", "--model", str(directory), str(events)], capture_output=True, timeout=WAIT, check=False
    )
    assert predicted.returncode == 1  # the bad record
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [_predicted(line) for line in lines] == [_predicted(json.loads(x)) for x in predicted.stdout.splitlines()]
    assert len(lines) == 40 and {line["model_version"] for line in lines} == {1}
    [letter] = [json.loads(line) for line in dead.read_text().splitlines()]
    assert letter["position"] == f"{events}:41" and "feature 'a' has value 'no'" in letter["error"]
    assert json.loads(served.stderr.decode().splitlines()[-1]) == {
        "events": 41,
        "served": 40,
        "errors": 1,
        "model_version": 1,
    }
    assert {path: _sha256(path) for path in directory.iterdir()} == before
    assert model_digest(read_checkpoint(models[1])[0]["model"]) == digest


def test_text_events_score_as_predict_scores_them(tmp_path):
    """The shipped spam model, its texts turned into features as predict turns them."""
    directory = tmp_path / "ck"
    config = str(ROOT / "configs" / "spam.yaml")
    args = ["--max-events", "60", "--set", "output.type=none", "--set", f"checkpoint.dir={directory}"]
    assert cli.main(["run", "--config", config, *args]) == 0
    lines = gzip.decompress(SAMPLE.read_bytes()).splitlines()[200:230]
    events = tmp_path / "mail.jsonl"
    events.write_bytes(b"\n".join(lines) + b"\n")
    served = subprocess.run(
        [*COMMAND, "serve", "--model", str(directory), "--input", "-", "--output", "-"],
        input=events.read_bytes(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    predicted = subprocess.run(
        [*COMMAND, "predict", "--model", str(directory), str(events)], capture_output=True, timeout=WAIT, check=False
    )
    assert served.returncode == predicted.returncode == 0, served.stderr
    answers = [json.loads(line) for line in served.stdout.splitlines()]
    assert [_predicted(a) for a in answers] == [_predicted(json.loads(x)) for x in predicted.stdout.splitlines()]
    assert {a["predicted"] for a in answers} == {"spam", "ham"}


def test_a_newer_checkpoint_replaces_the_model_and_a_corrupt_one_is_refused(models, serve, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    _install(models[0], directory, 1)
    server = serve("--model", str(directory), "--input", "-", "--output", "-", "--reload-s", "0.1")
    event = _events(range(3, 4))[0]
    first = server.ask(event)
    assert first["model_version"] == 1

    _install(models[1], directory, 2)
    server.wait_for("serving model version 2")
    second = server.ask(event)
    assert second["model_version"] == 2 and second["score"] != first["score"]

    corrupt = checkpoint_path(directory, 3)
    (directory / ".tmp-cut.pgs").write_bytes(models[0].read_bytes()[:-100])  # truncated: its checksum fails
    os.replace(directory / ".tmp-cut.pgs", corrupt)
    refused = server.wait_for("refusing the checkpoint")
    assert f"{corrupt}: checksum mismatch" in refused and "model version 2 goes on serving" in refused
    again = server.ask(event)
    assert (again["model_version"], _predicted(again)) == (2, _predicted(second))

    _install(models[0], directory, 4)  # a valid one after it is taken
    server.wait_for("serving model version 4")
    assert server.ask(event)["score"] == first["score"]
    assert server.stop() == 0
    assert sum("refusing" in line for line in server.said) == 1  # said once, not at every look


def test_without_a_checkpoint_serve_waits_then_serves_the_first_one(models, serve, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    server = serve("--model", str(directory), "--input", "-", "--output", "-", "--reload-s", "0.1")
    server.wait_for(f"no valid checkpoint in {directory} yet: waiting")
    assert server.answers.empty()
    _install(models[0], directory, 7)
    assert server.ask(_events(range(1))[0])["model_version"] == 7
    assert server.stop() == 0


def test_allow_empty_serves_the_untrained_model_of_the_configuration_until_a_checkpoint_comes(models, serve, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"model": {"lambda_": 0.01}}))
    server = serve(
        "--model", str(directory), "--allow-empty", "--config", str(job), "--input", "-", "--output", "-",
        "--reload-s", "0.1",
    )  # fmt: skip
    untrained = server.ask(_events(range(1))[0])
    assert (untrained["model_version"], untrained["model_age_s"], untrained["score"]) == (0, None, 0.0)
    _install(models[0], directory, 1)
    server.wait_for("serving model version 1")
    assert server.ask(_events(range(1))[0])["model_version"] == 1
    assert server.stop() == 0


def test_a_missing_model_or_allow_empty_without_a_configuration_is_one_line(tmp_path):
    short = tmp_path / "token"
    short.write_text("short\n")
    for args, expected in [
        (["--model", str(tmp_path / "nothing")], f"error: --model {tmp_path / 'nothing'}: no such file or directory"),
        (["--model", str(tmp_path), "--allow-empty"], "configuration error: --allow-empty needs --config"),
        (["--input", "-"], "configuration error: serve needs either --model CHECKPOINT or --model-topic TOPIC"),
        (
            ["--model", str(tmp_path), "--http", "localhost"],
            "configuration error: --http localhost: expected HOST:PORT",
        ),
        (
            ["--model", str(tmp_path), "--http-token-env", "TOKEN"],
            "configuration error: --http-token-file and --http-token-env are for --http",
        ),
        (
            ["--model", str(tmp_path), "--http", "127.0.0.1:0", "--http-token-file", str(short)],
            f"error: --http-token-file {short}: a token of 5 bytes; a key needs at least 16",
        ),
    ]:
        done = subprocess.run([*COMMAND, "serve", *args], capture_output=True, timeout=WAIT, check=False)
        assert done.returncode == 2
        assert done.stderr.decode().startswith(expected), done.stderr


def test_a_service_logs_each_request_and_serves_its_metrics(models, serve):
    """The access log has a line per request (protocol, client, request, outcome, bytes, time), and
    ``--set metrics.port=PORT`` serves Prometheus' figures of the service: requests by outcome, their times, the
    model served, the predictions and the refusals."""
    port = free_port()
    server = serve("--model", str(models[0]), "--http", "127.0.0.1:0", "--set", f"metrics.port={port}")
    url = server.wait_for("serving predictions on ").split(" on ")[1].split()[0]
    assert server.wait_for("serving metrics on ").endswith(f"http://127.0.0.1:{port}/metrics\n")
    event = _events(range(1))[0]
    assert http_json(f"{url}/predict", event)[0] == 200
    assert http_json(f"{url}/predict", b"{")[0] == 400
    line = server.wait_for('http 127.0.0.1 "POST /predict" 200 ')
    assert re.search(rf'"POST /predict" 200 {len(event)} B \d+\.\d ms$', line.strip()), line
    server.wait_for('http 127.0.0.1 "POST /predict" 400 1 B ')
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT) as response:
        scraped = response.read().decode()
    figures = {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in scraped.splitlines() if not line.startswith("#")
    }
    assert figures['pegasos_stream_serve_requests_total{outcome="200",protocol="http"}'] == 1.0
    assert figures['pegasos_stream_serve_requests_total{outcome="400",protocol="http"}'] == 1.0
    assert figures['pegasos_stream_serve_request_seconds_count{protocol="http"}'] == 2.0
    assert figures["pegasos_stream_serve_predictions_total"] == 1.0
    assert figures["pegasos_stream_serve_errors_total"] == 1.0
    assert figures["pegasos_stream_serve_model_version"] == 1.0
    assert figures["pegasos_stream_serve_model_age_seconds"] >= 0.0 and "process_resident_memory_bytes" in figures
    assert server.stop(signal.SIGTERM) == 0


def test_http_answers_single_and_batch_requests_refuses_bad_ones_and_reports_health(models, serve, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    server = serve(
        "--model", str(directory), "--http", "127.0.0.1:0", "--reload-s", "0.1", "--max-staleness-s", "3600"
    )  # fmt: skip
    url = server.wait_for("serving predictions on ").split(" on ")[1].split()[0]

    status, health = http_json(f"{url}/health")
    assert status == 503 and health["status"] == "waiting" and health["model_version"] is None
    status, answer = http_json(f"{url}/predict", _events(range(1))[0])
    assert status == 503 and answer == {"error": f"no model yet: waiting for a checkpoint in {directory}"}

    _install(models[0], directory, 1)
    server.wait_for("serving model version 1")
    status, one = http_json(f"{url}/predict", _events(range(5, 6))[0])
    assert status == 200 and one["id"] == 5 and one["model_version"] == 1
    batch = b"[" + b", ".join(_events(range(4, 7))) + b"]"
    status, many = http_json(f"{url}/predict", batch)
    assert status == 200 and [a["id"] for a in many] == [4, 5, 6] and _predicted(many[1]) == _predicted(one)
    assert http_json(f"{url}/predict", b"[]") == (200, [])

    bad = b'[{"id": 1, "x": {"a": 1}}, {"id": 2, "x": {"a": "z"}}, 7]'
    status, answer = http_json(f"{url}/predict", bad)
    assert status == 400
    assert answer["errors"] == [
        {"index": 1, "error": "request[1]: feature 'a' has value 'z': expected a number"},
        {"index": 2, "error": "request[2]: expected a JSON object, got int"},
    ]
    assert http_json(f"{url}/predict", b"{") == (400, {"error": "request: malformed JSON: " + _json_error(b"{")})
    assert http_json(f"{url}/predict", b"")[0] == 400
    assert http_json(f"{url}/predict", b'{"id": 1, "label": true}')[0] == 400
    too_many = b"[" + b", ".join([_events(range(1))[0]] * 1001) + b"]"  # the work of a request is bounded
    assert http_json(f"{url}/predict", too_many) == (400, {"error": "request: 1,001 events: at most 1,000 a request"})
    assert http_json(f"{url}/predict")[0] == 405
    address = urllib.parse.urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=WAIT) as connection:
        connection.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Length: 70000000\r\n\r\n")
        assert connection.recv(64).startswith(b"HTTP/1.1 413 ")  # refused from its headers, its body never sent

    status, health = http_json(f"{url}/health")
    assert status == 200
    assert health["status"] == "ok" and health["model_version"] == 1 and 0 <= health["model_age_s"] < 3600
    assert (health["served"], health["errors"], health["model_file"]) == (4, 6, checkpoint_path(directory, 1).name)
    assert str(directory) not in json.dumps(health)  # no file paths
    assert server.stop(signal.SIGTERM) == 0


class UnixHttpConnection(http.client.HTTPConnection):
    """HTTP over the Unix socket at ``path``."""

    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=WAIT)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT)
        self.sock.connect(str(self.socket_path))


def test_http_on_a_unix_socket_answers_only_the_requests_that_carry_its_token(models, serve, tmp_path):
    token = "a-shared-secret-of-the-mail-host"
    (tmp_path / "token").write_text(token + "\n")
    path = tmp_path / "http.sock"
    server = serve("--model", str(models[0]), "--http", str(path), "--http-token-file", str(tmp_path / "token"))
    assert server.wait_for("serving predictions on ").split(" on ")[1].split()[0] == f"unix:{path}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o660

    def ask(method: str, url: str, headers: dict[str, str]) -> tuple[int, dict, str | None]:
        connection = UnixHttpConnection(path)
        connection.request(method, url, body=None if method == "GET" else _events(range(1))[0], headers=headers)
        response = connection.getresponse()
        answer = (response.status, json.loads(response.read()), response.getheader("WWW-Authenticate"))
        connection.close()
        return answer

    assert ask("GET", "/health", {})[0] == 200  # a health check needs no token
    refused = (401, {"error": "this service needs the header Authorization: Bearer TOKEN (serve --http-token-*)"})
    assert ask("POST", "/predict", {}) == (*refused, "Bearer")
    assert ask("POST", "/predict", {"Authorization": "Bearer not-the-token-at-all"}) == (*refused, "Bearer")
    assert ask("POST", "/predict", {"Authorization": f"Basic {token}"}) == (*refused, "Bearer")
    status, prediction, _ = ask("POST", "/predict", {"Authorization": f"Bearer {token}"})
    assert status == 200 and prediction["id"] == 0 and prediction["model_version"] == 1
    assert server.stop(signal.SIGTERM) == 0
    assert not path.exists()


def test_http_scores_raw_messages_answers_rspamds_checkv2_and_keeps_taught_messages(serve, tmp_path):
    """A raw message (message/rfc822, 8-bit) is scored as predict scores it; /checkv2 answers rspamd's shape with
    the action the required score gives; /learnspam delivers into the feedback Maildir."""
    checkpoint = tmp_path / "ck"
    assert cli.main(["run", "--config", "spam", "--set", f"checkpoint.dir={checkpoint}", "--output", os.devnull]) == 0
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        spam = next(json.loads(line) for line in handle if '"label": "spam"' in line)
    message = spam["text"].encode() + "\nCafé crème, 8-bit.\n".encode("latin-1")
    (tmp_path / "m.eml").write_bytes(message)
    predicted = subprocess.run(
        [*COMMAND, "predict", "--model", str(checkpoint), str(tmp_path / "m.eml")], capture_output=True
    )
    proba = json.loads(predicted.stdout)["proba"]
    score = round(math.log(proba / (1 - proba)), 1)

    feedback = tmp_path / "feedback"
    server = serve("--model", str(checkpoint), "--http", "127.0.0.1:0", "--feedback", str(feedback))
    url = server.wait_for("serving predictions on ").split(" on ")[1].split()[0]
    raw = {"Content-Type": "message/rfc822"}
    status, answer = http_json(f"{url}/predict", message, raw)
    assert status == 200 and answer["proba"] == proba and answer["score"] == score and answer["predicted"] == "spam"

    rspamd = {"From": "a@example.com", "Rcpt": "b@example.org", "IP": "192.0.2.1", "User": "b", "Deliver-To": "b"}
    status, answer = http_json(f"{url}/checkv2", message, rspamd)
    assert status == 200 and answer["action"] == "add header" and answer["is_skipped"] is False
    assert (answer["score"], answer["required_score"]) == (score, 1.5) and "PEGASOS_STREAM" in answer["symbols"]
    assert answer["request"] == rspamd
    assert http_json(f"{url}/checkv2", b"", rspamd)[0] == 400

    assert http_json(f"{url}/learnspam", message, raw) == (200, {"success": True, "label": "spam"})
    assert http_json(f"{url}/learnham", message, {**raw, "Deliver-To": "bob"})[0] == 200
    assert http_json(f"{url}/learnham", message, {**raw, "User": "a\tb"})[0] == 400  # not one printable line
    assert [path.read_bytes() for path in (feedback / "Spam" / "new").iterdir()] == [message]
    (ham,) = (feedback / "Ham" / "new").iterdir()
    assert ham.read_bytes().startswith(USER_LINE + b"bob")  # the user of a personal model

    if RSPAMC is not None:  # rspamd's own client, unchanged
        host = url.removeprefix("http://")
        checked = subprocess.run([RSPAMC, "-h", host, "symbols"], input=message, capture_output=True, timeout=WAIT)
        said = checked.stdout.decode()
        assert checked.returncode == 0 and f"Score: {score:.2f} / 1.50" in said, said
        assert "Action: add header" in said and "Spam: true" in said and "Symbol: PEGASOS_STREAM" in said
        taught = subprocess.run(
            [RSPAMC, "-h", host, "-d", "carol", "learn_spam"], input=message, capture_output=True, timeout=WAIT
        )
        assert taught.returncode == 0, taught.stdout + taught.stderr
        kept = [path.read_bytes() for path in (feedback / "Spam" / "new").iterdir()]
        assert sorted(kept) == sorted([message, USER_LINE + b"carol\n" + message])  # its Deliver-To, the user
    assert server.stop(signal.SIGTERM) == 0


def _json_error(body: bytes) -> str:
    try:
        json.loads(body)
    except ValueError as error:
        return str(error)
    raise AssertionError("valid JSON")


def test_concurrent_requests_are_each_answered_by_one_model_while_it_is_replaced(models, serve, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    _install(models[0], directory, 1)
    server = serve("--model", str(directory), "--http", "127.0.0.1:0", "--reload-s", "0.05")
    url = server.wait_for("serving predictions on ").split(" on ")[1].split()[0] + "/predict"
    batch = b"[" + b", ".join(_events(range(50))) + b"]"
    answers: list[list[dict]] = []
    done = threading.Event()

    def ask() -> None:
        while not done.is_set():
            status, answer = http_json(url, batch)
            assert status == 200
            answers.append(answer)

    askers = [threading.Thread(target=ask) for _ in range(4)]
    for asker in askers:
        asker.start()
    while len(answers) < 20:
        time.sleep(0.01)
    _install(models[1], directory, 2)
    server.wait_for("serving model version 2")
    seen = len(answers)
    while len(answers) < seen + 20:
        time.sleep(0.01)
    done.set()
    for asker in askers:
        asker.join(timeout=WAIT)
    expected = {2: http_json(url, batch)[1]}
    server.stop(signal.SIGTERM)
    expected[1] = [json.loads(line) for line in subprocess.run(
        [*COMMAND, "serve", "--model", str(models[0]), "--input", "-", "--output", "-"],
        input=b"\n".join(_events(range(50))), capture_output=True, timeout=WAIT, check=True,
    ).stdout.splitlines()]  # fmt: skip
    versions = [{line["model_version"] for line in answer} for answer in answers]
    assert all(len(version) == 1 for version in versions)  # one model a request
    assert {1, 2} == set().union(*versions)
    for answer in answers:
        version = answer[0]["model_version"]
        assert [_predicted(line) for line in answer] == [_predicted(line) for line in expected[version]]


def test_health_says_stale_beyond_max_staleness_and_warns(models, serve, tmp_path):
    server = serve("--model", str(models[0]), "--http", "127.0.0.1:0", "--reload-s", "0.1", "--max-staleness-s", "0")
    url = server.wait_for("serving predictions on ").split(" on ")[1].split()[0]
    server.wait_for("warning: model version 1 is")
    status, health = http_json(f"{url}/health")
    assert status == 200 and health["status"] == "stale" and health["max_staleness_s"] == 0
    assert server.stop(signal.SIGTERM) == 0


def test_serve_consumes_a_topic_in_a_group_of_its_own_and_commits_after_predicting(
    tmp_path, kafka_broker, kafka_topic, produce
):
    """The training job's group is "trainers": serve reads as "trainers.serve", and commits what it predicted."""
    job = {
        "model": {"lambda_": 0.01},
        "source": {"group_id": "trainers", "consumer": GROUP_SETTINGS, "poll_seconds": 0.2},
    }
    checkpoint = _train(tmp_path / "ck", _events(range(100)), job)
    topic = kafka_topic(1)
    produce(kafka_broker, topic, [*_events(range(20)), b"not JSON"])
    args = [
        "--model", str(checkpoint), "--output", str(tmp_path / "out.jsonl"), "--stop-when-idle", "2",
        "--set", "source.type=kafka", "--set", f"source.topics=[{topic}]",
        "--set", f"source.bootstrap_servers={kafka_broker}",
    ]  # fmt: skip
    done = subprocess.run([*COMMAND, "serve", *args], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == list(range(20))
    assert f"rejected {topic}/0/20: malformed JSON" in done.stderr.decode()
    assert committed_offset(kafka_broker, "trainers.serve", topic) == 21
    assert committed_offset(kafka_broker, "trainers", topic) is None


def _records(broker: str, topic: str) -> list[tuple[bytes, bytes | None]]:
    """Every (key, value) of the one partition of ``topic``, in order."""
    consumer = KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        records: list[tuple[bytes, bytes | None]] = []
        while batch := consumer.poll(timeout_ms=500):
            records += [(message.key, message.value) for messages in batch.values() for message in messages]
        return records
    finally:
        consumer.close()


def _send(broker: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    try:
        for future in [producer.send(topic, value, key=key, partition=0) for key, value in records]:
            future.get(timeout=10)
    finally:
        producer.close(timeout=5)


def _run(work: Path, *flags: str) -> None:
    args = ["run", "--config", str(work / "job.yaml"), "--input", str(work / "train.jsonl"), "--output", "/dev/null"]
    assert cli.main([*args, *flags]) == 0


def test_run_publishes_its_checkpoints_and_serve_follows_the_newest_complete_one(tmp_path, kafka_broker, serve):
    topic = f"models-{uuid.uuid4().hex[:8]}"
    job = {
        "kafka": {"bootstrap_servers": kafka_broker},
        "model": {"lambda_": 0.01},
        "checkpoint": {"dir": str(tmp_path / "ck"), "every_events": 40},
        "publish": {"topic": topic, "max_record_bytes": 1024},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    (tmp_path / "train.jsonl").write_bytes(b"\n".join(_events(range(100))) + b"\n")
    _run(tmp_path)

    records = _records(kafka_broker, topic)
    manifests = [json.loads(value) for key, value in records if key.endswith(b"/manifest") and value]
    assert [m["version"] for m in manifests] == [1, 2, 3]  # checkpoints at 40, 80 and the end
    assert [m["events"] for m in manifests] == [40, 80, 100]
    newest = latest_valid(tmp_path / "ck")
    assert newest is not None and checkpoint_sequence(newest[0]) == 3
    assert manifests[-1]["model_sha256"] == hashlib.sha256(newest[0].read_bytes()).hexdigest()
    assert manifests[-1]["n_chunks"] == -(-newest[0].stat().st_size // 1024) > 1
    tombstoned = {key for key, value in records if value is None}
    assert {key for key, _ in records if key.startswith(b"v00000000000000000001/")} <= tombstoned
    assert not any(key.startswith(b"v00000000000000000003/") for key in tombstoned)
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker)
    try:
        described = admin.describe_configs([ConfigResource("TOPIC", topic)], config_filter="all")
    finally:
        admin.close()
    assert described["topic"][topic]["cleanup.policy"]["value"] == "compact"

    server = serve(
        "--model-topic", topic, "--set", f"kafka.bootstrap_servers={kafka_broker}", "--input", "-", "--output", "-",
        "--reload-s", "0.2",
    )  # fmt: skip
    events = _events(range(200, 210), shift=0.5)
    answers = [server.ask(event) for event in events]
    (tmp_path / "ask.jsonl").write_bytes(b"\n".join(events) + b"\n")
    predicted = subprocess.run(
        [*COMMAND, "predict", "--model", str(tmp_path / "ck"), str(tmp_path / "ask.jsonl")],
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    assert [_predicted(a) for a in answers] == [_predicted(json.loads(x)) for x in predicted.stdout.splitlines()]
    assert {a["model_version"] for a in answers} == {3}

    with open(tmp_path / "train.jsonl", "ab") as more:  # the trainer restarts, and goes on from its checkpoint
        more.write(b"\n".join(_events(range(100, 150), shift=2.0)) + b"\n")
    _run(tmp_path, "--resume")
    server.wait_for("serving model version 5")  # 140 events, then the end
    resumed = server.ask(events[0])
    assert resumed["model_version"] == 5 and resumed["score"] != answers[0]["score"]
    tombstoned = {key for key, value in _records(kafka_broker, topic) if value is None}
    assert {key for key, _ in records if key.startswith(b"v00000000000000000003/")} <= tombstoned  # the last run's

    data = newest[0].read_bytes()
    chunks, manifest = snapshot_records(1000, data, 1024, {})
    _send(kafka_broker, topic, [*chunks[:1], (chunks[1][0], chunks[1][1][::-1]), *chunks[2:], manifest])
    refused = server.wait_for("refusing model version 1000")
    assert "sha256" in refused and "model version 5 goes on serving" in refused
    chunks, manifest = snapshot_records(1001, data, 1024, {})
    _send(kafka_broker, topic, [*chunks[:-1], manifest])
    refused = server.wait_for("refusing model version 1001")
    assert f"1 of its {len(chunks)} chunks are missing" in refused and "version 5 goes on serving" in refused
    chunks, manifest = snapshot_records(1002, b"not a checkpoint" * 100, 1024, {})
    _send(kafka_broker, topic, [*chunks, manifest])
    assert "not a pegasos-stream checkpoint" in server.wait_for("refusing")
    again = server.ask(events[0])
    assert (again["model_version"], _predicted(again)) == (5, _predicted(resumed))
    assert server.stop() == 0


def test_a_replica_of_a_model_topic_answers_503_until_a_model_comes_then_says_when_it_is_stale(
    models, tmp_path, kafka_broker, kafka_topic, serve
):
    topic = kafka_topic(1)
    job = tmp_path / "connection.yaml"
    job.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": kafka_broker}}))
    server = serve(
        "--model-topic", topic, "--config", str(job), "--http", "127.0.0.1:0", "--reload-s", "0.2",
        "--max-staleness-s", "0",
    )  # fmt: skip
    server.wait_for(f"no model in model topic {topic} yet: waiting for one")
    url = server.wait_for("serving predictions on ").split(" on ")[1].split()[0]
    status, health = http_json(f"{url}/health")
    assert status == 503 and health["status"] == "waiting" and health["waiting_for"] == f"model topic {topic}"
    assert http_json(f"{url}/predict", _events(range(1))[0])[0] == 503
    chunks, manifest = snapshot_records(9, models[0].read_bytes(), 1 << 20, {})
    _send(kafka_broker, topic, [*chunks, manifest])
    server.wait_for("serving model version 9")
    status, answer = http_json(f"{url}/predict", _events(range(1))[0])
    assert status == 200 and answer["model_version"] == 9
    server.wait_for("warning: model version 9 is")  # stale: older than --max-staleness-s
    status, health = http_json(f"{url}/health")
    assert status == 200 and (health["status"], health["model_topic"]) == ("stale", topic)
    assert server.stop(signal.SIGTERM) == 0
