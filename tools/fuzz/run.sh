#!/usr/bin/env bash
# Builds the request-parser fuzzer (libFuzzer + ASan + UBSan, clang) and runs it.
#   tools/fuzz/run.sh [SECONDS=60] [extra libFuzzer flags]
# Needs clang and libclang-rt-dev (Debian 12: apt-get install clang libclang-rt-14-dev).
# The corpus grows in build/fuzz/corpus (seeded from tools/fuzz/corpus); crashes are
# written to build/fuzz/ as crash-*; add a reproducer to tools/fuzz/corpus once fixed:
# tests/server/test_request runs every file there through the parser in the suite.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-60}; shift || true
out=build/fuzz; mkdir -p "$out/corpus"
clang -std=c11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Iapp \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  tools/fuzz/fuzz_request.c app/serve_request.c -ljansson -o "$out/fuzz_request"
cp -n tools/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
par=(); [ "${FUZZ_JOBS:-1}" -gt 1 ] && par=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")
exec "$out/fuzz_request" "$out/corpus" -dict=tools/fuzz/request.dict -max_len=4096 \
  -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/" \
  -print_final_stats=1 "${par[@]}" "$@"
