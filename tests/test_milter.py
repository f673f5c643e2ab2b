"""``serve --milter``: a real Postfix on loopback, started here with a configuration, queue and ports of its own, hands
each message it gets by SMTP to the milter and delivers it with the X-Spam-* headers spamd's PROCESS adds, rejects
it at SMTP time from ``--milter-reject-score``, and, without a model, delivers it unmarked or has the client try
again later (``--milter-fail``); a signal ends the milter with status 0. The filter's parts on their own below."""

from __future__ import annotations

import gzip
import json
import math
import os
import pwd
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator
from email.parser import BytesHeaderParser
from pathlib import Path

import pytest
from http_helpers import free_port

from pegasos_stream import cli
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.serve.access import AccessLog

try:
    import Milter
except ImportError:  # pymilter not installed: the tests that need it are skipped
    Milter = None

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
POSTFIX = shutil.which("postfix") or next((p for p in ("/usr/sbin/postfix",) if os.access(p, os.X_OK)), None)
RSPAMD = shutil.which("rspamd")
#: Seconds to wait for a process, an answer or a delivery: far past the real thing, for a loaded machine.
WAIT = 30
needs_pymilter = pytest.mark.skipif(
    Milter is None, reason="pymilter is not installed (the milter extra, which .ci/run installs)"
)
needs_postfix = pytest.mark.skipif(
    POSTFIX is None or Milter is None or os.geteuid() != 0,
    reason="needs Postfix, pymilter and root (.ci/run installs postfix and libmilter-dev)",
)
#: The milters Postfix's listeners are wired to: the flags of each ``serve`` (CK: the checkpoint, EMPTY: a directory
#: without one, a model not there yet).
MILTERS = {
    "marks": ["--model", "CK"],
    "rejects": ["--model", "CK", "--milter-reject-score", "1.5"],
    "opens": ["--model", "EMPTY"],
    "tempfails": ["--model", "EMPTY", "--milter-fail", "tempfail"],
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, bytes, bytes]:
    """A checkpoint of the spam configuration on the bundled sample, and a spam and a ham message it knows."""
    directory = tmp_path_factory.mktemp("milter") / "ck"
    args = ["run", "--config", "spam", "--set", f"checkpoint.dir={directory}", "--output", os.devnull]
    assert cli.main(args) == 0
    assert latest_valid(directory) is not None
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    spam, ham = (next(r["text"].encode() for r in records if r["label"] == label) for label in ("spam", "ham"))
    return directory, spam.rstrip(b"\n") + b"\n", ham.rstrip(b"\n") + b"\n"  # SMTP ends a message's last line


class Serve:
    """``pegasos-stream serve --milter`` in a process of its own, on a free port."""

    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [*COMMAND, "serve", "--milter", f"127.0.0.1:{self.port}", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.log: list[str] = []

    def wait_ready(self) -> Serve:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            if "filtering mail as a milter on " in line:
                break
        else:
            raise AssertionError(f"serve --milter did not start: {self.log}")
        threading.Thread(target=lambda: self.log.extend(self.process.stderr or ()), daemon=True).start()
        return self

    def logged(self, text: str) -> bool:
        """Whether a line of the log holds ``text``, waited for."""
        deadline = time.monotonic() + WAIT
        while not any(text in line for line in self.log) and time.monotonic() < deadline:
            time.sleep(0.05)
        return any(text in line for line in self.log)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(timeout=WAIT)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)


@pytest.fixture(scope="module")
def milters(trained, tmp_path_factory) -> Iterator[dict[str, Serve]]:
    """The milters of `MILTERS`, started at once."""
    empty = tmp_path_factory.mktemp("no-model")
    named = {"CK": str(trained[0]), "EMPTY": str(empty)}
    started = {name: Serve(*(named.get(arg, arg) for arg in args)) for name, args in MILTERS.items()}
    try:
        yield {name: serve.wait_ready() for name, serve in started.items()}
    finally:
        for serve in started.values():
            serve.kill()


#: rspamd's configuration of its proxy alone, a milter that asks the ``/checkv2`` of the upstream given.
RSPAMD_CONF = """\
options {{ pidfile = "{d}/rspamd.pid"; dbdir = "{d}"; }}
logging {{ type = "file"; filename = "{d}/rspamd.log"; level = "info"; }}
worker "rspamd_proxy" {{
  bind_socket = "127.0.0.1:{port}";
  milter = yes;
  timeout = 30s;
  upstream "pegasos" {{ default = yes; hosts = "127.0.0.1:{upstream}"; }}
  count = 1;
}}
"""


class RspamdProxy:
    """rspamd's proxy worker as a milter on a free port, in a process of its own (its configuration, log and state
    in ``directory``), in front of ``serve --http`` on another: the way an rspamd proxy reaches a filter that
    answers rspamd's ``/checkv2``."""

    def __init__(self, directory: Path, checkpoint: Path) -> None:
        self.port, upstream = free_port(), free_port()
        self.serve = subprocess.Popen(
            [*COMMAND, "serve", "--model", str(checkpoint), "--http", f"127.0.0.1:{upstream}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        (directory / "rspamd.conf").write_text(RSPAMD_CONF.format(d=directory, port=self.port, upstream=upstream))
        user = "root" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self.rspamd = subprocess.Popen(
            [str(RSPAMD), "-f", "-i", "-u", user, "-g", user, "-c", str(directory / "rspamd.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=directory,
        )
        self.log = directory / "rspamd.log"
        for port in (upstream, self.port):  # rspamd takes seconds to start (it compiles its maps)
            deadline = time.monotonic() + WAIT
            while not _listening(port):
                assert time.monotonic() < deadline, self.log.read_text(errors="replace")[-2000:]
                time.sleep(0.2)

    def kill(self) -> None:
        for process in (self.rspamd, self.serve):
            if process.poll() is None:
                process.kill()
                process.wait(timeout=WAIT)


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def proxies(trained) -> Iterator[dict[str, RspamdProxy]]:
    """rspamd's proxy, as a milter in front of ``serve --http``, when rspamd is installed (none otherwise)."""
    if RSPAMD is None:
        yield {}
        return
    directory = Path(tempfile.mkdtemp(prefix="pegasos-rspamd-"))
    proxy = RspamdProxy(directory, trained[0])
    try:
        yield {"rspamd": proxy}
    finally:
        proxy.kill()
        shutil.rmtree(directory, ignore_errors=True)


MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {d}/queue
data_directory = {d}/data
mail_owner = postfix
setgid_group = postdrop
maillog_file = {d}/maillog
maillog_file_prefixes = {d}
myhostname = mx.pegasos.test
mydomain = pegasos.test
myorigin = pegasos.test
mydestination =
relayhost =
inet_interfaces = loopback-only
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
alias_maps =
alias_database =
local_recipient_maps =
biff = no
smtputf8_enable = no
virtual_mailbox_domains = example.test
virtual_mailbox_base = {d}/mail
virtual_mailbox_maps = texthash:{d}/etc/mailboxes
virtual_minimum_uid = 1
virtual_uid_maps = static:{uid}
virtual_gid_maps = static:{gid}
non_smtpd_milters =
milter_default_action = accept
"""
#: The services of the instance (no chroot), less its SMTP listeners.
MASTER_CF = """\
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
virtual   unix  -       n       n       -       -       virtual
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"""


#: The mailboxes of the instance (the virtual delivery agent takes no regular expression's $1).
RECIPIENTS = ("spam", "ham", "forged", "rejected", "kept", "open", "later", "proxied-spam", "proxied-ham")


class Postfix:
    """A Postfix instance of its own in ``directory`` (configuration, queue, data, Maildirs, log), whose SMTP
    listeners on 127.0.0.1 are each wired to one of ``milters``; mail to ``NAME@example.test`` (NAME one of
    `RECIPIENTS`) is delivered to the Maildir ``mail/NAME/``. Never port 25, nor the system's configuration."""

    def __init__(self, directory: Path, milters: dict[str, Serve | RspamdProxy]) -> None:
        self.directory = directory
        self.ports = {name: free_port() for name in milters}
        user = pwd.getpwnam("postfix")
        for part in ("etc", "queue", "data", "mail"):
            (directory / part).mkdir()
        for owned in ("data", "mail"):  # the postfix user's, as the virtual delivery agent runs as it here
            os.chown(directory / owned, user.pw_uid, user.pw_gid)
        etc = directory / "etc"
        (etc / "main.cf").write_text(MAIN_CF.format(d=directory, uid=user.pw_uid, gid=user.pw_gid))
        (etc / "mailboxes").write_text("".join(f"{name}@example.test {name}/\n" for name in RECIPIENTS))
        listeners = [
            f"127.0.0.1:{self.ports[name]} inet n - n - - smtpd -o smtpd_milters=inet:127.0.0.1:{serve.port}"
            for name, serve in milters.items()
        ]
        (etc / "master.cf").write_text(MASTER_CF + "\n".join(listeners) + "\n")

    def postfix(self, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [POSTFIX, "-c", str(self.directory / "etc"), command], capture_output=True, text=True, timeout=WAIT
        )

    def send(self, listener: str, recipient: str, message: bytes) -> None:
        """``message`` (LF line ends) to ``recipient`` by SMTP (CRLF), on the listener wired to the milter
        ``listener``."""
        with smtplib.SMTP("127.0.0.1", self.ports[listener], timeout=WAIT) as client:
            client.sendmail("sender@pegasos.test", [f"{recipient}@example.test"], message.replace(b"\n", b"\r\n"))

    def delivered(self, recipient: str) -> bytes:
        """The one message delivered to ``recipient``, waited for."""
        new = self.directory / "mail" / recipient / "new"
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            found = list(new.iterdir()) if new.is_dir() else []
            if found:
                assert len(found) == 1, found
                return found[0].read_bytes()
            time.sleep(0.05)
        raise AssertionError(f"nothing delivered to {recipient}: {self.log()}")

    def log(self) -> str:
        path = self.directory / "maillog"
        return path.read_text(errors="replace")[-4000:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def postfix(milters, proxies) -> Iterator[Postfix]:
    """A Postfix of its own, started, and stopped (its directory removed) whatever happens. Its directory is made
    here, readable by the postfix user that delivers into it (pytest's temporary directories are not)."""
    directory = Path(tempfile.mkdtemp(prefix="pegasos-postfix-"))
    directory.chmod(0o755)
    instance = Postfix(directory, {**milters, **proxies})
    try:
        started = instance.postfix("start")
        assert started.returncode == 0, started.stdout + started.stderr + instance.log()
        yield instance
    finally:
        instance.postfix("stop")
        shutil.rmtree(directory, ignore_errors=True)


def _headers(message: bytes) -> dict[str, list[str]]:
    parsed = BytesHeaderParser().parsebytes(message)
    return {name: [str(value) for value in parsed.get_all(name, [])] for name in set(parsed.keys())}


def _seen(delivered: bytes) -> bytes:
    """The message as the milter saw it: as delivered, less the headers the delivery added (Return-Path,
    Delivered-To) and those the milter added."""
    head, _, body = delivered.partition(b"\n\n")
    dropped = (b"return-path:", b"delivered-to:", b"x-spam-flag:", b"x-spam-score:", b"x-spam-status:")
    kept = [line for line in head.split(b"\n") if not line.lower().startswith(dropped)]
    return b"\n".join(kept) + b"\n\n" + body


def _score(checkpoint: Path, message: bytes, tmp_path: Path, capsys) -> float:
    """``predict``'s score of ``message``: the log-odds of its probability of spam, rounded to 0.1 as spamd's."""
    path = tmp_path / "message.eml"
    path.write_bytes(message)
    capsys.readouterr()
    assert cli.main(["predict", "--model", str(checkpoint), str(path)]) == 0
    proba = json.loads(capsys.readouterr().out)["proba"]
    return round(math.log(proba / (1 - proba)), 1)


@pytest.mark.slow
@needs_postfix
def test_postfix_delivers_each_message_with_the_headers_spamd_adds(trained, postfix, milters, tmp_path, capsys):
    checkpoint, spam, ham = trained
    forged = b"X-Spam-Flag: YES\nX-Spam-Status: Yes, score=99.0\n" + ham  # a sender's own verdict is not kept
    sent = {"spam": spam, "ham": ham, "forged": forged}
    for recipient, message in sent.items():
        postfix.send("marks", recipient, message)
    for recipient, is_spam in (("spam", True), ("ham", False), ("forged", False)):
        delivered = postfix.delivered(recipient)
        assert delivered.partition(b"\n\n")[2] == sent[recipient].partition(b"\n\n")[2]
        headers = _headers(delivered)
        [score] = headers["X-Spam-Score"]
        [status] = headers["X-Spam-Status"]
        assert headers.get("X-Spam-Flag") == (["YES"] if is_spam else None)
        assert status.startswith(f"{'Yes' if is_spam else 'No'}, score={score} required=1.5 tests=PEGASOS_STREAM ")
        assert (float(score) >= 1.5) == is_spam
        if recipient != "forged":  # the milter scored it with the forged headers
            assert float(score) == _score(checkpoint, _seen(delivered), tmp_path, capsys)
    assert milters["marks"].logged('milter 127.0.0.1 "EOM" mark '), milters["marks"].log  # its access log


@pytest.mark.slow
@needs_postfix
@pytest.mark.skipif(RSPAMD is None, reason="rspamd is not installed (.ci/run installs it)")
def test_rspamds_proxy_asks_checkv2_and_postfix_delivers_the_headers_spamd_adds(trained, postfix, tmp_path, capsys):
    """rspamd's proxy as Postfix's milter, its upstream ``serve --http``: the /checkv2 answer's ``milter`` block has
    the proxy add the headers spamd's PROCESS adds (and take away a sender's), its action "add header" X-Spam."""
    checkpoint, spam, ham = trained
    sent = {"proxied-spam": b"X-Spam-Flag: NO\n" + spam, "proxied-ham": ham}
    for recipient, message in sent.items():
        postfix.send("rspamd", recipient, message)
    for recipient, is_spam in (("proxied-spam", True), ("proxied-ham", False)):
        delivered = postfix.delivered(recipient)
        headers = _headers(delivered)
        [score] = headers["X-Spam-Score"]
        [status] = headers["X-Spam-Status"]
        assert headers.get("X-Spam-Flag") == (["YES"] if is_spam else None)  # the sender's "NO" taken away
        assert headers.get("X-Spam") == (["Yes"] if is_spam else None)  # the proxy's own, for "add header"
        assert status.startswith(f"{'Yes' if is_spam else 'No'}, score={score} required=1.5 tests=PEGASOS_STREAM ")
        assert float(score) == _score(checkpoint, _seen(sent[recipient]), tmp_path, capsys)


@pytest.mark.slow
@needs_postfix
def test_a_message_from_the_reject_score_is_refused_at_smtp_time(trained, postfix):
    _, spam, ham = trained
    with pytest.raises(smtplib.SMTPDataError) as refused:
        postfix.send("rejects", "rejected", spam)
    assert refused.value.smtp_code == 550
    assert refused.value.smtp_error.startswith(b"5.7.1 Message rejected as spam (score ")
    postfix.send("rejects", "kept", ham)  # below it: delivered, marked
    assert _headers(postfix.delivered("kept"))["X-Spam-Status"][0].startswith("No, score=")
    assert not (postfix.directory / "mail" / "rejected").exists()


@pytest.mark.slow
@needs_postfix
def test_without_a_model_mail_goes_on_unmarked_or_is_tempfailed_as_told(trained, postfix, milters):
    _, spam, _ = trained
    postfix.send("opens", "open", spam)  # fail open, the default
    assert not {"X-Spam-Flag", "X-Spam-Score", "X-Spam-Status"} & set(_headers(postfix.delivered("open")))
    with pytest.raises(smtplib.SMTPDataError) as deferred:
        postfix.send("tempfails", "later", spam)
    assert deferred.value.smtp_code == 451
    assert deferred.value.smtp_error.startswith(b"4.7.1 Spam filter unavailable")
    assert milters["tempfails"].logged("no verdict (no model yet"), milters["tempfails"].log


@pytest.mark.slow  # libmilter looks for a stop every 5 s
@needs_pymilter
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_serve_milter_with_status_0(tmp_path, sig):
    serve = Serve("--model", str(tmp_path)).wait_ready()
    try:
        assert serve.stop(sig) == 0, serve.log
    finally:
        serve.kill()


@pytest.mark.parametrize(
    "flags, error",
    [
        (["--milter", "127.0.0.1:1", "--http", "127.0.0.1:0"], "serve answers one protocol"),
        (["--milter", "127.0.0.1:1", "--spamd", "127.0.0.1:0"], "serve answers one protocol"),
        (["--milter-reject-score", "5"], "--milter-reject-score and --milter-fail are for --milter"),
        (["--milter-fail", "tempfail"], "--milter-reject-score and --milter-fail are for --milter"),
        (["--milter", "127.0.0.1:1", "--milter-reject-score", "1"], "of at least --required-score (1.5)"),
        (["--milter", "127.0.0.1:1", "--milter-reject-score", "nan"], "expected a finite score"),
        (["--milter", "127.0.0.1:1", "--feedback", "fb"], "--feedback and --feedback-topic keep the messages taught"),
        (["--milter", "127.0.0.1:1", "--feedback-topic", "fb"], "they need --spamd or --http"),
        (["--spamd", "127.0.0.1:0", "--feedback", "fb", "--feedback-topic", "fb"], "give one place for taught"),
        (["--milter", "127.0.0.1:1", "--input", "x"], "--milter answers requests"),
        (["--milter", "127.0.0.1:0"], "expected a port from 1 to 65535"),
        (["--milter", "nowhere"], "expected HOST:PORT"),
    ],
)
def test_flags_that_do_not_go_together_are_refused_in_one_line(flags, error, tmp_path, capsys):
    assert cli.main(["serve", "--model", str(tmp_path), *flags]) == 2
    err = capsys.readouterr().err
    assert error in err and len(err.strip().splitlines()) == 1, err


@needs_pymilter
def test_an_address_taken_is_refused_in_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*COMMAND, "serve", "--model", str(tmp_path), "--milter", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
    assert done.returncode == 2
    assert (
        done.stderr.splitlines()[-1]
        == f"error: --milter 127.0.0.1:{port}: cannot listen on inet:{port}@127.0.0.1 (cannot opensocket)"
    )


def test_serve_milter_without_pymilter_says_so_in_one_line(tmp_path):
    code = "import sys; sys.modules['Milter'] = None\nfrom pegasos_stream.cli import main\nsys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "serve", "--model", str(tmp_path), "--milter", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if not line.startswith("INFO") and "waiting for one" not in line]
    assert lines == ["error: --milter needs pymilter: pip install 'pegasos-stream[milter]' (on libmilter)"], done.stderr


class _Service:
    """A stand-in for `SpamdService`: ``scored`` gives ``verdict``, or raises ``error``; its service's access log
    keeps the (protocol, outcome) of each message in ``logged``."""

    def __init__(self, verdict=None, error: Exception | None = None) -> None:
        self.verdict, self.error = verdict, error
        self.logged: list[tuple[str, str]] = []
        self.serving = types.SimpleNamespace(access=AccessLog(self))

    def observe(self, protocol: str, outcome: str, seconds: float) -> None:
        self.logged.append((protocol, outcome))

    def scored(self, message: bytes, user: str | None = None):
        self.user = user
        if self.error is not None:
            raise self.error
        return self.verdict


class _Context:
    """A stand-in for pymilter's context of a connection: what the filter asks of the mail server, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def setpriv(self, filter_: object) -> None:
        pass

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


@needs_pymilter
def test_a_message_is_collected_with_lf_line_ends_up_to_its_bound():
    from pegasos_stream.serve.milter import Collected

    collected = Collected()
    collected.add_header("Subject", b"hello\r\n\tworld")
    collected.add_header("X-Spam-Flag", b"YES")
    for chunk in (b"one\r", b"\ntwo\r\n\r", b"\nthree\r"):  # a CRLF cut in two by the chunks
        collected.add_body(chunk)
    assert collected.message == b"Subject: hello\n\tworld\nX-Spam-Flag: YES\n\none\ntwo\n\nthree\r"
    assert collected.spam_headers == {"X-Spam-Flag": 1} and not collected.full
    small = Collected(max_bytes=25)
    small.add_header("Subject", b"0123456789")
    small.add_body(b"abcdefghij" * 3)
    assert small.full and small.message == b"Subject: 0123456789\n\nabcde"


@needs_pymilter
def test_the_verdict_marks_rejects_or_fails_as_the_policy_says(caplog):
    from pegasos_stream.serve.milter import MilterPolicy, decide
    from pegasos_stream.serve.serving import NoModel
    from pegasos_stream.serve.spamd import Verdict

    spam, ham = Verdict(7.9, 1.5, 0.9996, 3), Verdict(-2.0, 1.5, 0.12, 3)
    reject = MilterPolicy(reject=5.0)
    assert decide(_Service(spam), b"m", reject).action == "reject"
    assert decide(_Service(spam), b"m", MilterPolicy()).action == "mark"
    assert decide(_Service(ham), b"m", reject).verdict == ham
    assert decide(_Service(error=NoModel("no model yet")), b"m", MilterPolicy()).action == "accept"
    failed = decide(_Service(error=RuntimeError("boom")), b"m", MilterPolicy(fail="tempfail"))
    assert (failed.action, failed.reason) == ("tempfail", "scoring failed: boom")
    assert "scoring a message failed" in caplog.text
    with pytest.raises(ValueError, match="fail: 'drop'"):
        MilterPolicy(fail="drop")


@needs_pymilter
def test_the_filter_replaces_a_senders_spam_headers_and_replies_as_smtp_wants():
    from pegasos_stream.serve.milter import MilterPolicy, SpamMilter
    from pegasos_stream.serve.serving import NoModel
    from pegasos_stream.serve.spamd import Verdict

    spam = Verdict(7.9, 1.5, 0.9996, 3)
    marking = SpamMilter(_Service(spam), MilterPolicy())
    context = _Context()
    marking._setctx(context)
    for name, value in (("X-Spam-Flag", b"NO"), ("Subject", b"hi"), ("X-Spam-Flag", b"NO"), ("x-spam-score", b"0")):
        assert marking.header(name, value) == Milter.CONTINUE
    assert marking.body(b"buy now\r\n") == Milter.CONTINUE
    assert marking.eom() == Milter.CONTINUE
    assert context.calls[:3] == [("chgheader", "X-Spam-Flag", 2, None), ("chgheader", "X-Spam-Flag", 1, None)] + [
        ("chgheader", "x-spam-score", 1, None)
    ]
    assert [call[:2] for call in context.calls[3:]] == [
        ("addheader", name) for name in ("X-Spam-Flag", "X-Spam-Score", "X-Spam-Status")
    ]
    assert context.calls[4][2] == "7.9" and context.calls[5][2].startswith("Yes, score=7.9 required=1.5 ")
    assert marking.service.logged == [("milter", "mark")]  # the access log's line, with what was done

    for policy, service, code, reply in (
        (MilterPolicy(reject=5.0), _Service(spam), Milter.REJECT, ("550", "5.7.1")),
        (MilterPolicy(fail="tempfail"), _Service(error=NoModel("none")), Milter.TEMPFAIL, ("451", "4.7.1")),
        (MilterPolicy(), _Service(error=NoModel("none")), Milter.ACCEPT, None),
    ):
        refusing, context = SpamMilter(service, policy), _Context()
        refusing._setctx(context)
        assert refusing.eom() == code
        assert [call[1:3] for call in context.calls] == ([reply] if reply else [])
        assert service.logged == [
            ("milter", {Milter.REJECT: "reject", Milter.TEMPFAIL: "tempfail"}.get(code, "accept"))
        ]
