"""Where taught messages go for ``run`` to learn: a Maildir spool on this machine, or a log of records (a Kafka
topic) when there is a broker.

A message is taught by spamd's ``TELL``, HTTP's ``/learnspam`` and ``/learnham``, or ``pegasos-stream learn``,
with its class ("spam" or "ham") and, for a personal model, its user. Each form keeps it as `taught_record` makes
it (the spool's folder says the label; a record of the log says it on a first line), so that a run over either
learns the same event: the message, its label, its user.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import ClassVar, Protocol

from ..parse.parsing import taught_record

__all__ = [
    "MAX_USER",
    "NO_FEEDBACK",
    "TAUGHT_LABELS",
    "Feedback",
    "FeedbackLog",
    "FeedbackSpool",
    "RecordLog",
    "check_user",
]

#: The classes a message is taught as.
TAUGHT_LABELS = ("spam", "ham")
#: The longest user name a taught message is kept with.
MAX_USER = 256
#: Why a service without a place for taught messages refuses them.
NO_FEEDBACK = "learning is off: serve --feedback DIR or --feedback-topic TOPIC keeps taught messages"


def check_user(user: str | None) -> None:
    """A ValueError for a user name that is not one line of printable text."""
    if user is not None and (not user or not user.isprintable() or len(user) > MAX_USER):
        raise ValueError(f"user {user[:MAX_USER]!r}: expected a name of 1 to {MAX_USER} printable characters")


class Feedback(Protocol):
    """Keeps taught messages for a run to learn."""

    def add(self, message: bytes, label: str, user: str | None = None) -> str:
        """Keep ``message``, taught as ``label`` (of `TAUGHT_LABELS`) for ``user``; where it was kept. A ValueError
        for a user name `check_user` refuses, an OSError when it could not be kept."""
        ...

    def close(self) -> None: ...


class FeedbackSpool:
    """Taught messages in a Maildir of two folders, ``Spam`` and ``Ham``, each message delivered as Maildir
    delivers (written in ``tmp/``, then renamed into ``new/``), named by its arrival time so that a resumed run
    over it (``--input DIR --set 'source.folders={Spam: spam, Ham: ham}'``) learns each once, in order."""

    FOLDERS: ClassVar[dict[str, str]] = dict(zip(TAUGHT_LABELS, ("Spam", "Ham")))

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        for folder in self.FOLDERS.values():
            for part in ("tmp", "new", "cur"):
                (self.directory / folder / part).mkdir(parents=True, exist_ok=True)
        self._count = 0
        self._lock = threading.Lock()

    def add(self, message: bytes, label: str, user: str | None = None) -> str:
        """Deliver ``message`` into the folder of ``label``, with ``user``'s line when there is a user (its
        `taught_record`: the folder says the label); its path."""
        check_user(user)
        with self._lock:
            self._count += 1
            name = f"{time.time_ns()}.P{os.getpid()}Q{self._count}.{os.uname().nodename.replace('/', '_')}"
        folder = self.directory / self.FOLDERS[label]
        temporary = folder / "tmp" / name
        with open(temporary, "xb") as handle:
            handle.write(taught_record(message, None, user))
            handle.flush()
            os.fsync(handle.fileno())
        delivered = folder / "new" / name
        os.replace(temporary, delivered)
        return str(delivered)

    def close(self) -> None:
        """Nothing to close: each message is on disk once `add` returns."""


class RecordLog(Protocol):
    """An append-only log of records (`kafka.python_client.TopicAppender`)."""

    def append(self, value: bytes, key: bytes | None) -> str:
        """Append a record once the log holds it durably; where it is. An OSError when the log cannot take it."""
        ...

    def close(self) -> None: ...


class FeedbackLog:
    """Taught messages as records of ``log``: each the `taught_record` of a message, keyed by its user (so that one
    user's messages keep their order), for a run whose source is that log (``source.format: raw``) to learn."""

    def __init__(self, log: RecordLog) -> None:
        self.log = log

    def add(self, message: bytes, label: str, user: str | None = None) -> str:
        """Append the `taught_record` of ``message``; where it is in the log."""
        check_user(user)
        if label not in TAUGHT_LABELS:
            raise ValueError(f"label {label!r}: expected one of {', '.join(TAUGHT_LABELS)}")
        return self.log.append(taught_record(message, label, user), None if user is None else user.encode())

    def close(self) -> None:
        self.log.close()
