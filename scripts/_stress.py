"""Stress streams built from the two shared corpora, SpamAssassin and Ling-Spam, deterministic (fixed seeds).

A stream is named ``corpus/shape`` (``spamassassin/asis``, ``lingspam/spam3``, ``both/interleaved``) and is a
list of ``(text, is_spam)`` pairs. The shapes (`SHAPES`), each built from a corpus's messages in its own order:

- ``asis``: the messages as the corpus gives them (SpamAssassin: raw RFC 822, in time order; Ling-Spam:
  ``Subject: ...``, a blank line, the body, lowercased and tokens spaced by the list archive);
- ``short`` (SpamAssassin): subject and sender only, as one line of plain text (``"Subject text — Sender
  <address>"``, RFC 2047 encoded words decoded), like a chat or SMS message;
- ``subject``: the decoded subject only, one line of plain text;
- ``body``: the decoded body text only (``message_text(raw, headers=())``), no headers;
- ``noblank``: the headers reduced to the subject and no blank line before the body (``Subject: ...\\nbody``), as a
  per-user mailbox archive gives it;
- ``tokenised`` (SpamAssassin): the decoded subject and body lowercased and tokens spaced as the Ling-Spam list
  archive has them (`list_tokens`), framed as Ling-Spam frames its messages (Ling-Spam ``asis`` is this shape);
- ``spam13`` (SpamAssassin), ``spam3``, ``spam75``: a seeded sample of one class, so that spam is about 13%, 3% or
  75% of the stream (the spam is sampled when there is too much of it, else the ham), order kept;
- ``shuffled``: a seeded permutation of the messages; ``reversed``: last first;
- ``hard`` (SpamAssassin): the hard ham (mail that resembles spam) and all the spam, time order kept: spam is
  the majority (88%) and the ham is the kind a filter most often gets wrong;
- ``interleaved`` (corpus ``both``): the two corpora as two users' mail, merged in a seeded interleaving that
  keeps each corpus's order, as one stream.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from email.header import decode_header, make_header
from email.parser import HeaderParser
from email.policy import compat32

import numpy as np
from _harness import Message, load_messages

from pegasos_stream.features.email import message_text

Stream = list[tuple[str, bool]]
Corpora = Mapping[str, Sequence[Message]]
"""The messages of each loaded corpus, by corpus name (``spamassassin``, ``lingspam``)."""

#: The corpora by name, with the name they are shown by, in the order their streams are listed.
CORPORA = {"spamassassin": "SpamAssassin", "lingspam": "Ling-Spam"}
#: The pseudo-corpus of the streams that mix both corpora.
BOTH = "both"
#: Seed of every random choice (subsampling, permutation, interleaving).
SEED = 20240607
_SPACE = re.compile(r"\s+")
_HEADERS = HeaderParser(policy=compat32)


# -- the parts of a message --------------------------------------------------------------------


def decoded_header(value: str | None) -> str:
    """A header value with RFC 2047 encoded words decoded and whitespace collapsed ("" when absent)."""
    if not value:
        return ""
    try:
        text = str(make_header(decode_header(value)))
    except (ValueError, LookupError, UnicodeError):
        text = str(value)
    return _SPACE.sub(" ", text).strip()


def header(raw: str, name: str) -> str:
    """The decoded header ``name`` of a raw message ("" when absent)."""
    body = raw[raw.find("\n") + 1 :] if raw.startswith("From ") else raw  # skip an mbox envelope line
    return decoded_header(_HEADERS.parsestr(body, headersonly=True)[name])


def short_text(raw: str) -> str:
    """``"Subject — Sender"`` of a raw message: the decoded Subject and From headers, plain text."""
    return f"{header(raw, 'subject')} — {header(raw, 'from')}"


def body_text(raw: str) -> str:
    """The decoded body text of a raw message, no headers."""
    return message_text(raw, headers=())


def noblank_text(raw: str) -> str:
    """``Subject: ...``, a newline and the decoded body: no blank line between header and body (the body's leading
    whitespace stripped: a line that starts with it would continue the Subject header)."""
    return f"Subject: {header(raw, 'subject')}\n{body_text(raw).lstrip()}"


# -- the list archive's tokens -----------------------------------------------------------------

#: ``n't`` split off its word (``do n't``), but for ``can't``, ``won't`` and ``ain't``, which stay whole.
_NOT = re.compile(r"(?<=[^\W_])(?<!\bca)(?<!\bwo)(?<!\bai)(n't)\b")
#: ``'s`` and ``'d`` split off their word (``it 's``).
_CLITIC = re.compile(r"(?<=[^\W_])('[sd])\b")
#: The apostrophe of ``'m``, ``'ll``, ``'ve`` and ``'re`` spaced on both sides (``i ' ll``).
_APOSTROPHE = re.compile(r"(?<=[^\W_])'(?=(?:m|ll|ve|re)\b)")
#: A token: a split-off clitic; a word of letters, digits and ampersands, hyphens and apostrophes inside it
#: (``part-time``, ``o'connor``, ``at&t``); any other character alone (``.``, ``_``, ``@``, ``$``).
_TOKEN = re.compile(r"n't\b|'[sd]\b|(?:[^\W_]|&)+(?:[-'](?:[^\W_]|&)+)*|\S")


def list_tokens(text: str) -> str:
    """``text`` lowercased and tokenised as the Ling-Spam list archive has its messages, on one line: punctuation
    split off words and spaced, each punctuation character a token (``re : 2 . 882``, ``thanks , i ' ll be
    there . . .``, ``it 's``, ``do n't``). It gives back the subject and body of every Ling-Spam message as they
    are (whitespace aside)."""
    text = _APOSTROPHE.sub(" ' ", _CLITIC.sub(r" \1", _NOT.sub(r" \1", text.lower())))
    return " ".join(_TOKEN.findall(text))


def tokenised_text(raw: str) -> str:
    """A raw message as the list archive gives it: ``Subject: <tokens>``, a blank line, the body's tokens."""
    return f"Subject: {list_tokens(header(raw, 'subject'))}\n\n{list_tokens(body_text(raw))}\n"


# -- streams -----------------------------------------------------------------------------------


def mapped(transform: Callable[[str], str]) -> Callable[[Sequence[Message]], Stream]:
    """A shape that turns each message's text by ``transform``, order kept."""
    return lambda messages: [(transform(m.text), m.is_spam) for m in messages]


def spam_fraction(messages: Sequence[Message], fraction: float, seed: int = SEED) -> Stream:
    """A seeded sample of the spam (or of the ham) and all of the other class, so that spam is ``fraction`` of the
    stream; order kept."""
    spam = [i for i, m in enumerate(messages) if m.is_spam]
    ham = [i for i, m in enumerate(messages) if not m.is_spam]
    if len(spam) > fraction * len(messages):
        sampled, others, keep = spam, ham, round(fraction / (1.0 - fraction) * len(ham))
    else:
        sampled, others, keep = ham, spam, round((1.0 - fraction) / fraction * len(spam))
    chosen = np.random.default_rng(seed).choice(sampled, size=min(keep, len(sampled)), replace=False)
    kept = set(chosen.tolist()).union(others)
    return [(m.text, m.is_spam) for i, m in enumerate(messages) if i in kept]


def shuffled(messages: Sequence[Message], seed: int = SEED) -> Stream:
    """The messages in a seeded random order."""
    order = np.random.default_rng(seed).permutation(len(messages))
    return [(messages[i].text, messages[i].is_spam) for i in order]


def interleaved(corpora: Corpora, seed: int = SEED) -> list[Message]:
    """The messages of every corpus (in `CORPORA` order) merged in a seeded random interleaving that keeps the
    order of each corpus, as the mail of several users reaches one filter."""
    names = [name for name in CORPORA if name in corpora]
    turns = np.repeat(np.arange(len(names)), [len(corpora[name]) for name in names])
    sources = [iter(corpora[name]) for name in names]
    return [next(sources[k]) for k in np.random.default_rng(seed).permutation(turns)]


@dataclass(frozen=True)
class Shape:
    """A way to stress a filter: a stream built from a corpus's messages, for the corpora it applies to."""

    build: Callable[[Sequence[Message]], Stream]
    description: str
    corpora: tuple[str, ...] = tuple(CORPORA)


#: Shapes by name, in the order their streams are listed; ``interleaved`` takes the messages of `interleaved`.
SHAPES: dict[str, Shape] = {
    "asis": Shape(mapped(str), "the messages as the corpus gives them, in its order"),
    "short": Shape(mapped(short_text), "'Subject — Sender' only (RFC 2047 decoded), plain text", ("spamassassin",)),
    "subject": Shape(mapped(lambda raw: header(raw, "subject")), "the decoded subject only, plain text"),
    "body": Shape(mapped(body_text), "decoded body text only, no headers"),
    "noblank": Shape(mapped(noblank_text), "'Subject: ...' and the decoded body, no blank line between them"),
    "tokenised": Shape(
        mapped(tokenised_text),
        "decoded subject and body lowercased and tokens spaced as the Ling-Spam list archive has them",
        ("spamassassin",),
    ),
    "spam13": Shape(lambda ms: spam_fraction(ms, 0.13), "seeded sample of one class, ~13% spam", ("spamassassin",)),
    "spam3": Shape(lambda ms: spam_fraction(ms, 0.03), "seeded sample of one class, ~3% spam"),
    "spam75": Shape(lambda ms: spam_fraction(ms, 0.75), "seeded sample of one class, ~75% spam"),
    "shuffled": Shape(shuffled, "the messages in a seeded random order"),
    "reversed": Shape(lambda ms: [(m.text, m.is_spam) for m in reversed(ms)], "the messages, last first"),
    "hard": Shape(
        lambda ms: [(m.text, m.is_spam) for m in ms if m.is_spam or m.id.startswith("hard-ham")],
        "the hard ham and all spam (88% spam)",
        ("spamassassin",),
    ),
    "interleaved": Shape(
        mapped(str), "SpamAssassin and Ling-Spam as they are, as two users' mail in a seeded interleaving", (BOTH,)
    ),
}


def stream_names(corpora: Sequence[str], shapes: Sequence[str]) -> list[str]:
    """The names ``corpus/shape`` of the streams of ``shapes`` (in `SHAPES` order) that apply to ``corpora``."""
    return [
        f"{corpus}/{shape}"
        for corpus in (*CORPORA, BOTH)
        if corpus in corpora
        for shape in SHAPES
        if shape in shapes and corpus in SHAPES[shape].corpora
    ]


def describe(name: str) -> str:
    """A stream's one-line description."""
    corpus, shape = name.split("/")
    return f"{corpus}: {SHAPES[shape].description}"


def build_stream(name: str, corpora: Corpora) -> Stream:
    """The stress stream ``corpus/shape`` built from the loaded corpora."""
    corpus, shape = name.split("/")
    return SHAPES[shape].build(interleaved(corpora) if corpus == BOTH else corpora[corpus])


def load_corpora(args: argparse.Namespace) -> Corpora:
    """The messages of the corpora ``--corpus`` names (``both``: both), read from ``--data`` and ``--lingspam-data``."""
    paths = {"spamassassin": (args.data, "--data"), "lingspam": (args.lingspam_data, "--lingspam-data")}
    return {corpus: load_messages(*paths[corpus]) for corpus in paths if args.corpus in (corpus, BOTH)}


def build_streams(args: argparse.Namespace, shapes: Sequence[str]) -> tuple[dict[str, Stream], list[str]]:
    """Every stream of the ``shapes`` on the corpora ``--corpus`` names, cut to ``--limit``, and the names of those
    left out because they hold a single class (the first messages of a stream cut short may); exit when none is
    left."""
    corpora = load_corpora(args)
    names = stream_names([*corpora, BOTH] if args.corpus == BOTH else list(corpora), shapes)
    streams = {name: build_stream(name, corpora)[: args.limit] for name in names}
    single = [name for name, stream in streams.items() if len({y for _, y in stream}) < 2]
    for name in single:
        print(f"warning: {name} left out: a single class in its {len(streams[name])} messages", file=sys.stderr)
        del streams[name]
    if not streams:
        sys.exit(f"error: no stream of two classes for --corpus {args.corpus} and the shapes {', '.join(shapes)}")
    return streams, single
