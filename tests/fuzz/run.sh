#!/usr/bin/env bash
# Builds the strict parser's two fuzzers (flows/sources/_case_columns.c compiled into each, with
# clang's libFuzzer, AddressSanitizer and UBSan) in a temporary folder and runs each for
# SECONDS, one after the other:
#   parser_memory_fuzzer        no out-of-bounds access, leak or undefined behaviour on any
#                               bytes, and columns Arrow can wrap from every block it takes;
#   parser_differential_fuzzer  every block it takes, the record rules and json.loads take
#                               and read alike (tests/fuzz/parser_oracle.py).
# Both start from tests/fuzz/corpus with tests/fuzz/jsonl.dict. Exits non-zero on any
# finding, keeping the input that found it and the fuzzer's log in a folder it names.
#
# Usage, with the project's venv active (the differential fuzzer imports the package from it):
#   tests/fuzz/run.sh SECONDS
# Needs clang and its libFuzzer runtime (Debian: clang and libclang-rt-N-dev, N its version).
# FUZZ_PARSER_DIR=folder fuzzes the _case_columns.c in that folder instead: a scratch copy
# with a deliberate bug shows the fuzzers catch it.
set -euo pipefail
seconds=${1:-}
case $seconds in ""|*[!0-9]*) echo "usage: tests/fuzz/run.sh SECONDS (a whole number)" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
parser_dir=$(cd "${FUZZ_PARSER_DIR:-$here/../../flows/sources}" && pwd)
python=$(command -v python)
[ -f "$parser_dir/_case_columns.c" ] || { echo "run.sh: no _case_columns.c in $parser_dir" >&2; exit 2; }

build=$(mktemp -d)
findings=$(mktemp -d "${TMPDIR:-/tmp}/case-columns-fuzz-findings.XXXXXX")
trap 'rm -rf "$build"' EXIT

# Python's headers, and its library for the module's Python layer (and the embedded oracle).
py_include=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("INCLUDEPY"))')
read -r -a py_link < <("$python" -c '
import sysconfig
v = sysconfig.get_config_var
libdir = v("LIBDIR") if v("Py_ENABLE_SHARED") else v("LIBPL")
print("-L" + libdir, "-Wl,-rpath," + libdir, "-lpython" + v("LDVERSION"), v("LIBS"), v("SYSLIBS"))')

for harness in parser_memory_fuzzer parser_differential_fuzzer; do
  clang -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$parser_dir" -I"$py_include" "$here/$harness.c" -o "$build/$harness" "${py_link[@]}"
done

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
run() {  # run HARNESS: SECONDS of fuzzing from a scratch copy of the corpus
  local harness=$1 code=0
  mkdir -p "$build/corpus-$harness"
  "$build/$harness" -max_total_time="$seconds" -timeout=25 -max_len=4096 -dict="$here/jsonl.dict" \
    -artifact_prefix="$findings/$harness-" -print_final_stats=1 \
    "$build/corpus-$harness" "$here/corpus" > "$build/$harness.log" 2>&1 || code=$?
  local runs rate rss
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/$harness.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$build/$harness.log")
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$build/$harness.log")
  if [ "$code" -eq 0 ]; then
    echo "$harness: ${runs:-?} inputs in ${seconds} s (${rate:-?} exec/s, peak ${rss:-?} MB), no finding"
  else
    cp "$build/$harness.log" "$findings/$harness.log"
    echo "$harness: FINDING (exit $code) after ${runs:-?} inputs; its input and log are in $findings:"
    grep -E 'ERROR|SUMMARY|runtime error|broken rule|disagree|AssertionError|Test unit written' "$build/$harness.log" | head -20
    status=1
  fi
}
run parser_memory_fuzzer
ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc FUZZ_PYTHON="$python" PYTHONPATH="$here" \
  run parser_differential_fuzzer
[ "$status" -eq 0 ] && rmdir "$findings"
exit "$status"
