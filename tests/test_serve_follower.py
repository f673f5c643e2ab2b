"""A served model's checkpoints are data, never instructions.

1. Paths: ``serve`` (and ``predict``) never open the files a checkpoint's stored configuration names: a
   checkpoint re-hashed with ``source.path`` on a secret file and outputs of its choice reads standard input
   and writes standard output; the secret is copied nowhere.
2. The follower (a checkpoint directory looked at again): only regular files are read, without waiting and up to
   ``--max-model-bytes`` (a FIFO or a link to /dev/zero named like a checkpoint is refused, unread, and later
   checkpoints are still taken up); a checkpoint of another job, or of a state no learner leaves, is refused, the
   model served goes on, and ``/health`` says what was refused last and how old the model is.
3. The checkpoint key: ``run`` signs its checkpoints (HMAC-SHA256) with ``checkpoint.key_file`` or
   ``checkpoint.key_env``; every command that reads checkpoints, given the key, refuses one unsigned or signed
   otherwise (``run --resume`` falls back past it), and reads either kind without a key.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from forged import KEYED_MAGIC, MAGIC, forge, pack, rehashed, unpack
from http_helpers import http_json

from pegasos_stream import PegasosClassifier, cli, load, save
from pegasos_stream.cli.config import config_hash, load_config, override_config
from pegasos_stream.cli.serve import CheckpointProvider
from pegasos_stream.persist.checkpoint import CheckpointError, checkpoint_path, latest_valid, read_checkpoint
from pegasos_stream.serve.serving import Serving

COMMAND = [sys.executable, "-m", "pegasos_stream.cli"]
#: Seconds to wait for a process, a line or an answer.
WAIT = 30
KEY = b"k" * 32


def _events(ids: range, shift: float = 0.0) -> bytes:
    lines = [json.dumps({"id": i, "x": {"a": (i % 7) - 3.0 + shift, "b": 1.0}, "label": i % 7 > 3}) for i in ids]
    return ("\n".join(lines) + "\n").encode()


def _train(work: Path, model: dict, events: bytes, checkpoint: dict | None = None) -> Path:
    """The directory of the checkpoints of ``run`` on ``events`` with ``model``, in ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.yaml").write_text(yaml.safe_dump({"model": model, "checkpoint": {"dir": "ck", **(checkpoint or {})}}))
    (work / "train.jsonl").write_bytes(events)
    args = ["run", "--config", str(work / "job.yaml"), "--input", str(work / "train.jsonl"), "--output", os.devnull]
    assert cli.main(args) == 0
    return work / "ck"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, Path]:
    """Checkpoint directories: "job" and "newer" of one job (other events), "other" of another job (another λ)."""
    root = tmp_path_factory.mktemp("jobs")
    return {
        "job": _train(root / "job", {"lambda_": 0.01}, _events(range(100))),
        "newer": _train(root / "newer", {"lambda_": 0.01}, _events(range(300), shift=1.5)),
        "other": _train(root / "other", {"lambda_": 0.1}, _events(range(100))),
    }


def _copy(directory: Path, target: Path, sequence: int) -> Path:
    """Checkpoint 1 of ``directory`` put in ``target`` as checkpoint ``sequence``, as ``run`` writes one."""
    path = checkpoint_path(target, sequence)
    shutil.copyfile(checkpoint_path(directory, 1), target / ".tmp-copy.pgs")
    os.replace(target / ".tmp-copy.pgs", path)
    return path


# -- 1. stored paths are never opened --------------------------------------------------------------


def _with_paths(source: Path, target: Path, secret: Path, out: Path, dead: Path) -> Path:
    """``source`` re-hashed with a stored configuration that reads ``secret`` and writes ``out`` and ``dead``."""

    def point(manifest: dict) -> None:
        config = manifest["config"]
        config["source"].update(type="file", path=str(secret), format="json")
        config["output"].update(type="file", path=str(out))
        config["errors"]["dead_letter"].update(type="file", path=str(dead))

    return rehashed(source, target, point)


def test_serve_and_predict_open_no_path_a_checkpoint_names(jobs, tmp_path):
    secret, out, dead = tmp_path / "secret.txt", tmp_path / "chosen-out.jsonl", tmp_path / "chosen-dead.jsonl"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    forged = _with_paths(checkpoint_path(jobs["job"], 1), tmp_path / "forged.pgs", secret, out, dead)
    served = subprocess.run(
        [*COMMAND, "serve", "--model", str(forged)], input=_events(range(3)), capture_output=True, timeout=WAIT
    )
    assert served.returncode == 0, served.stderr
    assert [json.loads(line)["id"] for line in served.stdout.splitlines()] == [0, 1, 2]  # standard input and output
    assert b"reading standard input (a checkpoint's paths are never opened" in served.stderr
    assert not out.exists() and not dead.exists()
    events = tmp_path / "events.jsonl"
    events.write_bytes(_events(range(3)))
    predicted = subprocess.run(
        [*COMMAND, "predict", "--model", str(forged), str(events)], capture_output=True, timeout=WAIT
    )
    assert predicted.returncode == 0 and len(predicted.stdout.splitlines()) == 3
    assert not out.exists() and not dead.exists()
    # the paths the command line names are opened, of course
    named = subprocess.run(
        [*COMMAND, "serve", "--model", str(forged), "--input", str(events), "--output", str(out)],
        capture_output=True,
        timeout=WAIT,
    )
    assert named.returncode == 0 and len(out.read_bytes().splitlines()) == 3 and not dead.exists()


# -- 2. the follower -----------------------------------------------------------------------------


def _configure(stored: dict, where: str) -> dict:
    return override_config(stored, where, [], [])


def _refresh_within(provider: CheckpointProvider, seconds: float) -> bool:
    """``provider.refresh()`` in a thread, which must end within ``seconds`` (a FIFO once blocked it for good)."""
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(provider.refresh()), daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for path in provider.path.iterdir():  # let a reader blocked on a FIFO go
            if path.is_fifo():
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
        pytest.fail("refresh blocked")
    return result[0]


def test_the_follower_reads_only_regular_files_of_its_job_and_keeps_serving(jobs, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    _copy(jobs["job"], directory, 1)
    provider = CheckpointProvider(directory, _configure)
    serving = Serving(provider)
    assert provider.current.version == 1 and serving.health()["last_refusal"] is None

    fifo = checkpoint_path(directory, 2)
    os.mkfifo(fifo)
    assert _refresh_within(provider, 10) is False
    assert provider.current.version == 1
    assert (
        provider.last_refusal.reason
        == f"the checkpoint {fifo}: not a regular file (a FIFO): a checkpoint is read from a file only"
    )
    fifo.unlink()

    zero = checkpoint_path(directory, 3)
    zero.symlink_to("/dev/zero")
    assert _refresh_within(provider, 10) is False
    assert "(a character device)" in provider.last_refusal.reason
    zero.unlink()

    other = _copy(jobs["other"], directory, 4)
    assert _refresh_within(provider, 10) is False
    assert provider.last_refusal.reason.startswith(f"the checkpoint {other}: a model of another job (")
    other.unlink()

    broken = forge(checkpoint_path(jobs["newer"], 1), checkpoint_path(directory, 5), ("model", "_u", "scale"), 5.0)
    assert _refresh_within(provider, 10) is False
    assert "WeightVector.scale: expected a finite float from 1e-09 to 1, got 5.0" in provider.last_refusal.reason
    assert provider.current.version == 1
    health = serving.health()
    assert health["status"] == "ok" and health["model_version"] == 1 and health["model_age_s"] >= 0
    assert health["last_refusal"]["reason"] == provider.last_refusal.reason and health["last_refusal"]["age_s"] >= 0
    broken.unlink()

    _copy(jobs["newer"], directory, 6)  # later checkpoints of the job are still taken up
    assert _refresh_within(provider, 10) is True
    assert provider.current.version == 6


def test_the_follower_refuses_a_checkpoint_larger_than_its_bound(jobs, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    _copy(jobs["job"], directory, 1)
    size = checkpoint_path(directory, 1).stat().st_size
    provider = CheckpointProvider(directory, _configure, max_bytes=size)
    big = _copy(jobs["newer"], directory, 2)
    with big.open("ab") as grown:
        grown.write(b"\0" * (size + 1 - big.stat().st_size))
    assert provider.refresh() is False
    assert (
        provider.last_refusal.reason
        == f"the checkpoint {big}: more than {size} bytes, the most a checkpoint may take here"
    )
    with pytest.raises(CheckpointError, match="more than 10 bytes"):
        read_checkpoint(checkpoint_path(directory, 1), max_bytes=10)


def _limit_memory() -> None:
    """The served process may not take more than 2 GiB: reading /dev/zero until MemoryError must not be how it
    ends."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # (the model of a test takes far less)


def test_health_reports_the_refusals_while_every_request_is_answered_by_the_model_served(jobs, tmp_path):
    pytest.importorskip("waitress")
    directory = tmp_path / "ck"
    directory.mkdir()
    _copy(jobs["job"], directory, 1)
    server = subprocess.Popen(
        [*COMMAND, "serve", "--model", str(directory), "--http", "127.0.0.1:0", "--reload-s", "0.05"],
        stderr=subprocess.PIPE,
        preexec_fn=_limit_memory,
    )
    said: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [said.put(line.decode()) for line in server.stderr], daemon=True).start()
    try:

        def wait_for(text: str) -> str:
            deadline = time.monotonic() + WAIT
            while True:
                line = said.get(timeout=max(0.0, deadline - time.monotonic()))
                if text in line:
                    return line

        url = wait_for("serving predictions on ").split(" on ")[1].split()[0]
        event = _events(range(5, 6))
        for sequence, install in enumerate(
            [
                lambda path: os.mkfifo(path),
                lambda path: path.symlink_to("/dev/zero"),
                lambda path: shutil.copyfile(checkpoint_path(jobs["other"], 1), path),
                lambda path: forge(checkpoint_path(jobs["newer"], 1), path, ("model", "_u", "v"), "abc"),
            ],
            start=2,
        ):
            install(checkpoint_path(directory, sequence))
            refused = wait_for(f"refusing the checkpoint {checkpoint_path(directory, sequence)}")
            assert "model version 1 goes on serving" in refused
            status, answer = http_json(f"{url}/predict", event)
            assert status == 200 and answer["model_version"] == 1
            status, health = http_json(f"{url}/health")
            assert status == 200 and health["status"] == "ok" and health["model_version"] == 1
            assert health["last_refusal"]["reason"] in refused and health["model_age_s"] >= 0
        _copy(jobs["newer"], directory, 6)
        wait_for("serving model version 6")
        assert http_json(f"{url}/predict", event)[1]["model_version"] == 6
        assert server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=WAIT)


# -- 3. the checkpoint key ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory) -> Path:
    """A job whose checkpoints are signed with KEY (from a file)."""
    work = tmp_path_factory.mktemp("keyed")
    (work / "key").write_bytes(KEY + b"\n")
    return _train(work, {"lambda_": 0.01}, _events(range(100)), {"key_file": "key"})


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=WAIT, env=env)


def test_run_signs_its_checkpoints_and_the_commands_check_them_with_the_key(keyed, jobs, tmp_path):
    signed = checkpoint_path(keyed, 1)
    assert signed.read_bytes().startswith(KEYED_MAGIC)
    key_file = keyed.parent / "key"
    with_key = ["--checkpoint-key-file", str(key_file)]
    assert _run("inspect", str(signed), *with_key).returncode == 0
    assert _run("inspect", str(signed)).returncode == 0  # without a key: read, as any checkpoint
    unsigned = checkpoint_path(jobs["job"], 1)
    done = _run("inspect", str(unsigned), *with_key)
    assert (done.returncode, done.stderr) == (
        2,
        f"error: {unsigned}: carries no HMAC, and a checkpoint key is set: refused\n",
    )
    other_key = tmp_path / "other-key"
    other_key.write_bytes(b"x" * 32)
    done = _run("inspect", str(signed), "--checkpoint-key-file", str(other_key))
    assert done.returncode == 2 and "its HMAC is not that of the checkpoint key" in done.stderr
    # re-hashed by someone without the key: the checksum matches, the HMAC does not
    manifest, arrays = unpack(signed.read_bytes())
    manifest["config"]["output"]["path"] = "/tmp/elsewhere"
    forged = tmp_path / "forged.pgs"
    forged.write_bytes(pack(manifest, arrays, key=b"guessed" * 5))
    done = _run("predict", "--model", str(forged), *with_key, "--format", "events", os.devnull)
    assert done.returncode == 2 and done.stderr.startswith(f"error: --model {forged}: its HMAC is not that of")
    # the key from the environment
    env = {**os.environ, "PEGASOS_TEST_KEY": KEY.decode()}
    assert _run("inspect", str(signed), "--checkpoint-key-env", "PEGASOS_TEST_KEY", env=env).returncode == 0
    done = _run("inspect", str(signed), "--checkpoint-key-env", "NO_SUCH_VARIABLE_SET")
    assert (done.returncode, done.stderr) == (
        2,
        "error: --checkpoint-key-env NO_SUCH_VARIABLE_SET: the environment variable is not set\n",
    )
    short = tmp_path / "short-key"
    short.write_bytes(b"secret")
    done = _run("inspect", str(signed), "--checkpoint-key-file", str(short))
    assert done.returncode == 2 and done.stderr == (
        f"error: --checkpoint-key-file {short}: a checkpoint key of 6 bytes; a key needs at least 16\n"
    )


def test_serve_with_a_key_refuses_an_unsigned_newer_checkpoint(keyed, jobs, tmp_path):
    directory = tmp_path / "ck"
    directory.mkdir()
    _copy(keyed, directory, 1)
    provider = CheckpointProvider(directory, _configure, key=KEY)
    unsigned = _copy(jobs["newer"], directory, 2)
    assert provider.refresh() is False and provider.current.version == 1
    assert (
        provider.last_refusal.reason
        == f"the checkpoint {unsigned}: carries no HMAC, and a checkpoint key is set: refused"
    )
    with pytest.raises(Exception, match="carries no HMAC"):
        CheckpointProvider(unsigned, _configure, key=KEY)


def test_run_resume_with_a_key_skips_checkpoints_not_signed_with_it(keyed, tmp_path, capsys, monkeypatch):
    work = keyed.parent
    directory = tmp_path / "ck"
    shutil.copytree(keyed, directory, ignore=shutil.ignore_patterns(".lock"))
    unsigned = checkpoint_path(directory, 2)
    manifest, arrays = unpack(checkpoint_path(directory, 1).read_bytes())
    unsigned.write_bytes(pack(manifest, arrays))  # the same state, without the HMAC
    assert unsigned.read_bytes().startswith(MAGIC)
    monkeypatch.chdir(work)
    capsys.readouterr()
    more = tmp_path / "more.jsonl"
    more.write_bytes(_events(range(200, 250)))
    args = ["run", "--config", "job.yaml", "--input", str(more), "--output", os.devnull, "--resume", "--accept-config"]
    assert cli.main([*args, "--set", f"checkpoint.dir={directory}"]) == 0
    said = capsys.readouterr().err
    assert f"skipping {unsigned}: carries no HMAC" in said and f"resuming from {checkpoint_path(directory, 1)}" in said
    assert json.loads(said.splitlines()[-1])["t"] == 150
    newest = latest_valid(directory, key=KEY)
    assert newest is not None and newest[0] == checkpoint_path(directory, 3)  # written, signed


def test_the_key_settings_leave_the_job_and_the_library_signs_too(tmp_path):
    config = load_config(None)
    keyed_config = override_config(config, "test", ["checkpoint.key_env=SOME_VARIABLE"], ["--set"])
    assert config_hash(keyed_config) == config_hash(config)
    model = PegasosClassifier(lambda_=0.01)
    model.learn_one({"a": 1.0}, True)
    save(model, tmp_path / "m.pgs", key=KEY)
    assert load(tmp_path / "m.pgs", key=KEY).t == 1
    with pytest.raises(CheckpointError, match="its HMAC is not that of the checkpoint key"):
        load(tmp_path / "m.pgs", key=b"z" * 16)
