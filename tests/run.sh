#!/usr/bin/env bash
# Runs every test of the suite and prints the closing line
# "N passed, N failed, N skipped".
#
# Test programs are the C binaries built from tests/*/test_*.c and the scripts
# tests/*/test_*.sh; each prints one "PASS name" / "FAIL name: why" line per
# case, and "SKIP name: why" for a case this machine cannot run (a CPU
# without an instruction set), never silently. A program that exits non-zero without reporting a failure (a crash,
# a sanitizer abort) counts as one failed case.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export MS_BIN=${BIN:-./moestream}
export MS_BUILD=$BUILD

# The upstream fixtures live next to the repository (../shared/fixtures).
if [ -z "${MOESTREAM_FIXTURES:-}" ]; then
  for d in ../shared/fixtures /work/shared/fixtures; do
    [ -d "$d" ] && { MOESTREAM_FIXTURES=$(cd "$d" && pwd); break; }
  done
fi
export MOESTREAM_FIXTURES=${MOESTREAM_FIXTURES:-../shared/fixtures}
# and the released chat templates (../shared/templates) the same way
if [ -z "${MS_TEMPLATES:-}" ]; then
  for d in ../shared/templates /work/shared/templates; do
    [ -d "$d" ] && { MS_TEMPLATES=$(cd "$d" && pwd); break; }
  done
fi
export MS_TEMPLATES=${MS_TEMPLATES:-../shared/templates}
export MS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/moestream-test.XXXXXX")
trap 'rm -rf "$MS_TMP"' EXIT
# No user's config file or chat history takes part in a test.
unset MOESTREAM_CONFIG MOESTREAM_API_KEY
export XDG_CONFIG_HOME=$MS_TMP/config XDG_STATE_HOME=$MS_TMP/state

passed=0; failed=0; skipped=0
run_one() {
  local name=$1; shift
  local out rc
  out=$("$@" 2>"$MS_TMP/stderr"); rc=$?
  printf '%s\n' "$out" | grep -E '^(PASS|FAIL|SKIP|     )' || true
  local p f
  skipped=$((skipped + $(printf '%s\n' "$out" | grep -c '^SKIP ')))
  p=$(printf '%s\n' "$out" | grep -c '^PASS ')
  f=$(printf '%s\n' "$out" | grep -c '^FAIL ')
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited with status $rc"; sed 's/^/     /' "$MS_TMP/stderr" | tail -20
    f=1
  elif [ "$f" -ne 0 ]; then
    sed 's/^/     stderr: /' "$MS_TMP/stderr" | tail -10
  fi
  passed=$((passed + p)); failed=$((failed + f))
}

for t in $(ls "$BUILD"/tests/*/test_* 2>/dev/null | grep -v '\.d$' | sort); do
  [ -x "$t" ] || continue
  run_one "$t" "$t"
done
for t in $(ls tests/*/test_*.sh 2>/dev/null | sort); do
  run_one "$t" bash "$t"
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
