"""Stress streams built from the chronological SpamAssassin stream, deterministic (fixed seeds).

Each stream is a list of ``(text, is_spam)`` pairs:

- ``asis``: the raw RFC 822 messages, in time order;
- ``short``: subject and sender only, as one line of plain text (``"Subject text — Sender <address>"``,
  RFC 2047 encoded words decoded), like a chat or SMS message;
- ``body``: the decoded body text only (``message_text(raw, headers=())``), no headers;
- ``spam13``, ``spam3``: every ham and a seeded sample of the spam, so that spam is about 13% and about 3%
  of the stream, time order kept;
- ``shuffled``: a seeded permutation of the messages; ``reversed``: newest first;
- ``hard``: the hard ham (mail that resembles spam) and all the spam, time order kept: spam is the
  majority (88%) and the ham is the kind a filter most often gets wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from email.header import decode_header, make_header
from email.parser import HeaderParser
from email.policy import compat32

import numpy as np
from _harness import Message

from pegasos_stream.features.email import message_text

Stream = list[tuple[str, bool]]

#: Seed of every random choice (subsampling, permutation).
SEED = 20240607
_SPACE = re.compile(r"\s+")
_HEADERS = HeaderParser(policy=compat32)


def decoded_header(value: str | None) -> str:
    """A header value with RFC 2047 encoded words decoded and whitespace collapsed ("" when absent)."""
    if not value:
        return ""
    try:
        text = str(make_header(decode_header(value)))
    except (ValueError, LookupError, UnicodeError):
        text = str(value)
    return _SPACE.sub(" ", text).strip()


def short_text(raw: str) -> str:
    """``"Subject — Sender"`` of a raw message: the decoded Subject and From headers, plain text."""
    body = raw[raw.find("\n") + 1 :] if raw.startswith("From ") else raw  # skip an mbox envelope line
    headers = _HEADERS.parsestr(body, headersonly=True)
    return f"{decoded_header(headers['subject'])} — {decoded_header(headers['from'])}"


def spam_fraction(messages: Sequence[Message], fraction: float, seed: int = SEED) -> Stream:
    """Every ham and a seeded sample of the spam, so that spam is ``fraction`` of the stream; order kept."""
    spam = [i for i, m in enumerate(messages) if m.is_spam]
    ham = len(messages) - len(spam)
    keep = min(len(spam), round(fraction / (1.0 - fraction) * ham))
    chosen = set(np.random.default_rng(seed).choice(spam, size=keep, replace=False).tolist())
    return [(m.text, m.is_spam) for i, m in enumerate(messages) if not m.is_spam or i in chosen]


def shuffled(messages: Sequence[Message], seed: int = SEED) -> Stream:
    """The messages in a seeded random order."""
    order = np.random.default_rng(seed).permutation(len(messages))
    return [(messages[i].text, messages[i].is_spam) for i in order]


#: Stream name → (builder from the chronological messages, one-line description).
STREAMS: dict[str, tuple[Callable[[Sequence[Message]], Stream], str]] = {
    "asis": (lambda ms: [(m.text, m.is_spam) for m in ms], "raw RFC 822 messages, chronological"),
    "short": (
        lambda ms: [(short_text(m.text), m.is_spam) for m in ms],
        "'Subject — Sender' only (RFC 2047 decoded), plain text, chronological",
    ),
    "body": (
        lambda ms: [(message_text(m.text, headers=()), m.is_spam) for m in ms],
        "decoded body text only, no headers, chronological",
    ),
    "spam13": (lambda ms: spam_fraction(ms, 0.13), "all ham, seeded spam sample to ~13% spam, chronological"),
    "spam3": (lambda ms: spam_fraction(ms, 0.03), "all ham, seeded spam sample to ~3% spam, chronological"),
    "shuffled": (shuffled, "raw messages in a seeded random order"),
    "reversed": (lambda ms: [(m.text, m.is_spam) for m in reversed(ms)], "raw messages, newest first"),
    "hard": (
        lambda ms: [(m.text, m.is_spam) for m in ms if m.is_spam or m.id.startswith("hard-ham")],
        "the hard ham and all spam, chronological (88% spam)",
    ),
}


def build_stream(name: str, messages: Sequence[Message]) -> Stream:
    """The stress stream ``name`` built from the chronological messages."""
    return STREAMS[name][0](messages)
