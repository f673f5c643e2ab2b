"""The environments the tests and the benchmarks start commands of."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

__all__ = ["USERS_ENVIRONMENT", "users_command"]

#: The environment of the users extra in a checkout, which .ci/run makes: Quix Streams pins confluent-kafka below
#: 2.13, on which the confluent source's tests do not pass, so it gets an environment of its own.
USERS_ENVIRONMENT = ".venv-users"


def users_command(checkout: Path) -> str | None:
    """The ``pegasos-stream`` of an environment with the users extra: this interpreter's, or else the one of
    ``checkout``'s `USERS_ENVIRONMENT`; None without either."""
    if importlib.util.find_spec("quixstreams") is not None:
        return shutil.which("pegasos-stream", path=str(Path(sys.executable).parent))
    own = checkout / USERS_ENVIRONMENT / "bin" / "pegasos-stream"
    return str(own) if own.is_file() else None
