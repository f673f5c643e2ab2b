"""The ``pegasos-stream`` command line: ``run`` a stream job, ``eval`` a finite log, ``predict`` with a
trained model, ``serve`` its predictions, ``inspect`` a checkpoint, list the shipped ``configs``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import math
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import __version__, _compiled
from ..persist.checkpoint import CheckpointError, Checkpoints, CheckpointWriteError, describe, latest_valid
from ..persist.checkpoint import checkpoints as checkpoint_files
from ..stream.diagnosis import AllRejected
from ..stream.runner import Runner, StopRun, check_resumable
from ..stream.sinks import SinkError
from ..stream.sources import SourceError
from . import options
from .assemble import build_checkpoints, build_cluster, build_metrics, build_publisher, build_runner, build_source
from .checks import (
    StartupError,
    check_files,
    check_mail_labels,
    check_plot,
    checkpoint_directory_error,
    checkpoint_key,
)
from .config import (
    ConfigError,
    check_kafka_checkpoints,
    config_file,
    load_config,
    shipped_configs,
    written_for,
)
from .inputs import resume_position
from .plot import write_learning_curve
from .predict import EVENT_SUFFIXES, command_predict
from .progress import ProgressBar
from .serve import add_serve_command, command_serve

if TYPE_CHECKING:
    from ..stream.evaluation import BinaryReport
    from ..stream.kafka_group import GroupSource

#: The default job of ``eval``, a shipped configuration: the spam filter on the bundled sample stream.
DEFAULT_CONFIG = "spam"

_log = logging.getLogger(__name__)
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
    if _compiled.FAST is not None:
        _compiled.FAST.keep_freed_memory(HEAP_BLOCK, HEAP_SLACK)
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


def _resume(config: dict, accept_config: bool = False) -> tuple[dict | None, dict | None]:
    """(state, source position) to resume from: the newest valid checkpoint's; without one, (None,
    None) for a new learner (files from the start, Kafka at its group's committed offsets, else
    ``source.start``), or (None, from the beginning) when checkpoints exist but none is usable (the
    model that learned what the group committed is lost). A checkpoint written with another
    configuration is refused (a ConfigError) unless ``accept_config``; its position applies only to
    the input it was taken from (`inputs.resume_position`). A checkpoint whose runner state or position a
    run could not take up (`check_resumable`), or not signed with ``checkpoint.key_file``/``key_env``'s key
    when one is set, is skipped as a corrupt one is."""
    directory = config["checkpoint"]["dir"]
    if not directory:
        raise ConfigError("--resume needs checkpoint.dir in the configuration")
    section = config["checkpoint"]
    found = latest_valid(directory, key=checkpoint_key(section["key_file"], section["key_env"]), check=check_resumable)
    if found is None:
        lost = bool(checkpoint_files(directory))
        if lost or config["source"]["type"] != "kafka":
            _log.info("no checkpoint in %s: starting from the beginning", directory)
        else:
            _log.info(
                "no checkpoint in %s: starting at the consumer group's committed offsets (source.start where none)",
                directory,
            )
        return None, {"from_beginning": True} if lost else None
    path, state, manifest = found
    if not written_for(manifest, config):
        if not accept_config:
            raise ConfigError(
                f"{path} was written with another configuration; "
                "resume with --accept-config to continue its model and state under this one"
            )
        _log.warning("warning: %s was written with another configuration", path)
    position = resume_position(config, manifest, path)
    _log.info("resuming from %s (t=%s, %s events)", path, state["model"].t, manifest["events"])
    return state, position


def _checkpoints(config: dict) -> Checkpoints | None:
    """The run's checkpoints (``build_checkpoints``); a StartupError when the directory cannot be
    created, locked or written."""
    try:
        return build_checkpoints(config)
    except OSError as error:
        raise checkpoint_directory_error(config["checkpoint"]["dir"], error) from None


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
    config_name = args.config or (DEFAULT_CONFIG if evaluate else None)
    if config_name is None:
        raise ConfigError("run needs --config FILE (or the name of a shipped configuration: pegasos-stream configs)")
    config_path = config_file(config_name)
    overrides = options.overrides(args)
    if evaluate and args.output is None:
        overrides.insert(0, ("output.type=none", "eval"))
    config = load_config(config_path, [text for text, _ in overrides], [flag for _, flag in overrides])
    if not evaluate:
        check_kafka_checkpoints(config, str(config_path))
    check_files(config, options.flags_of_paths(args))
    check_mail_labels(config, evaluate)
    if evaluate and args.plot:
        check_plot(args.plot, config)
    clustered = not evaluate and bool(config["cluster"]["delta_topic"])
    if clustered and args.resume:
        raise ConfigError(
            "--resume: a cluster learner (cluster.delta_topic) always starts from the cluster's newest snapshot and"
            " delta log, not from checkpoints"
        )
    with contextlib.ExitStack() as opened:  # closed in the reverse order, whatever happens
        cluster = None
        checkpoints = None if evaluate or clustered else _checkpoints(config)
        if checkpoints is not None:
            opened.callback(checkpoints.close)
            publisher = build_publisher(config, checkpoints)
            if publisher is not None:
                opened.callback(publisher.close)
        if clustered:
            cluster, closers = build_cluster(config)
            for close in reversed(closers):
                opened.callback(close)
        state, position = _resume(config, args.accept_config) if not evaluate and args.resume else (None, None)
        model = cluster.recorder if cluster is not None else state and state["model"]
        runner = build_runner(config, model=model, exact_auc=True if evaluate else None)
        opened.callback(runner.sink.close)
        if runner.dead_letters is not None:
            opened.callback(runner.dead_letters.close)
        if state:
            runner.restore(state["runner"])
        if checkpoints is not None:
            checkpoints.check_room(runner.model, runner.snapshot())
        source = build_source(config, position)
        opened.callback(source.close)
        if cluster is not None:
            cluster.attach(cast("GroupSource", source))
        progress = ProgressBar(runner.stats, source) if evaluate else None
        metrics = None if evaluate else build_metrics(config, runner, source, checkpoints)
        if metrics is not None:
            opened.callback(metrics.close)
        try:
            with process_wide(runner), progress.shown() if progress is not None else contextlib.nullcontext():
                stats = runner.run(
                    source,
                    config["run"]["max_events"],
                    config["run"]["stop_when_idle"],
                    progress,
                    cluster if cluster is not None else checkpoints,
                )
        except StopRun as error:
            print(f"stopped: {error}", file=sys.stderr)
            return 1
        except AllRejected as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except (SourceError, CheckpointWriteError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    summary: dict[str, object] = {
        **runner.report.summary(),
        "events": stats.events,
        "learned": stats.learned,
        "rejected": stats.rejected,
        "empty_bodies": runner.empty_bodies,
        "pending": len(runner.pending),
        "expired": runner.pending.expired + runner.pending.dropped,
        "unmatched_labels": runner.pending.unmatched,
        "examples_per_s": stats.rate(),
        "t": runner.model.t,
    }
    if cluster is not None:
        summary["cluster"] = cluster.summary()
    summary = {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in summary.items()}
    if not evaluate:
        print(json.dumps(summary), file=sys.stderr)
    elif args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:>20}: {value:.6g}" if isinstance(value, float) else f"{key:>20}: {value}")
    if evaluate and args.plot:
        write_learning_curve(cast("BinaryReport", runner.report), args.plot, Path(config_name).stem)
    return 0


#: The exit status after the reader of standard output has gone: a process killed by SIGPIPE's.
BROKEN_PIPE_STATUS = 128 + signal.SIGPIPE


def _output_gone() -> int:
    """Standard output's reader has gone (``eval | head``): what is left for it goes nowhere, and
    the command ends quietly (the run stopped as on any failed output: see README)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return BROKEN_PIPE_STATUS


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
    predict.add_argument("inputs", nargs="*", metavar="FILE", help="a message or events file, - for standard input")
    options.add_key_options(predict)
    add_serve_command(commands, common)
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
