#!/usr/bin/env bash
# The libFuzzer targets of tools/fuzz, built with clang and run briefly and
# deterministically (seed 1, 2000 inputs each beyond their seeds): each
# target's harness still builds against the library, its seeds load, and
# the first mutations find nothing (a crash, a sanitizer report, a leak, a
# hang or an allocation past the target's limit fails it). The long runs
# are `tools/fuzz/run.sh TARGET SECONDS` (docs/hardening.md). Needs clang
# and its libFuzzer runtime (tools/setup.sh installs them); without them
# each target prints SKIP with the reason.
set -u
cd "$(dirname "$0")/../.."
targets="request output tokenizer jinja template session checkpoint"
if ! command -v clang >/dev/null || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
  clang -x c - -fsanitize=fuzzer -o "${MS_TMP:-/tmp}/fuzz_probe" 2>/dev/null; then
  for t in $targets; do echo "SKIP fuzz_$t: no clang with a libFuzzer runtime (apt-get install clang libclang-rt-14-dev)"; done
  exit 0
fi
# a make of its own (not the suite's jobserver, when the suite runs under make)
unset MAKEFLAGS MFLAGS MAKELEVEL
export MS_TEMPLATES=${MS_TEMPLATES:-../shared/templates} # tests/run.sh finds them
# `make check` runs the plain and the sanitizer suites at once: the second
# waits here, then reuses the library the first built in build/fuzz
mkdir -p build
exec 9>build/fuzz.lock
flock 9
for t in $targets; do
  log=${MS_TMP:-/tmp}/fuzz_$t.log
  if tools/fuzz/run.sh "$t" 0 -runs=2000 -seed=1 >"$log" 2>&1 && grep -q "^Done [0-9]* runs" "$log"; then
    echo "PASS fuzz_$t ($(grep -o "^Done [0-9]* runs" "$log" | tail -1 | cut -d' ' -f2) inputs)"
  else
    echo "FAIL fuzz_$t: tools/fuzz/run.sh $t 0 -runs=2000 -seed=1"
    grep -E "ERROR|runtime error|SUMMARY|Test unit written|error:|No such|^fuzz_" "$log" | head -8 | sed 's/^/     /'
  fi
done
