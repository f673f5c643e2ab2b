"""The ``pegasos-stream`` command line: ``run`` a stream job, ``eval`` a finite log, ``predict`` with a
trained model, ``serve`` its predictions, ``learn`` messages users taught, ``inspect`` a checkpoint, list the
shipped ``configs``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import __version__, _compiled
from ..io.sinks import SinkError
from ..io.sources import SourceError
from ..persist.checkpoint import CheckpointError, CheckpointWriteError, describe
from ..run.diagnosis import AllRejected
from ..run.predictions import EXPLAINED
from ..run.rejections import StopRun
from ..run.runner import Runner, RunStats
from . import options
from .checks import StartupError
from .config import ConfigError, shipped_configs
from .job import Job, job_settings
from .learn import add_learn_command, command_learn
from .plot import write_learning_curve
from .predict import EVENT_SUFFIXES, command_predict
from .serve import add_serve_command, command_serve
from .users import add_users_command, command_users

if TYPE_CHECKING:
    from ..run.evaluation import BinaryReport
    from .settings import JobSettings

#: The default job of ``eval``, a shipped configuration: the spam filter on the bundled sample stream.
DEFAULT_CONFIG = "spam"

#: New container objects between two collections of the young generation during a run (Python's default: 700).
YOUNG_COLLECTION = 20_000
#: From a run on, malloc (glibc's) serves blocks under ``HEAP_BLOCK`` bytes from its heap and keeps up to
#: ``HEAP_SLACK`` freed bytes there; by default a block from 128 KiB up may be mapped afresh and unmapped when
#: freed, and freed memory over 128 KiB at the heap's top is handed back. The blocks a stream reads and the
#: arrays of its batches then reuse memory instead of faulting in new pages (a replay of 200k svmlight lines:
#: 10k page faults instead of 29k).
HEAP_BLOCK = 4 << 20
HEAP_SLACK = 32 << 20


@contextlib.contextmanager
def _diagnostics_on_stderr() -> Iterator[None]:
    """For the length of a command, the package's diagnostics (info and up) go to stderr as plain
    lines: rejections, statistics, checkpoint fallbacks, resume messages."""
    logger = logging.getLogger("pegasos_stream")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@contextlib.contextmanager
def process_wide(runner: Runner) -> Iterator[None]:
    """The process-wide side of a run, undone after it (error included): SIGTERM and SIGINT ask
    ``runner`` to stop after the current record, and what exists when the run starts (modules, the
    model, the source's client), which outlives it, is set aside from garbage collection
    (``gc.freeze``), so that the full collections the stream triggers do not traverse it again. The
    young generation is collected after ``YOUNG_COLLECTION`` new objects instead of Python's 700: a
    batch makes thousands of short-lived ones (a Kafka client's messages, the events' ids), which a
    collection in the middle of the batch would traverse while they are alive and move to older
    generations, to be traversed again. Freed memory is kept for reuse (`HEAP_BLOCK`, `HEAP_SLACK`): that
    setting, with the compiled modules, lasts as long as the process."""
    previous = {sig: signal.signal(sig, runner.request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    if _compiled.BLOCKS is not None:
        _compiled.BLOCKS.keep_freed_memory(HEAP_BLOCK, HEAP_SLACK)
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], YOUNG_COLLECTION), *thresholds[1:])
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _command_inspect(args: argparse.Namespace) -> int:
    try:
        summary = describe(args.path, options.key_of(args))
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>16}: {value}")
    return 0


def _summary(path: Path) -> str:
    """The first comment line of a configuration file, without its ``#``."""
    with open(path, encoding="utf-8") as lines:
        return next((line.lstrip("#").strip() for line in lines if line.startswith("#")), "")


def _command_configs(args: argparse.Namespace) -> int:
    shipped = shipped_configs()
    if args.name is None:
        width = max(map(len, shipped), default=0)
        for name, path in shipped.items():
            print(f"{name:<{width}}  {_summary(path)}")
        return 0
    if args.name not in shipped:
        raise ConfigError(f"no shipped configuration {args.name!r} (shipped: {', '.join(shipped)})")
    sys.stdout.write(shipped[args.name].read_text(encoding="utf-8"))
    return 0


def _command_run(args: argparse.Namespace, evaluate: bool) -> int:
    """``run``, or ``eval`` (``evaluate``): the job's settings, its pieces opened, its stream run with a run's
    process-wide settings (`process_wide`), then what it did; the exit status."""
    config_name, settings = _job_settings(args, evaluate)
    resume = not evaluate and args.resume
    with contextlib.ExitStack() as opened:  # closed in the reverse order, whatever happens
        job = Job.open(settings, evaluate, opened, resume, resume and args.accept_config)
        try:
            with process_wide(job.runner):
                stats = job.run()
        except StopRun as error:
            print(f"stopped: {error}", file=sys.stderr)
            return 1
        except AllRejected as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except (SourceError, CheckpointWriteError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    if (unlearned := _nothing_learned(job, stats, evaluate)) is not None:
        print(f"error: {unlearned}", file=sys.stderr)  # (no summary: the run did not succeed)
        return 2
    _print_summary(job.summary(stats), evaluate, evaluate and args.json)
    if evaluate and args.plot:
        write_learning_curve(cast("BinaryReport", job.runner.report), args.plot, Path(config_name).stem)
    return 0


def _nothing_learned(job: Job, stats: RunStats, evaluate: bool) -> str | None:
    """Why a run learned from no record: each record it read was rejected; or (an eval, ``evaluate``, that read its
    input to the end: no ``run.max_events: 0``, no signal) its input held none, each event it scored still waits for
    its label, or its records came to nothing else. None when it learned, or may learn from labels to come."""
    if stats.events and stats.rejected == stats.events:
        return f"each of the {stats.events:,} records read was rejected: nothing was learned"
    if not evaluate or stats.learned or job.settings.run.max_events == 0 or job.runner.stop_requested:
        return None
    if not stats.events:
        return f"eval read no record from {job.source.name}: there is nothing to evaluate"
    pending = job.runner.pending
    if not len(pending):
        return (
            f"eval learned nothing from its {stats.events:,} records: {stats.rejected:,} rejected,"
            f" {pending.unmatched:,} labels for an id that no event before them had, and"
            f" {pending.expired + pending.dropped:,} events whose label did not come in time (delayed_labels)"
        )
    label = job.runner.parser.fields["label"]
    return (
        f"eval learned nothing: none of the {stats.predicted:,} events it scored carried a label in the field {label!r}"
        " (source.fields.label), nor did a label come later for one; eval learns from labels (run scores unlabelled"
        " events)"
    )


def _job_settings(args: argparse.Namespace, evaluate: bool) -> tuple[str, JobSettings]:
    """(the name the configuration was given by, the job's settings): its file (an eval's default: ``DEFAULT_CONFIG``)
    with the flags' overrides (an eval writes no output unless told), checked for the command."""
    config_name = args.config or (DEFAULT_CONFIG if evaluate else None)
    if config_name is None:
        raise ConfigError("run needs --config FILE (or the name of a shipped configuration: pegasos-stream configs)")
    overrides = options.overrides(args)
    if evaluate and args.output is None:
        overrides.insert(0, ("output.type=none", "eval"))
    settings = job_settings(
        config_name,
        overrides,
        options.flags_of_paths(args),
        evaluate=evaluate,
        plot=args.plot if evaluate else None,
        resume=not evaluate and args.resume,
    )
    return config_name, settings


def _print_summary(summary: dict[str, object], evaluate: bool, as_json: bool) -> None:
    """What a job did: a run's as one JSON line on stderr; an eval's on stdout, as one JSON object (``as_json``) or
    one line a key."""
    if not evaluate:
        print(json.dumps(summary), file=sys.stderr)
    elif as_json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            if key == "users":  # (each one's figures in the JSON form)
                value = f"{len(cast(dict, value))} (eval --json gives each one's figures)"
            print(f"{key:>20}: {value:.6g}" if isinstance(value, float) else f"{key:>20}: {value}")


#: The exit status after the reader of standard output has gone: a process killed by SIGPIPE's.
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE


def _output_gone() -> int:
    """Standard output's reader has gone (``eval | head``): what is left for it goes nowhere, and
    the command ends quietly (the run stopped as on any failed output: see README)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return BROKEN_PIPE_STATUS


def _explained(text: str) -> int:
    """``--explain K``: a number of features from 1 to 1000."""
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"expected a number of features from 1 to 1000, got {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pegasos-stream", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}, {_compiled.describe()}")
    commands = parser.add_subparsers(dest="command", required=True)
    common = options.common_options()
    run = commands.add_parser("run", parents=[common], help="predict and learn on a stream until it ends or a signal")
    run.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint")
    run.add_argument(
        "--accept-config",
        action="store_true",
        help="with --resume, continue from a checkpoint written with another configuration",
    )
    evaluate = commands.add_parser("eval", parents=[common], help="replay a labelled log prequentially")
    evaluate.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    evaluate.add_argument("--plot", metavar="PNG", help="write a learning curve")
    predict = commands.add_parser(
        "predict",
        help="score messages or events with a trained model, without learning",
        description="Score each input with the model of a checkpoint of run, which is left unchanged: one JSON "
        'line {"id", "predicted", "score", "proba"} per message or event. A file whose name ends in '
        + ", ".join(EVENT_SUFFIXES)
        + " (or one of them and .gz) holds events as run reads them; any other file, and - (standard input), "
        "is one RFC 822 message. Exit status 1 when an input was rejected, 2 when nothing could be scored.",
    )
    predict.add_argument("--model", required=True, metavar="CHECKPOINT", help="a checkpoint file, or a directory")
    predict.add_argument(
        "--format", choices=["message", "events"], help="read every input as one message, or as events"
    )
    predict.add_argument(
        "--explain",
        type=_explained,
        nargs="?",
        const=EXPLAINED,
        default=0,
        metavar="K",
        help=f"add to each prediction the K features (default {EXPLAINED}) that weigh most in its score, with their"
        ' parts of it: "explain": [[feature, part], ...]',
    )
    predict.add_argument("inputs", nargs="*", metavar="FILE", help="a message or events file, - for standard input")
    options.add_key_options(predict)
    add_serve_command(commands, common)
    add_learn_command(commands)
    add_users_command(commands)
    inspect = commands.add_parser("inspect", help="summarise a checkpoint (a file, or a directory's newest)")
    inspect.add_argument("path")
    inspect.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    options.add_key_options(inspect)
    configs = commands.add_parser("configs", help="list the shipped configurations, or print one")
    configs.add_argument("name", nargs="?", help="print this configuration (to start a file of one's own)")
    args = parser.parse_args(argv)
    with _diagnostics_on_stderr():
        try:
            if args.command == "configs":
                return _command_configs(args)
            if args.command == "inspect":
                return _command_inspect(args)
            if args.command == "predict":
                return command_predict(args)
            if args.command == "serve":
                return command_serve(args)
            if args.command == "learn":
                return command_learn(args)
            if args.command == "users":
                return command_users(args)
            return _command_run(args, evaluate=args.command == "eval")
        except BrokenPipeError:
            return _output_gone()
        except ConfigError as error:
            print(f"configuration error: {error}", file=sys.stderr)
            return 2
        except StartupError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except CheckpointError as error:  # the checkpoint directory is locked, or too full to start
            print(f"error: {error}", file=sys.stderr)
            return 2
        except SinkError as error:  # an output that cannot take what it is given: a full disk, a broker gone
            print(f"error: {error}", file=sys.stderr)
            return 1


if __name__ == "__main__":
    sys.exit(main())
