"""``pegasos-stream learn --spam|--ham --feedback DIR|--feedback-topic TOPIC INPUT...``: teach messages, as
``sa-learn`` does.

Each message of the inputs is kept where spamd's ``TELL`` and HTTP's ``/learnspam`` keep theirs (`serve.feedback`):
the feedback Maildir, in its ``Spam`` or ``Ham`` folder, or a Kafka topic (on the broker of ``--config``'s
``kafka`` section, and ``--set kafka.KEY=VALUE``); a resumed ``run`` over it learns each once and ``serve`` takes
up the model it writes. An input is an mbox (a file whose first line starts
with "From "), one raw message (any other file; ``-`` for standard input), or a directory: a Maildir or any tree
of message files (hidden files and folders, and a Maildir's ``tmp/``, left out: a Maildir++ folder such as
``.Junk`` is learned by naming it).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .checks import StartupError
from .config import set_flag

__all__ = ["add_learn_command", "command_learn"]

#: Bytes read at a time from an mbox.
BLOCK = 1 << 20


def add_learn_command(commands: argparse._SubParsersAction) -> None:
    """The ``learn`` command's parser."""
    learn = commands.add_parser(
        "learn",
        help="teach messages as spam or ham (sa-learn's habit): into a feedback Maildir or topic that run learns",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    label = learn.add_mutually_exclusive_group(required=True)
    label.add_argument("--spam", action="store_const", const="spam", dest="label", help="the messages are spam")
    label.add_argument("--ham", action="store_const", const="ham", dest="label", help="the messages are ham")
    place = learn.add_mutually_exclusive_group(required=True)
    place.add_argument("--feedback", metavar="DIR", help="the feedback Maildir (Spam/, Ham/)")
    place.add_argument("--feedback-topic", metavar="TOPIC", help="the feedback topic, on --config's Kafka broker")
    learn.add_argument("--config", metavar="FILE|NAME", help="with --feedback-topic: its kafka section says the broker")
    learn.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a configuration key")
    learn.add_argument("--user", help="whose messages they are, for a personal model (as spamc -u names a user)")
    learn.add_argument("inputs", nargs="+", metavar="INPUT", help="an mbox, a message, a Maildir or -")


def command_learn(args: argparse.Namespace) -> int:
    """Keep every message of the inputs; 0, or 2 (one line) when an input cannot be read, before any is, or a
    message cannot be kept."""
    from ..serve.feedback import FeedbackSpool, check_user  # (here: a run imports neither the spool nor the reader)
    from .serve import kafka_connection, open_feedback

    for name in args.inputs:
        if name != "-" and not os.path.exists(name):
            raise StartupError(f"{name}: no such file or directory")
    try:
        check_user(args.user)
    except ValueError as error:
        raise StartupError(f"--user: {error}") from None
    sets = [(text, set_flag(text)) for text in args.set]
    feedback = open_feedback(args.feedback, args.feedback_topic, lambda: kafka_connection(args.config, sets))
    delivered = 0
    try:
        for name in args.inputs:
            try:
                for message in _messages(name):
                    feedback.add(message, args.label, args.user)
                    delivered += 1
            except OSError as error:
                raise StartupError(f"{name}: {error.strerror or error} ({delivered} messages kept before)") from None
    finally:
        feedback.close()
    if args.feedback_topic:
        into = f"topic {args.feedback_topic}"
    else:
        into = str(Path(args.feedback) / FeedbackSpool.FOLDERS[args.label])
    print(f"delivered {delivered} message{'s' * (delivered != 1)} into {into}", file=sys.stderr)
    return 0


def _messages(name: str) -> Iterator[bytes]:
    """The messages of the input ``name`` (see the module's docstring); empty ones left out."""
    if name == "-":
        yield from _non_empty([sys.stdin.buffer.read()])
        return
    path = Path(name)
    if path.is_dir():
        for file in sorted(_message_files(path)):
            yield from _non_empty([file.read_bytes()])
        return
    with open(path, "rb") as handle:
        first = handle.read(5)
        handle.seek(0)
        if first != b"From ":
            yield from _non_empty([handle.read()])
            return
        from ..io.mail import MboxSplitter

        splitter = MboxSplitter()
        while block := handle.read(BLOCK):
            yield from _non_empty(m.value for m in splitter.feed(block) if m.error is None)
        yield from _non_empty(m.value for m in splitter.end() if m.error is None)


def _message_files(directory: Path) -> Iterator[Path]:
    """The message files of a tree: not hidden, not in a hidden folder (a Maildir++ folder such as ``.Junk`` is
    learned by naming it) nor in a Maildir's ``tmp/``."""
    for root, folders, files in os.walk(directory):
        folders[:] = [f for f in folders if not f.startswith(".") and f != "tmp"]
        yield from (Path(root) / f for f in files if not f.startswith("."))


def _non_empty(messages: Iterator[bytes] | list[bytes]) -> Iterator[bytes]:
    return (message for message in messages if message.strip())
