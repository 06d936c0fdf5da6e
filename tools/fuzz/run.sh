#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs one or all:
#   tools/fuzz/run.sh [TARGET|all] [SECONDS=60] [extra libFuzzer flags]
#   request    the server's request parser (app/serve_request.c alone)
#   output     model output parsers and the grammars of schemas and tools (fuzz_output.c)
#   tokenizer  tokenizer.json, encode and decode (fuzz_tokenizer.c)
#   session    session files (fuzz_session.c; the tiny gpt_oss fixture from
#              $MOESTREAM_FIXTURES, default ../shared/fixtures)
#   jinja      chat templates and their variables (fuzz_jinja.c)
#   template   client requests rendered by the release templates
#              ($MS_TEMPLATES, default ../shared/templates; fuzz_template.c)
#   checkpoint a fixture folder's config.json, index and first shard header,
#              opened and run (fuzz_checkpoint.c; the fixtures as for session)
# (`run.sh SECONDS` alone still runs the request target.) The library targets
# link a build of the whole library with clang, -fsanitize=fuzzer-no-link, in
# build/fuzz/lib. Needs clang and libclang-rt-dev (Debian 12: apt-get install
# clang libclang-rt-14-dev). Each corpus grows in build/fuzz/corpus[-TARGET],
# seeded from the suite's own data; crashes are written to build/fuzz/ as
# crash-* (oom-*, timeout-*). Once one is fixed, make a unit test of it (the
# request target: add it to tools/fuzz/corpus, which tests/server/test_request
# replays).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=request
case "${1:-}" in
request | output | tokenizer | jinja | template | session | checkpoint | all) target=$1; shift ;;
esac
secs=${1:-60}; shift || true
out=build/fuzz; mkdir -p "$out"
san=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
common=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/" -print_final_stats=1)
par=(); [ "${FUZZ_JOBS:-1}" -gt 1 ] && par=(-jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS")

library() { # the library, once, for the targets that link it
  make -s -j2 CC=clang BUILD="$out/lib" OPT=-O1 \
    SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
    "$out/lib/libmoestream.a"
}

link() { # link TARGET: tools/fuzz/fuzz_TARGET.c over the library
  clang -std=c11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Isrc "${san[@]}" \
    "tools/fuzz/fuzz_$1.c" "$out/lib/libmoestream.a" \
    -ljansson -luring -lpcre2-8 -lmicrohttpd -ledit -lmvec -lm -lpthread -o "$out/fuzz_$1"
}

seed_output() { # model outputs of every format, schemas, tools
  local c=$1 fmt f
  for f in tests/runtime/toolcalls/*.txt; do
    case $(basename "$f") in
    harmony*) fmt=0 ;; qwen3_coder*) fmt=2 ;; qwen3*) fmt=1 ;; deepseek_v3_1*) fmt=4 ;;
    deepseek_v3*) fmt=3 ;; longcat*) fmt=5 ;; glm45*) fmt=6 ;; *) continue ;;
    esac
    { printf "\\x00\\x$(printf %02x $fmt)\\x06"; cat "$f"; } > "$c/parse_$(basename "$f")"
    { printf "\\x01\\x$(printf %02x $fmt)\\x01"; cat "$f"; } > "$c/stream_$(basename "$f")"
  done
  printf '\x02\x03\x00{"type":"object","properties":{"a":{"type":"string","maxLength":5},"b":{"type":"array","items":{"type":"integer"},"minItems":1},"c":{"anyOf":[{"type":"null"},{"type":"number"}]}},"required":["a"]}\xff{"a":"hi","b":[1,2]}' > "$c/schema_object"
  printf '\x02\x00\x00{"type":"string","pattern":"^[a-z]+$"}\xff"abc"' > "$c/schema_pattern"
  printf '\x02\x00\x00{"$defs":{"n":{"type":"object","properties":{"k":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}\xff{"k":{"k":{}}}' > "$c/schema_ref"
  for fmt in 0 1 2 3 4 5 6; do
    { printf "\\x03\\x0$fmt\\x00"; printf '%s' '[{"type":"function","function":{"name":"run","parameters":{"type":"object","properties":{"cmd":{"type":"string"},"n":{"type":"integer"}},"required":["cmd"]}}}]'; printf '\xff'; } > "$c/tools_$fmt"
    { printf "\\x04\\x0$fmt\\x01"; printf '%s' '{"type":"object","properties":{"x":{"type":"boolean"}}}'; } > "$c/answer_$fmt"
  done
}

run() { # run TARGET CORPUS [flags]
  local t=$1 c=$2; shift 2
  echo "== fuzz_$t, $secs s, corpus $c"
  "$out/fuzz_$t" "$c" -max_total_time="$secs" "${common[@]}" "${par[@]}" "$@"
}

targets=$target; [ "$target" = all ] && targets="request output tokenizer jinja template session checkpoint"
for t in $targets; do
  if [ "$t" != request ]; then # a library target: built, linked, its corpus in $c
    library; link "$t"; c="$out/corpus-$t"; mkdir -p "$c"
  fi
  case $t in
  request)
    clang -std=c11 -g -O1 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Iapp "${san[@]}" \
      tools/fuzz/fuzz_request.c app/serve_request.c app/serve_responses_request.c \
      app/serve_messages_request.c app/serve_ollama_request.c -ljansson -o "$out/fuzz_request"
    mkdir -p "$out/corpus"; cp -n tools/fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
    run request "$out/corpus" -dict=tools/fuzz/request.dict -max_len=4096 "$@" ;;
  output)
    seed_output "$c"
    run output "$c" -max_len=4096 "$@" ;;
  tokenizer)
    /usr/bin/python3 tools/fuzz/tokenizer_seeds.py "$c"
    run tokenizer "$c" -max_len=16384 "$@" ;;
  jinja)
    tpl=${MS_TEMPLATES:-../shared/templates}
    for f in "$tpl"/*.jinja tests/runtime/jinja_cases/*.jinja; do
      [ -f "$f" ] || continue
      j=tests/runtime/chat_requests/escapes_in_content.json; [ -f "${f%.jinja}.json" ] && j=${f%.jinja}.json
      { cat "$f"; printf '\xff'; cat "$j"; } > "$c/$(basename "$(dirname "$f")")_$(basename "$f")"
    done
    run jinja "$c" -max_len=65536 "$@" ;;
  template)
    k=0
    for f in tests/runtime/chat_requests/*.json; do
      { printf "\\x$(printf %02x $((k * 37 % 256)))"; cat "$f"; } > "$c/$(basename "$f")"; k=$((k + 1))
    done
    export MS_TEMPLATES=${MS_TEMPLATES:-../shared/templates}
    run template "$c" -max_len=16384 "$@" ;;
  session | checkpoint) # seeded by the target itself, from the fixtures
    export MOESTREAM_FIXTURES=${MOESTREAM_FIXTURES:-../shared/fixtures}
    SEEDS="$c" "$out/fuzz_$t"
    if [ "$t" = session ]; then run session "$c" -malloc_limit_mb=1024 "$@"
    else run checkpoint "$c" -malloc_limit_mb=2048 -max_len=65536 "$@"; fi ;;
  esac
done
