"""The raw messages of a gzipped JSON-lines corpus and Vowpal Wabbit's text example of one, as
``bench_stream_spam.py`` reads them in its own process and in the converter process it feeds VW's reader from
(this module imports the standard library alone, and ISA-L's gzip where pegasos_stream's sources read with it, so that
the converter starts quickly and reads as fast as pegasos_stream does)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

try:
    from isal.igzip import IGzipFile as GzipFile  # as pegasos_stream's sources decompress, where it is installed
except ImportError:
    from gzip import GzipFile

__all__ = ["READ_BUFFER", "VW_SEPARATORS", "json_events", "vw_example"]

#: VW's text format reads ':' as a feature's value and '|' as a namespace: both become spaces.
VW_SEPARATORS = str.maketrans(":|", "  ")
#: The read buffer of the gzip stream, as pegasos_stream's FileSource has it.
READ_BUFFER = 2 << 20


def json_events(path: Path | str) -> Iterator[dict]:
    """The JSON objects of a gzipped JSON-lines file, through a buffered reader, parsed one line at a time."""
    with io.BufferedReader(GzipFile(path, "rb"), buffer_size=READ_BUFFER) as lines:
        for line in lines:
            yield json.loads(line)


def vw_example(event: dict, prefix: int | None) -> str:
    """VW's text example of a message event: ``±1 |m TOKENS`` (+1 for spam), its lowercased whitespace tokens
    (':' and '|' read as spaces) of the first ``prefix`` characters (None: the whole message)."""
    text = event["text"] if prefix is None else event["text"][:prefix]
    return ("1 |m " if event["label"] == "spam" else "-1 |m ") + " ".join(text.lower().translate(VW_SEPARATORS).split())
