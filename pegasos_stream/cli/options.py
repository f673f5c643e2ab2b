"""The flags the commands share (``--config``, ``--input``, ``--output``, ``--max-events``,
``--stop-when-idle``, ``--set``), and what they change in a configuration: overrides, applied after
the file's settings. ``--input`` sets the format its name says (`config.input_format`), unless a
``--set`` gives ``source.format``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .checks import checkpoint_key
from .config import input_format, set_flag

__all__ = ["add_key_options", "common_options", "flags_of_paths", "key_of", "overrides"]

#: The flags that give the checkpoint key, file and environment variable.
KEY_FLAGS = ("--checkpoint-key-file", "--checkpoint-key-env")


def common_options() -> argparse.ArgumentParser:
    """The parent parser of the commands that run a configuration."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", metavar="FILE|NAME", help="YAML configuration: a file, or a shipped one by name (see: configs)"
    )
    common.add_argument("--input", help="read events from this file, or - for standard input")
    common.add_argument("--output", help="write predictions to this file, or - for standard output")
    common.add_argument("--max-events", type=int, help="stop after this many events")
    common.add_argument("--stop-when-idle", type=float, metavar="SECONDS", help="stop once no event came for this long")
    common.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a configuration key")
    return common


def overrides(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The ``--set`` overrides and the common flags as overrides, applied after them: (override,
    the flag it came from, as an error names it)."""
    sets = [(text, set_flag(text)) for text in args.set]
    texts: tuple[str, ...]
    if args.input == "-":
        sets.append(("source.type=stdin", "--input -"))
    elif args.input:
        if Path(args.input).is_dir():  # a directory of messages, one per file
            texts = ("source.type=maildir", "source.format=raw", f"source.path={json.dumps(args.input)}")
        else:
            texts = ("source.type=file", f"source.path={json.dumps(args.input)}")
            named = input_format(args.input)
            if named is not None and not _sets_format(args.set):
                texts += (f"source.format={named}",)
        sets += [(text, f"--input {args.input}") for text in texts]
    if args.output == "-":
        sets.append(("output.type=stdout", "--output -"))
    elif args.output:
        texts = ("output.type=file", f"output.path={json.dumps(args.output)}")
        sets += [(text, f"--output {args.output}") for text in texts]
    if args.max_events is not None:
        sets.append((f"run.max_events={args.max_events}", f"--max-events {args.max_events}"))
    if args.stop_when_idle is not None:
        sets.append((f"run.stop_when_idle={args.stop_when_idle}", f"--stop-when-idle {args.stop_when_idle:g}"))
    return sets


def _sets_format(sets: list[str]) -> bool:
    """Whether the ``--set`` overrides ``sets`` give ``source.format`` (or the whole ``source`` section)."""
    return any(text.partition("=")[0].strip() in ("source", "source.format") for text in sets)


def flags_of_paths(args: argparse.Namespace) -> dict[str, str]:
    """The configuration's file paths given by a flag, and the flag."""
    flags = {}
    if args.input not in (None, "-"):
        flags["source.path"] = "--input"
    if args.output not in (None, "-"):
        flags["output.path"] = "--output"
    return flags


def add_key_options(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that reads checkpoints: the key they must be signed with (`KEY_FLAGS`)."""
    parser.add_argument(
        KEY_FLAGS[0],
        metavar="FILE",
        help="read only checkpoints signed (HMAC-SHA256) with the key this file holds; refuse any other",
    )
    parser.add_argument(
        KEY_FLAGS[1], metavar="NAME", help="as --checkpoint-key-file, the key held by this environment variable"
    )


def key_of(args: argparse.Namespace) -> bytes | None:
    """The checkpoint key the flags of `add_key_options` give (None: none); a StartupError when it cannot be used."""
    return checkpoint_key(args.checkpoint_key_file, args.checkpoint_key_env, KEY_FLAGS)
