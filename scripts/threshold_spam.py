"""The spam decision's threshold: ham flagged and spam caught at each required score, on both shared corpora.

``pegasos-stream eval --config spam`` replays each corpus with predictions written (each message scored before
its label is learned); a message is spam when its score, the log-odds of spam ln(p / (1 − p)) that
``serve --spamd`` answers, reaches the required score. The reference: SpamAssassin 4.0.1 (stock rules, Bayes
taught every label through ``spamc -L``, local tests only) over the first 3,514 messages of the SpamAssassin
stream flags 1.16% of ham at 86.8% spam recall at its 5.0 (measured outside this script, which does not run
SpamAssassin). The default required score must flag less ham at equal or better recall on both corpora.

Usage: ``python scripts/threshold_spam.py [--data ...] [--lingspam-data ...] [--limit 3514]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _harness import add_data_argument, add_lingspam_argument, add_out_argument, section, write_results

from pegasos_stream.serve.spamd import REQUIRED_SCORE, score_of

#: The required scores tabled (log-odds of spam).
SCORES = (0.0, 0.5, 1.0, REQUIRED_SCORE, 2.0, 2.5, 3.0)
#: SpamAssassin's own figures at its 5.0 over the first 3,514 SpamAssassin messages: (ham flagged, spam recall).
SPAMASSASSIN = (0.0116, 0.868)


def scores(corpus: Path, limit: int | None, work: Path) -> tuple[list[float], list[bool]]:
    """Each message's score before it was learned (as serve --spamd scores it), and whether it is spam."""
    events, predictions = work / f"{corpus.stem}.jsonl", work / f"{corpus.stem}.predictions.jsonl"
    labels = []
    with gzip.open(corpus, "rt", encoding="utf-8") as handle, open(events, "w", encoding="utf-8") as out:
        for n, line in enumerate(handle):
            if limit is not None and n >= limit:
                break
            out.write(line)
            labels.append(json.loads(line)["label"] == "spam")
    command = [sys.executable, "-m", "pegasos_stream.cli", "eval", "--config", "spam", "--input", str(events)]
    subprocess.run([*command, "--output", str(predictions), "--json"], check=True, capture_output=True)
    with open(predictions, encoding="utf-8") as handle:
        probas = [json.loads(line)["proba"] for line in handle]
    return [score_of(p) for p in probas], labels


def rates(values: list[float], spam: list[bool], required: float) -> tuple[float, float]:
    """(share of ham flagged, share of spam caught) at ``required``."""
    flagged = [value >= required for value in values]
    ham = sum(not s for s in spam)
    return (
        sum(f and not s for f, s in zip(flagged, spam, strict=True)) / ham,
        sum(f and s for f, s in zip(flagged, spam, strict=True)) / (len(spam) - ham),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    add_lingspam_argument(parser)
    parser.add_argument("--limit", type=int, default=3514, help="messages of the SpamAssassin stream (from its first)")
    add_out_argument(parser, "spam_threshold.json")
    args = parser.parse_args()
    rows, meets = [], {}
    with tempfile.TemporaryDirectory() as work:
        for name, corpus, limit in (("SpamAssassin", args.data, args.limit), ("Ling-Spam", args.lingspam_data, None)):
            values, spam = scores(corpus, limit, Path(work))
            for required in SCORES:
                flagged, recall = rates(values, spam, required)
                better = flagged <= SPAMASSASSIN[0] and recall >= SPAMASSASSIN[1]
                meets.setdefault(required, []).append(better)
                default = " (default)" if required == REQUIRED_SCORE else ""
                rows.append(
                    [name, len(spam), f"{required:g}{default}", f"{100 * flagged:.2f}%", f"{100 * recall:.1f}%"]
                )
    notes = [
        f"SpamAssassin 4.0.1 at its 5.0 over the first 3,514 SpamAssassin messages: {100 * SPAMASSASSIN[0]:.2f}% of"
        f" ham flagged, {100 * SPAMASSASSIN[1]:.1f}% of spam caught. Required scores with less ham flagged at equal"
        f" or better recall on both corpora: {', '.join(f'{s:g}' for s, ok in meets.items() if all(ok))}.",
    ]
    columns = ["corpus", ">messages", ">required score", ">ham flagged", ">spam caught"]
    write_results(args, "Spam threshold", [section("Ham flagged and spam caught", columns, rows, notes)])


if __name__ == "__main__":
    main()
