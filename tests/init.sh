# The start of every test script (sourced from the repository root):
#   cd "$(dirname "$0")/../.." && . tests/init.sh NAME
# sets PY (Debian's python3, with numpy), BIN (the binary under test), the
# work folder W=$MS_TMP/NAME (MS_TMP: tests/run.sh's, else a temporary one
# removed at exit), and pass/fail, which print the suite's result lines and
# count the failures in $fails.
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/$1; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
