"""``serve --spamd``: SpamAssassin's own client, ``spamc``, checks, reports, marks and teaches messages through
the spamd protocol, with the verdicts ``predict`` gives; a request that cannot be answered gets spamd's error
code, never a hang. Real processes and sockets on loopback; the protocol's reader on its own below."""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest
from kafka_helpers import GROUP_SETTINGS

from pegasos_stream import cli
from pegasos_stream.io.records import Record
from pegasos_stream.parse.parsing import USER_LINE, BadRecord, EventParser, taught_record
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.serve.feedback import FeedbackSpool
from pegasos_stream.serve.serving import Serving
from pegasos_stream.serve.spamd import (
    EX_PROTOCOL,
    ProtocolError,
    SpamdService,
    Verdict,
    read_request,
    with_spam_headers,
)
from pegasos_stream.serve.spamd_server import SpamdServer

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
SPAMC = shutil.which("spamc")
#: Seconds to wait for a process or an answer: far past the real thing, for a loaded machine.
WAIT = 30
needs_spamc = pytest.mark.skipif(SPAMC is None, reason="spamc is not installed (.ci/run installs it)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A checkpoint of the spam configuration on the bundled sample, and a few messages of each class."""
    directory = tmp_path_factory.mktemp("spamd") / "ck"
    args = ["run", "--config", "spam", "--set", f"checkpoint.dir={directory}", "--output", os.devnull]
    assert cli.main(args) == 0
    found = latest_valid(directory)
    assert found is not None
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    chosen = [r for r in records if r["label"] == "spam"][:3] + [r for r in records if r["label"] == "ham"][:3]
    return directory, chosen


class Spamd:
    """``pegasos-stream serve --spamd`` in a process of its own, listening on a free port or a socket."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [*COMMAND, "serve", *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        assert self.process.stderr is not None
        self.log: list[str] = []
        for line in self.process.stderr:
            self.log.append(line)
            if "answering spamd's protocol on " in line:
                self.started = line  # where it listens, and where TELL delivers
                self.address = line.split(" on ", 1)[1].split(" ", 1)[0]
                break
        else:
            raise AssertionError(f"serve --spamd did not start: {self.log}")
        threading.Thread(target=lambda: self.log.extend(self.process.stderr or ()), daemon=True).start()

    def spamc(self, *flags: str, message: bytes = b"") -> subprocess.CompletedProcess:
        host, _, port = self.address.rpartition(":")
        where = ["-U", self.address] if self.address.startswith("/") else ["-d", host, "-p", port]
        return subprocess.run([SPAMC, *where, *flags], input=message, capture_output=True, timeout=WAIT)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=WAIT)


@pytest.fixture
def spamd():
    started: list[Spamd] = []

    def start(*args: str) -> Spamd:
        started.append(Spamd(*args))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=WAIT)


def _predicted(checkpoint: Path, message: bytes, tmp_path: Path) -> float:
    """``predict``'s probability of spam for ``message``."""
    path = tmp_path / "message.eml"
    path.write_bytes(message)
    result = subprocess.run([*COMMAND, "predict", "--model", str(checkpoint), str(path)], capture_output=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["proba"]


@needs_spamc
def test_spamc_checks_reports_and_marks_messages_as_predict_scores_them(trained, spamd, tmp_path):
    checkpoint, messages = trained
    server = spamd("--model", str(checkpoint), "--spamd", "127.0.0.1:0")
    for record in messages:
        message = record["text"].encode()
        proba = _predicted(checkpoint, message, tmp_path)
        score = round(math.log(proba / (1 - proba)), 1)
        spam = score >= 1.5
        assert spam == (record["label"] == "spam")  # (the sample's model knows these)

        check = server.spamc("-c", message=message)  # exit 1 for spam, 0 for ham; "score/required"
        assert (check.returncode, check.stdout) == (int(spam), f"{score:.1f}/1.5\n".encode())

        report = server.spamc("-R", message=message)
        assert report.stdout.startswith(f"{score:.1f}/1.5\n".encode())
        assert f"({score:.1f} points, 1.5 required)".encode() in report.stdout

        marked = server.spamc(message=message).stdout  # PROCESS: the message with its headers
        head, _, body = marked.partition(b"\n\n")
        assert f"X-Spam-Score: {score:.1f}".encode() in head and (b"X-Spam-Flag: YES" in head) == spam
        assert f"X-Spam-Status: {'Yes' if spam else 'No'}, score={score:.1f} required=1.5".encode() in head
        assert body == message.partition(b"\n\n")[2]

        headers = server.spamc("--headers", message=message).stdout  # HEADERS: spamc puts the body back
        assert headers == marked
        assert server.spamc("-y", message=message).stdout.strip() == b"PEGASOS_STREAM"  # SYMBOLS
    assert server.spamc("-K").stdout.startswith(b"SPAMD/1.5 0")  # PING
    assert server.stop() == 0
    deadline = time.monotonic() + WAIT  # (the access log's lines, one per request, read from its stderr by a thread)
    while len(checks := [line for line in server.log if 'spamd 127.0.0.1 "CHECK" 0 ' in line]) < len(messages):
        assert time.monotonic() < deadline, server.log
        time.sleep(0.05)
    assert len(checks) == len(messages) and all(line.rstrip().endswith(" ms") for line in checks)


def _ask(address: str, request: bytes) -> bytes:
    """The whole answer of the server at ``address`` (HOST:PORT) to ``request``, sent on a connection of its own."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=WAIT) as connection:
        connection.sendall(request)
        connection.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: connection.recv(65536), b""))


#: How Exim's ``spam =`` condition (src/spam.c, which asks ``REPORT SPAMC/1.2``) reads spamd's answer: its first
#: form, then its fallback; the score and the threshold.
EXIM_FORMS = (
    re.compile(rb"SPAMD/\S{1,7} 0 EX_OK\r\nContent-length: \d+\r\n\r\n(-?[\d.]+)/(-?[\d.]+)\r\n"),
    re.compile(rb"SPAMD/\S{1,7} 0 EX_OK\r\nSpam: \S+ ; (-?[\d.]+) / (-?[\d.]+)\r\n\r\n"),
)


def test_a_client_of_the_protocol_before_1_3_gets_one_header_as_from_spamd_so_exim_reads_the_score(trained, spamd):
    """spamd answers a client before SPAMC/1.3 with one header: ``Spam`` for the scoring commands, ``Content-length``
    for PROCESS and HEADERS. Exim's spam condition asks ``REPORT SPAMC/1.2`` and reads the score from that shape."""
    server = spamd("--model", str(trained[0]), "--spamd", "127.0.0.1:0")
    message = trained[1][0]["text"].encode()
    ask = b"%s SPAMC/%s\r\nUser: nobody\r\nContent-length: %d\r\n\r\n%s"
    checked = _ask(server.address, ask % (b"CHECK", b"1.5", len(message), message))
    score = re.search(rb"Spam: True ; (-?[\d.]+) / 1.5\r\n", checked).group(1)  # type: ignore[union-attr]
    report = _ask(server.address, ask % (b"REPORT", b"1.2", len(message), message))
    read = [form.match(report) for form in EXIM_FORMS]
    assert read[0] is None and read[1] is not None and read[1].groups() == (score, b"1.5")
    assert b"Content-length" not in report.partition(b"\r\n\r\n")[0] and b"PEGASOS_STREAM" in report
    for command in (b"CHECK", b"SYMBOLS", b"REPORT_IFSPAM"):
        head = _ask(server.address, ask % (command, b"1.2", len(message), message)).partition(b"\r\n\r\n")[0]
        assert head.split(b"\r\n")[1:] == [b"Spam: True ; " + score + b" / 1.5"]
    for command in (b"PROCESS", b"HEADERS"):
        answer = _ask(server.address, ask % (command, b"1.2", len(message), message))
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.split(b"\r\n")[1:] == [b"Content-length: %d" % len(body)]
        assert _ask(server.address, ask % (command, b"1.5", len(message), message)).partition(b"\r\n\r\n")[2] == body
    assert server.stop() == 0


@pytest.mark.slow
@needs_spamc
def test_spamc_teaches_messages_which_run_learns_once_and_the_served_score_moves(trained, spamd, tmp_path):
    """spamc -L spam|ham delivers into the feedback Maildir; a resumed run over it learns each message once (the
    model trained on JSON events learns on from raw messages: the same examples), and serve takes up the model it
    writes."""
    learned, feedback = tmp_path / "learned", tmp_path / "feedback"
    assert cli.main(["run", "--config", "spam", "--set", f"checkpoint.dir={learned}", "--output", os.devnull]) == 0
    server = spamd("--model", str(learned), "--spamd", "127.0.0.1:0", "--feedback", str(feedback), "--reload-s", "0.2")
    ham = trained[1][3]["text"].encode()
    before = server.spamc("-c", message=ham).stdout
    for _ in range(30):
        taught = server.spamc("-L", "spam", message=ham)
        assert taught.returncode == 0 and b"successfully" in taught.stdout
    assert server.spamc("-L", "ham", message=trained[1][0]["text"].encode()).returncode == 0
    assert len(list((feedback / "Spam" / "new").iterdir())) == 30
    assert len(list((feedback / "Ham" / "new").iterdir())) == 1

    learn = ["run", "--config", "spam", "--input", str(feedback), "--set", f"checkpoint.dir={learned}", "--resume"]
    learn += ["--set", "source.folders={Spam: spam, Ham: ham}", "--output", os.devnull]
    for _ in range(2):  # the second run finds nothing new
        assert cli.main(learn) == 0
        state = latest_valid(learned)
        assert state is not None and state[1]["model"].t == 404 + 31

    deadline = time.monotonic() + WAIT
    after = before
    while after == before and time.monotonic() < deadline:  # the follower takes up the newer checkpoint
        time.sleep(0.1)
        after = server.spamc("-c", message=ham).stdout
    assert float(after.split(b"/")[0]) > float(before.split(b"/")[0]), server.log
    assert not any("refusing" in line for line in server.log)


def _learned_steps(directory: Path) -> int:
    """The step count of the newest valid checkpoint in ``directory`` (0: none yet)."""
    found = latest_valid(directory)
    return 0 if found is None else found[1]["model"].t


def _spam_score(check: subprocess.CompletedProcess) -> float:
    """The score of a ``spamc -c`` answer ("3.2/1.5")."""
    return float(check.stdout.split(b"/")[0])


@pytest.mark.slow
@needs_spamc
def test_spamc_teaches_through_a_kafka_topic_which_a_killed_run_learns_exactly_once(
    trained, spamd, kafka_broker, kafka_topic, tmp_path
):
    """serve --feedback-topic appends each message spamc -L teaches to a Kafka topic once the broker holds it, and
    learn --feedback-topic each message it is given; a run over the topic (source.format: raw) learns each by the
    label it carries. SIGKILLed once it has learned the first ones and started again, the run learns every message
    exactly once, and serve takes up its model."""
    topic, learned, broker = kafka_topic(1), tmp_path / "learned", f"kafka.bootstrap_servers={kafka_broker}"
    assert cli.main(["run", "--config", "spam", "--set", f"checkpoint.dir={learned}", "--output", os.devnull]) == 0
    feedback = ["--feedback-topic", topic, "--set", broker]
    server = spamd("--model", str(learned), "--spamd", "127.0.0.1:0", *feedback, "--reload-s", "0.2")
    assert f"; TELL delivers into the topic {topic})" in server.started
    ham, spam = trained[1][3]["text"].encode(), trained[1][0]["text"].encode()
    before = _spam_score(server.spamc("-c", message=ham))

    def teach(count: int, label: str, message: bytes) -> None:
        for _ in range(count):
            taught = server.spamc("-L", label, message=message)
            assert taught.returncode == 0 and b"successfully" in taught.stdout, taught

    learner = [*COMMAND, "run", "--config", "spam", "--resume", "--output", os.devnull]
    for setting in (
        "source.type=kafka", f"source.topics=[{topic}]", "source.format=raw", "source.group_id=feedback",
        "source.start=earliest", broker, f"checkpoint.dir={learned}", "checkpoint.every_events=1",
    ):  # fmt: skip
        learner += ["--set", setting]
    for name, value in GROUP_SETTINGS.items():  # (the killed run's session ends in 2 s: the second joins soon)
        learner += ["--set", f"source.consumer.{name}={value}"]
    teach(12, "spam", ham)
    # (its first run continues the sample's model under the Kafka source: --accept-config)
    first = subprocess.Popen([*learner, "--accept-config", "--stop-when-idle", "120"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + WAIT
        while _learned_steps(learned) < 404 + 12 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _learned_steps(learned) == 404 + 12
    finally:
        first.kill()
        first.wait(timeout=WAIT)
    teach(17, "spam", ham)
    (tmp_path / "spam.eml").write_bytes(spam)  # and two by learn, as sa-learn teaches
    files = [str(tmp_path / "spam.eml")] * 2
    assert cli.main(["learn", "--ham", "--feedback-topic", topic, "--set", broker, *files]) == 0
    again = subprocess.run([*learner, "--stop-when-idle", "3"], capture_output=True, timeout=4 * WAIT)
    assert again.returncode == 0, again.stderr
    assert _learned_steps(learned) == 404 + 31  # each taught message once, none lost, none twice

    deadline = time.monotonic() + WAIT
    after = before
    while after == before and time.monotonic() < deadline:  # the follower takes up the newer checkpoint
        time.sleep(0.1)
        after = _spam_score(server.spamc("-c", message=ham))
    assert after > before, server.log


def test_learn_delivers_mboxes_messages_and_maildirs_which_run_learns_once(trained, tmp_path, capsys):
    """``learn --spam|--ham`` (sa-learn's habit): an mbox's messages, one raw message and a Maildir's files (not
    its tmp/, hidden files or Maildir++ folders) go into the feedback Maildir, which a resumed run learns once."""
    texts = [b"From: x%d@example.com\nSubject: offer %d\n\nbuy now, %d\n" % (i, i, i) for i in range(6)]
    mbox = tmp_path / "junk.mbox"
    mbox.write_bytes(b"".join(b"From a@b Thu Jan  1 00:00:00 2004\n" + text + b"\n" for text in texts[:3]))
    maildir = tmp_path / "Maildir"
    for part, name, text in (("cur", "1.a:2,S", texts[3]), ("new", "2.b", texts[4]), ("tmp", "3.c", texts[5])):
        (maildir / part).mkdir(parents=True, exist_ok=True)
        (maildir / part / name).write_bytes(text)
    (maildir / ".Junk" / "cur").mkdir(parents=True)
    (maildir / ".Junk" / "cur" / "4.d").write_bytes(texts[0])
    (tmp_path / "one.eml").write_bytes(texts[5])
    feedback = tmp_path / "feedback"
    assert cli.main(["learn", "--spam", "--feedback", str(feedback), str(mbox)]) == 0
    assert cli.main(["learn", "--ham", "--feedback", str(feedback), str(maildir), str(tmp_path / "one.eml")]) == 0
    assert "delivered 3 messages into" in capsys.readouterr().err
    assert sorted(p.read_bytes() for p in (feedback / "Spam" / "new").iterdir()) == sorted(texts[:3])
    assert sorted(p.read_bytes() for p in (feedback / "Ham" / "new").iterdir()) == sorted(texts[3:6])
    assert cli.main(["learn", "--ham", "--feedback", str(feedback), str(tmp_path / "missing")]) == 2
    assert "missing: no such file or directory" in capsys.readouterr().err

    checkpoints = tmp_path / "ck"
    learn = ["run", "--config", "spam", "--set", f"checkpoint.dir={checkpoints}", "--output", os.devnull]
    assert cli.main(learn) == 0
    learn += ["--input", str(feedback), "--set", "source.folders={Spam: spam, Ham: ham}", "--resume"]
    for _ in range(2):  # the second run finds nothing new
        assert cli.main(learn) == 0
        state = latest_valid(checkpoints)
        assert state is not None and state[1]["model"].t == 404 + 6


@needs_spamc
def test_a_unix_socket_and_no_model_yet_answer_with_spamds_codes(trained, spamd, tmp_path):
    """Without a model, a request is answered EX_TEMPFAIL: spamc passes the message through, unmarked. TELL
    without --feedback is answered EX_UNAVAILABLE."""
    socket_path, models = tmp_path / "spamd.sock", tmp_path / "models"
    models.mkdir()
    server = spamd("--model", str(models), "--spamd", str(socket_path))
    assert (socket_path.stat().st_mode & 0o777) == 0o660
    message = trained[1][0]["text"].encode()
    assert server.spamc(message=message).stdout == message  # passed through
    assert server.spamc("-c", message=message).stdout == b"0/0\n"
    assert server.stop() == 0 and not socket_path.exists()
    server = spamd("--model", str(trained[0]), "--spamd", str(socket_path))
    assert server.spamc("-c", message=message).returncode == 1
    taught = server.spamc("-L", "spam", message=message)
    assert taught.returncode != 0 and b"successfully" not in taught.stdout
    assert "TELL refused, learning is off: serve --feedback DIR or --feedback-topic TOPIC" in server.started


def _request(raw: bytes, max_bytes: int = 1 << 20):
    return read_request(io.BufferedReader(io.BytesIO(raw)), max_bytes)  # type: ignore[arg-type]


def test_the_reader_takes_spamds_requests_and_refuses_what_is_not():
    message = b"Subject: hi\r\n\r\nhello"
    request = _request(b"CHECK SPAMC/1.5\r\nContent-length: 20\r\nUser: ann\r\n\r\n" + message)
    assert (request.command, request.user, request.message, request.truncated) == ("CHECK", "ann", message, False)
    cut = _request(b"CHECK SPAMC/1.5\r\nContent-length: 20\r\n\r\n" + message, max_bytes=8)
    assert (cut.message, cut.truncated) == (message[:8], True)
    packed = zlib.compress(message)
    zipped = _request(b"PROCESS SPAMC/1.5\r\nContent-length: %d\r\nCompress: zlib\r\n\r\n" % len(packed) + packed)
    assert zipped.message == message
    assert _request(b"PING SPAMC/1.5\r\n\r\n").command == "PING"
    for bad, reason in [
        (b"GET / HTTP/1.1\r\n\r\n", "bad request line"),
        (b"CHECK SPAMC/1.5\r\nContent-length: x\r\n\r\n", "expected a number of bytes"),
        (b"CHECK SPAMC/1.5\r\nContent-length: 99\r\n\r\nshort", "short of its Content-length"),
        (b"CHECK SPAMC/1.5\r\nno colon\r\n\r\n", "bad header line"),
        (b"CHECK SPAMC/1.5\r\n" + b"X" * 9000 + b"\r\n\r\n", "too long"),
    ]:
        with pytest.raises(ProtocolError, match=reason) as refused:
            _request(bad)
        assert refused.value.code == EX_PROTOCOL


def test_the_spam_headers_replace_any_the_message_came_with_in_its_own_line_ends():
    forged = b"From: a@b\r\nX-Spam-Flag: NO\r\nX-Spam-Status: No,\r\n  tests=NONE\r\nSubject: s\r\n\r\nbody\r\n"
    status = b"Yes, score=3.2 required=1.5 tests=PEGASOS_STREAM autolearn=no version=pegasos-stream 0.1.0 model=7"
    assert with_spam_headers(forged, Verdict(3.2, 1.5, 0.96, 7)) == (
        b"From: a@b\r\nSubject: s\r\nX-Spam-Flag: YES\r\nX-Spam-Score: 3.2\r\nX-Spam-Status: " + status
        + b"\r\n\r\nbody\r\n"
    )  # fmt: skip
    ham = with_spam_headers(b"no header block at all", Verdict(-1.0, 1.5, 0.3, 1))
    assert ham.startswith(b"X-Spam-Score: -1.0\nX-Spam-Status: No, score=-1.0") and ham.endswith(
        b"\n\nno header block at all"
    )


class _NoModel:
    """A model provider that has none yet."""

    current = None
    origin = "nowhere"
    last_refusal = None

    def refresh(self) -> bool:
        return False


def test_past_the_connection_limit_or_the_time_a_request_is_answered_tempfail_at_once():
    service = SpamdService(Serving(_NoModel()))  # type: ignore[arg-type]
    server = SpamdServer(service, ("127.0.0.1", 0), max_connections=1, timeout_s=0.5)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.address.rsplit(":", 1)
    try:
        idle = socket.create_connection((host, int(port)), timeout=WAIT)  # holds the one place, sends nothing
        second = socket.create_connection((host, int(port)), timeout=WAIT)
        assert second.recv(200).startswith(b"SPAMD/1.5 75 EX_TEMPFAIL too many connections")
        assert idle.recv(200).startswith(b"SPAMD/1.5 75 EX_TEMPFAIL the request did not come in time")
        assert idle.recv(200) == b""  # closed once its place is free
        idle.close()
        second.close()
        third = socket.create_connection((host, int(port)), timeout=WAIT)  # the place is free again
        third.sendall(b"PING SPAMC/1.5\r\n\r\n")
        assert third.recv(200) == b"SPAMD/1.5 0 PONG\r\n"
        assert third.recv(200) == b""  # closed once its place is free
        third.close()
        fourth = socket.create_connection((host, int(port)), timeout=WAIT)
        fourth.sendall(b"CHECK SPAMC/1.5\r\nContent-length: 2\r\n\r\nhi")
        assert fourth.recv(200).startswith(b"SPAMD/1.5 75 EX_TEMPFAIL no model yet")
        fourth.close()
    finally:
        server.shutdown()
        server.close()


@needs_spamc
def test_a_taught_message_keeps_its_user_which_a_personal_run_learns_and_takes_away(trained, spamd, tmp_path):
    """spamc -u names the user of a taught message: the spool puts it on a first line of its own, and a personal
    model's run learns the message as that user's, the line taken away (the features of the message as taught)."""
    feedback, learned = tmp_path / "feedback", tmp_path / "learned"
    server = spamd("--model", str(trained[0]), "--spamd", "127.0.0.1:0", "--feedback", str(feedback))
    message = trained[1][0]["text"].encode()
    assert server.spamc("-u", "ann", "-L", "spam", message=message).returncode == 0
    (first,) = (feedback / "Spam" / "new").iterdir()
    end = b"\r" if b"\r\n" in message[:4096] else b""
    assert first.read_bytes().split(b"\n", 1) == [USER_LINE + b"ann" + end, message]
    run = ["run", "--config", "personal", "--input", str(feedback), "--set", f"checkpoint.dir={learned}"]
    assert cli.main([*run, "--set", "source.folders={Spam: spam, Ham: ham}", "--output", os.devnull]) == 0
    model = latest_valid(learned)[1]["model"]  # type: ignore[index]
    assert model.t == 1 and model.users == 1 and model.offset("ann").t == 1
    parser = EventParser("raw", users=True)
    event = parser.parse(Record(first.read_bytes(), "taught", label="spam"))
    assert (event.user, event.text) == ("ann", message)
    plain = EventParser("raw").parse(Record(first.read_bytes(), "taught"))  # (not reading users: the line goes)
    assert plain is not None and (plain.user, plain.text) == (None, message)


@pytest.mark.parametrize("end", [b"\n", b"\r\n"])
def test_a_taught_record_is_read_back_as_the_message_its_label_and_its_user(end):
    message = b"Subject: hi" + end + end + b"hello" + end
    parser = EventParser("raw", labels={"positive": "spam", "negative": "ham"}, taught=True)
    users = EventParser("raw", users=True)
    mail = EventParser("raw", labels={"positive": "spam", "negative": "ham"})  # (not a feedback log's)
    for label, user in [("spam", None), ("ham", "ann"), (None, "bob")]:
        record = taught_record(message, label, user)
        lines = 2 - (label, user).count(None)  # a line before the message for each of them given
        assert record.endswith(message) and record.count(end) == message.count(end) + lines
        event = parser.parse(Record(record, "taught"))
        assert (event.text, event.label, event.user) == (message, None if label is None else label == "spam", None)
        assert users.parse(Record(record, "taught")).user == user
        untaught = mail.parse(Record(record, "mail"))  # a sender's line names no label: taken away, left
        assert (untaught.text, untaught.label) == (message, None)
    sourced = parser.parse(Record(taught_record(message, "spam"), "in Ham/", label="ham"))
    assert sourced.label is False  # the source's label (a folder's) stands over the record's line
    with pytest.raises(BadRecord, match="unknown label 'junk'"):
        parser.parse(Record(taught_record(message, "junk"), "taught"))


def test_a_user_name_that_is_not_one_printable_line_is_refused(tmp_path):
    spool = FeedbackSpool(tmp_path)
    for user in ("", "a\r\nX-Spam: no", "x" * 257):
        with pytest.raises(ValueError, match="expected a name of 1 to 256 printable characters"):
            spool.add(b"Subject: hi\n\nhello", "ham", user)
    assert not list((tmp_path / "Ham" / "new").iterdir())
