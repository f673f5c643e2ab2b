#!/usr/bin/env bash
# Run the tests of the compiled modules under AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Builds the compiled modules (pegasos_stream/learners/_loops.c, pegasos_stream/parse/_parse.c,
# pegasos_stream/io/_blocks.c, pegasos_stream/features/_text.c, with the headers they share) with
# -fsanitize=address,undefined into a temporary copy of the package (the in-place build is never
# touched), runs tests/test_compiled.py, tests/test_compiled_boundary.py, tests/test_text_compiled.py,
# tests/test_mime_rule.py, tests/test_committee.py, tests/test_dense_weights.py,
# tests/test_logistic_pegasos.py and tests/test_events.py (the parsers and the block reader over files)
# there with the ASan runtime preloaded, checks that every module of pegasos_stream._compiled.MODULES
# was built and loads, and exits non-zero on any sanitizer report or test failure.
#
# Usage: scripts/sanitize.sh [pytest arguments...]    (PYTHON=... picks the interpreter; default:
# .venv/bin/python when present, else python3; CC=... the compiler, gcc by default)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$([ -x "$root/.venv/bin/python" ] && echo "$root/.venv/bin/python" || command -v python3)}
cc=${CC:-gcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The package, its configurations and the tests, without any compiled module or cache.
mkdir -p "$work/tests"
cp "$root/pyproject.toml" "$work/"
cp -r "$root/configs" "$work/"
cp -r "$root/pegasos_stream" "$work/"
find "$work/pegasos_stream" \( -name '*.so' -o -name '*.pyd' -o -name '__pycache__' \) -prune -exec rm -rf {} +
cp "$root"/tests/*.py "$work/tests/"

# The build setuptools makes (the interpreter's flags and the project's), instrumented.
mapfile -t config < <("$python" -c '
import sysconfig as s
print(s.get_config_var("CFLAGS"), s.get_config_var("CCSHARED"))
print(s.get_paths()["include"])
print(s.get_config_var("EXT_SUFFIX"))')
read -ra flags <<<"${config[0]}"
include=${config[1]} suffix=${config[2]}
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
for module in learners/_loops parse/_parse io/_blocks features/_text; do
    "$cc" "${flags[@]}" -I"$include" -O2 -fno-fast-math -ffp-contract=off "${sanitize[@]}" \
        -c "$root/pegasos_stream/$module.c" -o "$work/module.o"
    "$cc" -shared "${sanitize[@]}" "$work/module.o" -o "$work/pegasos_stream/$module$suffix"
done

# The interpreter is not instrumented: the ASan runtime is preloaded, and Python's objects come from
# malloc (PYTHONMALLOC=malloc) so that ASan sees their lifetimes. The reports go to files (pytest
# captures the tests' stderr, and a report aborts the process).
libasan=$("$cc" -print-file-name=libasan.so)
reports="$work/reports"
mkdir "$reports"
status=0
(
    cd "$work"
    LD_PRELOAD="$libasan" PYTHONMALLOC=malloc ASAN_OPTIONS="detect_leaks=0" "$python" -c '
import sys
from pegasos_stream import _compiled
missing = [name for name, used in _compiled.in_use().items() if not used]
sys.exit(f"sanitize: compiled modules not loaded: {missing}" if missing else 0)'
    LD_PRELOAD="$libasan" PYTHONMALLOC=malloc \
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$reports/asan" \
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan" \
        "$python" -m pytest -q -p no:cacheprovider tests/test_compiled.py tests/test_compiled_boundary.py \
        tests/test_text_compiled.py tests/test_mime_rule.py tests/test_committee.py tests/test_dense_weights.py \
        tests/test_logistic_pegasos.py tests/test_events.py "$@"
) || status=$?

if [ -n "$(ls -A "$reports")" ]; then
    cat "$reports"/* >&2
    echo "sanitize: sanitizer report above" >&2
    exit 1
fi
if [ "$status" -ne 0 ]; then
    echo "sanitize: the tests failed (exit status $status)" >&2
    exit "$status"
fi
echo "sanitize: clean"
