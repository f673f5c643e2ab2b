"""Rejected records: why a record is rejected, what becomes of it (a dead letter, or the stop of a run), and the
records of a batch not processed given back to their source.

The runner (`run.runner`) and serving (`serve.serving`, `serve.http_api`) reject records alike, and ``predict``
names them alike (`cli.predict`).
"""

from __future__ import annotations

import logging

from ..io.records import Record, RecordBatch
from ..io.sinks import Sink, dead_letter
from ..io.sources import Source
from ..parse.parsing import BadRecord

__all__ = ["StopRun", "give_back", "reject", "rejection_reason"]

_log = logging.getLogger(__name__)


class StopRun(RuntimeError):
    """A bad record with ``on_error: stop``: the message names the record's position."""


def rejection_reason(record: Record, error: Exception) -> str:
    """Why ``record`` is rejected, from the error it raised: its position, then the reason."""
    if isinstance(error, BadRecord):
        return str(error)
    if isinstance(error, ValueError):
        return f"{record.position}: {error}"
    return f"{record.position}: {type(error).__name__}: {error}"


def reject(record: Record, error: Exception, dead_letters: Sink | None, on_error: str) -> None:
    """Stop on ``record`` (``on_error: stop``: a StopRun saying why), or log it and send it to ``dead_letters``."""
    reason = rejection_reason(record, error)
    if on_error == "stop":
        raise StopRun(reason)
    _log.warning("rejected %s", reason)
    if dead_letters is not None:
        dead_letters.emit(dead_letter(record.position, reason, record.value))


def give_back(source: Source, batch: RecordBatch, done: int) -> bool:
    """Give the records ``done..`` of ``batch``, claimed but not processed, back to ``source``;
    whether its position now covers only records processed (False: it cannot give records back,
    and must be neither checkpointed nor committed)."""
    if done < len(batch):
        try:
            source.unclaim(batch, done)
        except NotImplementedError:
            _log.error("%s cannot give back the records not processed: no final checkpoint or commit", source.name)
            return False
    return True
