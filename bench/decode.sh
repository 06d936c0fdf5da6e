#!/usr/bin/env bash
# Resident decode and prefill speed with the time split (docs/perf.md,
# "Resident decode and prefill"): a random-weight gpt_oss checkpoint of the
# `small` preset (603 MB; or MODEL_DIR), 64 prompt tokens and 64 decoded,
# with 2 threads and 1 thread.
#   bench/decode.sh [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-build/demo-model}
[ -x ./moestream ] || make -j2 >/dev/null
if [ ! -f "$MODEL/config.json" ]; then
  /usr/bin/python3 tools/tinyckpt/gpt_oss.py --preset small --seed 1 --out "$MODEL"
fi
./moestream bench "$MODEL" --prompt 64 -n 64 >/dev/null 2>&1 # warm the page cache
for t in 2 1; do
  echo "== $t thread(s)"
  ./moestream bench "$MODEL" --prompt 64 -n 64 --threads $t 2>/dev/null |
    grep -E "^\| (moestream bench|family|prefill,|decode,|time split)"
done
