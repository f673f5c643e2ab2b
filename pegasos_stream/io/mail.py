"""Mail as it comes: an mbox, one whole message, a Maildir tree; each message one record.

A splitter (`MboxSplitter`, `WholeInput`) cuts a byte stream, fed in pieces of any size, into
messages; `MessageFileSource` and `MessageStdinSource` feed it a file or standard input, and
`MaildirSource` reads a directory tree, one message per file. Every record carries the label
configured for its messages (None: predicted only) and, when it is not a message that could be
read, the reason, for the parser to reject it with its position.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, NamedTuple, Protocol

from .inputs import FileHead
from .records import RecordBatch
from .sources import BATCH_BYTES, MAX_READ_BYTES, READ_BUFFER, Source, StdinReader, check_whole, open_input

__all__ = [
    "NO_USER",
    "MaildirSource",
    "MboxSplitter",
    "Message",
    "MessageFileSource",
    "MessageStdinSource",
    "Splitter",
    "WholeInput",
    "is_maildir",
    "maildir_folders",
    "splitter",
]

_log = logging.getLogger(__name__)

#: How an mbox envelope line starts.
FROM = b"From "
#: An envelope line anywhere but at the start of the input: a line end, then "From ".
_SEPARATOR = b"\n" + FROM
#: A body line ">From ", ">>From "...: a line an mbox writer escaped by one more ">".
_ESCAPED = re.compile(rb"^>(>*From )", re.MULTILINE)
#: The folder of the top directory of a Maildir (or of a tree of folders).
INBOX = "INBOX"
#: The subdirectories that make a directory a Maildir: its messages, delivered and new.
_MESSAGE_DIRS = ("cur", "new")


class Message(NamedTuple):
    """A message cut from its input: its bytes (the first ``max_bytes + 1`` of a longer one), the
    input offset where the next one starts, its number (from 1), and why it is not a message that
    can be taken (None: it is)."""

    value: bytes
    end: int
    number: int
    error: str | None = None


class Splitter(Protocol):
    """Cuts an input, fed in pieces of any size, into messages."""

    def feed(self, data: bytes) -> list[Message]:
        """The messages that ``data`` completes."""
        ...

    def end(self) -> list[Message]:
        """The messages that the end of the input completes."""
        ...


class MboxSplitter:
    """An mbox (mboxrd or mboxo) cut into messages.

    A message starts after a line beginning with "From " (its envelope line, which is not part of
    it) and ends where the next such line starts; a blank line before that one (or before the end of
    the input) is the separator, not part of the message either. A body line ">From ", ">>From "...
    loses one ">", as mboxrd writes them. Text before the first envelope line is handed out with an
    error (numbered as the message before it, 0 at the start), unless it is blank. Of a message longer
    than ``max_bytes``, the first ``max_bytes + 1`` bytes are kept as they are, which the parser
    refuses. ``offset`` and ``number`` are where the input starts: the start of a file, or the start
    of message ``number + 1`` (a resumed file).
    """

    def __init__(self, max_bytes: int | None = None, offset: int = 0, number: int = 0) -> None:
        self.max_bytes = max_bytes
        self.number = number  # of the last message started
        self._offset = offset  # the input offset of _pending[0]
        self._pending = bytearray()  # the bytes fed and not placed yet
        self._body: bytearray | None = None  # the message being read (None: at a line that may be an envelope)
        self._size = 0  # the bytes of its body so far, kept or not
        self._envelope = False  # whether the rest of an envelope line is being skipped
        self._headless = False  # whether the text being read came before any envelope line
        self._line_start = False  # whether _pending[0] starts a line of the body

    def feed(self, data: bytes) -> list[Message]:
        self._pending += data
        messages: list[Message] = []
        while self._advance(messages):
            pass
        return messages

    def end(self) -> list[Message]:
        if self._envelope:  # the input ends in an envelope line: an empty message
            self._envelope = False
            self._begin(headless=False)
        elif self._body is None and self._pending:  # too short to be an envelope line
            self._begin(headless=True)
        if self._body is None:
            return []
        self._take(len(self._pending))
        return self._finish()

    def _advance(self, messages: list[Message]) -> bool:
        """Place what can be placed of the bytes pending (complete messages go to ``messages``);
        whether to go on."""
        pending = self._pending
        if self._envelope:
            newline = pending.find(b"\n")
            self._skip(len(pending) if newline < 0 else newline + 1)
            if newline < 0:
                return False
            self._envelope = False
            self._begin(headless=False)
            return True
        if self._body is None:
            if len(pending) < len(FROM) and FROM.startswith(pending):
                return False  # too short to tell whether an envelope line starts here
            if pending.startswith(FROM):
                self.number += 1
                self._envelope = True
            else:
                self._begin(headless=True)
            return True
        if self._line_start and pending.startswith(FROM):
            start = 0
        else:
            separator = pending.find(_SEPARATOR)
            start = -1 if separator < 0 else separator + 1
        if start < 0:  # no envelope line yet; one may begin in the last bytes
            if len(pending) > len(FROM):
                self._take(len(pending) - len(FROM))
            return False
        self._take(start)
        messages += self._finish()
        return True

    def _begin(self, headless: bool) -> None:
        self._body = bytearray()
        self._size = 0
        self._headless = headless
        self._line_start = True

    def _skip(self, count: int) -> None:
        del self._pending[:count]
        self._offset += count

    def _take(self, count: int) -> None:
        """Move the first ``count`` bytes pending to the message (those within its first
        ``max_bytes + 1``)."""
        if not count:
            return
        assert self._body is not None  # only a message being read takes bytes
        room = count if self.max_bytes is None else min(count, self.max_bytes + 1 - len(self._body))
        if room > 0:
            self._body += self._pending[:room]
        self._size += count
        self._line_start = self._pending[count - 1] == ord("\n")
        self._skip(count)

    def _finish(self) -> list[Message]:
        """The message read, ending where the bytes pending start (none for blank text before the
        first envelope line)."""
        body, size = self._body, self._size
        assert body is not None  # only a message being read is finished
        self._body = None
        if self._headless:
            if size == len(body) and not body.strip():
                return []
            return [Message(bytes(body), self._offset, self.number, "text before the first 'From ' line: not an mbox")]
        if self.max_bytes is not None and size > self.max_bytes + 1:  # cut: refused for its size, as it is
            return [Message(bytes(body), self._offset, self.number)]
        return [Message(_unescape(_without_separator(bytes(body))), self._offset, self.number)]


def _without_separator(body: bytes) -> bytes:
    """``body`` less the blank line that ends it: the separator before the next envelope line."""
    for blank in (b"\n", b"\r\n"):
        if body == blank or body.endswith(b"\n" + blank):
            return body[: -len(blank)]
    return body


def _unescape(body: bytes) -> bytes:
    """``body`` with one ">" taken from each line ">From ", ">>From "... (mboxrd)."""
    return _ESCAPED.sub(rb"\1", body) if b">From " in body else body


class WholeInput:
    """The whole input as one message (``source.format: raw``), its first ``max_bytes + 1`` bytes
    kept; an empty input is no message."""

    def __init__(self, max_bytes: int | None = None, offset: int = 0, number: int = 0) -> None:
        self.max_bytes = max_bytes
        self.number = number
        self._offset = offset
        self._kept = bytearray()
        self._size = 0

    def feed(self, data: bytes) -> list[Message]:
        room = len(data) if self.max_bytes is None else self.max_bytes + 1 - len(self._kept)
        if room > 0:
            self._kept += data[:room]
        self._size += len(data)
        return []

    def end(self) -> list[Message]:
        if not self._size:
            return []
        self.number += 1
        self._offset += self._size
        message = Message(bytes(self._kept), self._offset, self.number)
        self._kept, self._size = bytearray(), 0
        return [message]


def splitter(format: str, max_bytes: int | None = None, offset: int = 0, number: int = 0) -> Splitter:
    """The splitter of a mail format ("mbox" or "raw") for an input starting at ``offset``, after
    message ``number``."""
    return (MboxSplitter if format == "mbox" else WholeInput)(max_bytes, offset, number)


def _batch(messages: Sequence[Message], cursors: Sequence, name, label: object) -> RecordBatch:
    """``messages`` as records, each with ``label`` and its error."""
    errors = {i: message.error for i, message in enumerate(messages) if message.error is not None}
    return RecordBatch([message.value for message in messages], cursors, name, [label] * len(messages), errors)


class MessageFileSource(Source):
    """The messages of a file (gzip when its name ends in ``.gz``): an mbox, or one whole message
    (``format`` "raw"), each labelled ``label``.

    A record is named ``path:number``, the message's number in the file (from 1). Its cursor is (the
    offset where the next message starts in the decompressed file, its number): a resumed source
    reopens the file at the start of the message after the last one processed. The position holds
    the file's identity too (`io.inputs`).
    """

    def __init__(
        self,
        path: str | Path,
        format: str = "mbox",
        offset: int = 0,
        message: int = 0,
        max_bytes: int | None = None,
        label: object = None,
    ) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.format = format
        self.max_bytes = max_bytes
        self.label = label
        self._head = FileHead(self.path)
        self._raw, self._file, self._size = open_input(self.path)
        self._restart(offset, message)
        self._read_from = (offset, message)  # the position before the last batch read
        self.ready = True  # False: the last read went through MAX_READ_BYTES without a message

    def _restart(self, offset: int, message: int) -> None:
        """Read on from ``offset``, where message ``message + 1`` starts."""
        self._file.seek(offset)
        self.offset, self.message = offset, message
        self._splitter = splitter(self.format, self.max_bytes, offset, message)
        self._ready: deque[Message] = deque()  # messages cut and not handed out yet
        self._held = 0  # their bytes
        self._ended = False

    def read(self, n: int) -> RecordBatch | None:
        """Up to ``n`` messages, from ``MAX_READ_BYTES`` of the file read at most; an empty batch (``ready`` False:
        no idle time) when they complete none (a message that does not end: /dev/zero); None at the end of the
        file."""
        self._read_from = (self.offset, self.message)
        blocks = max(MAX_READ_BYTES // READ_BUFFER, 1)
        while len(self._ready) < n and self._held < BATCH_BYTES and not self._ended and blocks:
            self._read_block()
            blocks -= 1
        messages = _take(self._ready, n)
        self.ready = bool(messages) or self._ended
        if not messages:
            if not self._ended:
                return RecordBatch([], (), self._position)
            check_whole(self._file, self.name, f"message {self.message:,}" if self.message else "none")
            return None
        self._held -= sum(len(message.value) for message in messages)
        self.offset, self.message = messages[-1].end, messages[-1].number
        return _batch(messages, [(message.end, message.number) for message in messages], self._position, self.label)

    def _read_block(self) -> None:
        """Read and split the next block (at the end of the file, what is left)."""
        data = self._file.read(READ_BUFFER)
        self._ended = not data
        found = self._splitter.feed(data) if data else self._splitter.end()
        self._ready.extend(found)
        self._held += sum(len(message.value) for message in found)

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Back to the end of record ``done - 1`` of ``batch`` (the last read), or to where the batch
        was read from: the next read starts with record ``done``."""
        self._restart(*(batch.cursors[done - 1] if done else self._read_from))

    def _position(self, cursor: tuple[int, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        self._file.close()

    def progress(self) -> tuple[int, int] | None:
        return (self._raw.tell(), self._size) if self._raw.seekable() else None  # a pipe has no size

    def position(self) -> dict:
        return {"offset": self.offset, "message": self.message, "input": self._head.identity(self._raw)}


def _take(ready: deque[Message], n: int) -> list[Message]:
    """Up to ``n`` messages from ``ready``, the first always, and no more once they hold
    ``BATCH_BYTES``."""
    messages: list[Message] = []
    size = 0
    while ready and len(messages) < n and size < BATCH_BYTES:
        messages.append(ready.popleft())
        size += len(messages[-1].value)
    return messages


class MessageStdinSource(Source):
    """The messages of standard input: an mbox, or one whole message (``format`` "raw"), each
    labelled ``label``, handed out as they complete (an mbox message once the next one starts or
    the input ends), with idle ticks while none does.

    A record is named ``<stdin>:number``. Standard input cannot be re-read: a resumed run skips the
    first ``skip`` records instead, which is exact only when the same input is fed again.
    """

    name = "<stdin>"

    def __init__(
        self,
        format: str = "mbox",
        poll_seconds: float = 0.5,
        stream: BinaryIO | None = None,
        skip: int = 0,
        max_bytes: int | None = None,
        label: object = None,
    ) -> None:
        self._input = StdinReader(poll_seconds, stream)
        self._splitter = splitter(format, max_bytes)
        self._skip = skip
        self.label = label
        self._ready: deque[Message] = deque()  # messages cut and not handed out yet
        self._ended = False
        self.count = 0  # the records handed out or skipped
        self._taken: list[Message] = []  # the messages taken from the queue by the last read
        self._taken_from = 1  # the count of the first of them

    def read(self, n: int) -> RecordBatch | None:
        while True:
            if not self._ready and not self._fill():
                return None if self._ended else RecordBatch([], [], self._position)
            messages: list[Message] = []
            cursors: list[tuple[int, int]] = []
            self._taken, self._taken_from = [], self.count + 1
            while self._ready and len(messages) < n:
                message = self._ready.popleft()
                self._taken.append(message)
                self.count += 1
                if self.count > self._skip:
                    messages.append(message)
                    cursors.append((self.count, message.number))
            if messages:
                return _batch(messages, cursors, self._position, self.label)

    def _fill(self) -> bool:
        """Wait up to ``poll_seconds`` for data; whether complete messages came."""
        data = None if self._ended else self._input.read()
        if data is None:
            return False
        self._ended = not data
        self._ready.extend(self._splitter.feed(data) if data else self._splitter.end())
        return bool(self._ready)

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Put the messages from record ``done`` of ``batch`` (the last read) on back: the next read
        starts with it."""
        first = batch.cursors[done][0]
        self._ready.extendleft(reversed(self._taken[first - self._taken_from :]))
        self.count = first - 1

    def _position(self, cursor: tuple[int, int]) -> str:
        return f"{self.name}:{cursor[1]}"

    def close(self) -> None:
        self._input.close()

    def position(self) -> dict:
        return {"messages": self.count}


class _Entry(NamedTuple):
    """A message file of a tree (or a directory that cannot be listed, with the reason): its place
    in the order, its path relative to the top directory ("/" between names), its folder, its user."""

    key: tuple[str, str]
    path: str
    folder: str
    error: str | None = None
    user: str | None = None


#: Why a file of the top directory of a tree of users' mail is not taken.
NO_USER = "not in a user's directory (source.users: directories takes each directory of the top one for a user's mail)"


def _key(path: str) -> tuple[str, str]:
    """Where the file at ``path`` comes in the order: by its name up to a ":" (in a Maildir, its
    delivery time and unique part, without the flags a mail client changes), then by its path."""
    return path.rsplit("/", 1)[-1].split(":", 1)[0], path


def _walk(root: Path, users: bool = False) -> Iterator[_Entry]:
    """The message files under ``root``, and the directories that cannot be listed. With ``users``, each directory
    of ``root`` (not hidden, not a symbolic link) is a user's tree, named by it, its folders named from it; a file
    of ``root`` itself is in no user's tree, a record with the reason."""
    stack: list[tuple[str, str, str | None]] = [("", "", None)]  # (path relative to root, folder name, user)
    while stack:
        relative, folder, user = stack.pop()
        try:
            with os.scandir(root / relative) as listing:
                entries = list(listing)
        except OSError as error:
            why = f"cannot list the directory: {error.strerror}"
            yield _Entry(_key(relative), relative, folder or INBOX, why, user)
            continue
        files, directories = _contents(relative, folder, entries)
        if users and not relative:  # the top directory: its directories are users', not hidden ones
            yield from (entry._replace(error=NO_USER) for entry in files)
            stack.extend((path, "", path) for path, _ in directories if not path.startswith("."))
            continue
        yield from (entry._replace(user=user) for entry in files)
        stack.extend((path, inner, user) for path, inner in directories)


def _contents(relative: str, folder: str, entries: list[os.DirEntry]) -> tuple[list[_Entry], list[tuple[str, str]]]:
    """The message files among the ``entries`` of the directory ``relative`` (of ``folder``), and its
    subdirectories to walk, as (path relative to the root, folder name). In a Maildir (a directory holding cur or
    new) no file is a message and tmp is not walked; elsewhere, files whose name starts with "." are not."""
    directories = {entry.name for entry in entries if _is_directory(entry)}
    maildir = any(name in directories for name in _MESSAGE_DIRS)
    files, walked = [], []
    for entry in entries:
        path = f"{relative}/{entry.name}" if relative else entry.name
        if entry.name in directories:
            inner = _inner_folder(entry, folder, maildir)
            if inner is not None:
                walked.append((path, inner))
        elif not (maildir or entry.name.startswith(".")):
            files.append(_Entry(_key(path), path, folder or INBOX))
    return files, walked


def _inner_folder(directory: os.DirEntry, folder: str, maildir: bool) -> str | None:
    """The folder of the subdirectory ``directory`` of a directory of ``folder`` (a Maildir if ``maildir``): a
    Maildir's cur and new are its own folder; None for a directory not walked (a symbolic link, a Maildir's tmp)."""
    if directory.is_symlink() or (maildir and directory.name == "tmp"):
        return None
    return folder if maildir and directory.name in _MESSAGE_DIRS else _folder(folder, directory.name)


def maildir_folders(root: str | Path, users: bool = False) -> list[str]:
    """The folders of the tree at ``root`` that hold a message file, sorted (named as `MaildirSource` names them;
    with ``users``, in each user's tree)."""
    return sorted({entry.folder for entry in _walk(Path(root), users) if entry.error is None})


def is_maildir(path: str | Path) -> bool:
    """Whether the directory ``path`` is a Maildir itself (it holds cur or new)."""
    return any(os.path.isdir(os.path.join(path, name)) for name in _MESSAGE_DIRS)


def _is_directory(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _folder(parent: str, name: str) -> str:
    """The folder of directory ``name`` in folder ``parent``: a Maildir++ folder ``.Spam`` is Spam."""
    name = name[1:] if name.startswith(".") else name
    return f"{parent}/{name}" if parent else name


def _read_message(path: Path, limit: int) -> tuple[bytes, str | None]:
    """The first ``limit`` bytes of the file at ``path`` (-1: all), or why it cannot be read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # opening a named pipe would wait for a writer
    except OSError as error:
        return b"", f"cannot read: {error.strerror or error}"
    with open(descriptor, "rb") as file:
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                return b"", "cannot read: not a regular file"
            return file.read(limit), None
        except OSError as error:
            return b"", f"cannot read: {error.strerror or error}"


class MaildirSource(Source):
    """The messages of a directory tree, one per file: a Maildir (the ``cur/`` and ``new/`` of its
    top directory and of each folder in it, ``.Spam/``, ``.Lists.python/`` as Maildir++ names them,
    or ``Spam/``), or any tree of folders holding message files.

    The tree is listed when the source opens, and read in a fixed order: by file name up to a ":"
    (in a Maildir, the delivery time comes first), then by path. Not messages: hidden files (a name
    starting with "."), the files of a Maildir's ``tmp/`` (deliveries in progress) and of its own
    directory (its indexes and lists), and directories reached through a symbolic link. The folder
    of a message is the path of its directory in the tree, less a final ``cur`` or ``new`` and the
    leading "." of Maildir++ names ("Spam", "Lists.python", "Archive/2024"); the top directory is
    INBOX. A message is labelled with its folder's label in ``folders``, else with ``label``. With
    ``users``, the top directory holds users' trees: each directory of it is one user's Maildir (or
    tree), the user named by the directory, and folders are named from it (``ann/.Junk/`` is ann's
    Junk); a file of the top directory itself is a record with the reason (`NO_USER`).

    A record is named by the file's path, and its cursor is its place in the order. A file that
    cannot be read (or a directory that cannot be listed) is a record with the reason, which the
    parser rejects. ``after`` (from a checkpoint) is the path of the last message processed: only
    the messages after it in the order are read.
    """

    def __init__(
        self,
        root: str | Path,
        folders: Mapping[str, object] | None = None,
        label: object = None,
        max_bytes: int | None = None,
        after: str | None = None,
        users: bool = False,
    ) -> None:
        self.root = Path(root)
        self.name = str(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"{root}: no such directory")
        self.folders = dict(folders or {})
        self.label = label
        self._limit = -1 if max_bytes is None else max_bytes + 1
        entries = sorted(_walk(self.root, users))
        for folder in sorted(self.folders.keys() - {entry.folder for entry in entries}):
            _log.warning("%s: no message in folder %r of source.folders", root, folder)
        if after is not None:
            entries = [entry for entry in entries if entry.key > _key(after)]
        self._entries = entries
        self._after = after
        self._next = 0  # the entry to read next
        self._read_from = 0  # the entry the last batch was read from

    def read(self, n: int) -> RecordBatch | None:
        self._read_from = self._next
        values: list[bytes] = []
        labels: list[object] = []
        users: list[str | None] = []
        errors: dict[int, str] = {}
        size = 0
        while self._next < len(self._entries) and len(values) < n and size < BATCH_BYTES:
            entry = self._entries[self._next]
            value, error = (b"", entry.error) if entry.error else _read_message(self.root / entry.path, self._limit)
            if error is not None:
                errors[len(values)] = error
            values.append(value)
            labels.append(self.folders.get(entry.folder, self.label))
            users.append(entry.user)
            size += len(value)
            self._next += 1
        if not values:
            return None
        return RecordBatch(values, range(self._read_from, self._next), self._position, labels, errors, users)

    def unclaim(self, batch: RecordBatch, done: int) -> None:
        """Back to record ``done`` of ``batch`` (the last read): the next read starts with it."""
        self._next = self._read_from + done

    def _position(self, index: int) -> str:
        return str(self.root / self._entries[index].path)

    def progress(self) -> tuple[int, int]:
        return self._next, len(self._entries)

    def position(self) -> dict:
        return {"last": self._entries[self._next - 1].path if self._next else self._after}
