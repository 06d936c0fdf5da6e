#!/usr/bin/env bash
# moestream beside llama.cpp on the same weights (MISSION.md, "Peers"):
# llama.cpp's CPU build as node-llama-cpp ships it prebuilt (bench/peer/,
# installed by tools/setup-node.sh), on a GGUF that tools/peer/gguf_from_hf.py
# writes from the same checkpoint folder (BF16 stays BF16, MXFP4 stays MXFP4;
# tests/bench/test_peer.sh checks it against the upstream reference). Same
# prompt ids, same threads, greedy; the two engines take turns within each
# round, in alternating order. Prints one line per run, then min / median /
# max per engine and thread count, and each run's decode against the memory
# floor of the same round (bytes read per token, counted by moestream, over
# the best read stream that moestream's --floor sampled in that round).
#
#   bench/peer.sh MODEL_DIR          a gpt_oss or qwen3_moe checkpoint, e.g. /tmp/synth/gpt-oss-20b
#
# Env: ROUNDS (3), PROMPT (64), N (32), THREADS ("2 1"), PRECISIONS ("exact
# int8": moestream's; int8 is llama.cpp's arithmetic for MXFP4), GGUF (default
# MODEL_DIR.gguf, written when absent), LIMIT (e.g. 6G: every run under
# ../shared/tools/memlimit LIMIT with its own files evicted first, cold;
# without it the runs are resident, each engine's files read into the page
# cache before its run, since both copies of a 13.8 GB model do not fit this
# 24 GB machine's cache together), PEER_TIMEOUT (900: seconds a llama.cpp run
# may take; past it, and when it is killed, its row says so).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
MODEL=${1:?usage: bench/peer.sh MODEL_DIR}
ROUNDS=${ROUNDS:-3}
PROMPT=${PROMPT:-64}
N=${N:-32}
THREADS=${THREADS:-"2 1"}
PRECISIONS=${PRECISIONS:-"exact int8"}
GGUF=${GGUF:-${MODEL%/}.gguf}
LIMIT=${LIMIT:-}
MEMLIMIT=${MEMLIMIT:-../shared/tools/memlimit}
PEER_TIMEOUT=${PEER_TIMEOUT:-900}

[ -x ./moestream ] || make -j2 >/dev/null
[ -d bench/peer/node_modules/node-llama-cpp ] || tools/setup-node.sh >&2
[ -f "$GGUF" ] || { echo "writing $GGUF" >&2; /usr/bin/python3 tools/peer/gguf_from_hf.py "$MODEL" "$GGUF"; }
shards=("$MODEL"/*.safetensors)
VOCAB=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$MODEL/config.json")

# run FILES... -- CMD: resident (files read first) or under the limit (files evicted)
run() {
  local files=()
  while [ "$1" != -- ]; do files+=("$1"); shift; done
  shift
  if [ -n "$LIMIT" ]; then
    "$MEMLIMIT" "$LIMIT" --evict "${files[@]}" -- "$@"
  else
    cat "${files[@]}" >/dev/null
    "$@"
  fi
}

out=$(mktemp)
trap 'rm -f "$out" "$out.err"' EXIT
one_moestream() { # round threads precision
  local prec=--precision=$3
  run "${shards[@]}" -- ./moestream bench "$MODEL" --prompt "$PROMPT" -n "$N" --threads "$2" \
      --floor $prec 2>/dev/null | bench_figures |
    awk -v r="$1" -v t="$2" -v e="moestream $3" '
      { printf "| %5s | %3s | %-18s | %13s | %13s | %9s | %8s |\n", r, t, e, $1, $2, $3, $4 }'
}
one_llama() { # round threads
  local line rc=0
  line=$(run "$GGUF" -- timeout "$PEER_TIMEOUT" \
         node bench/peer/llama.mjs bench "$GGUF" "$2" "$PROMPT" "$N" "$VOCAB" 2>"$out.err") || rc=$?
  if [ "$rc" -ne 0 ]; then
    # under a limit llama.cpp's repacked MXFP4 copy (anonymous memory) gets it killed
    printf "| %5s | %3s | %-18s | %29s | %9s | %8s |\n" "$1" "$2" llama.cpp \
      "failed: exit $rc$([ "$rc" -eq 137 ] && echo ', killed')$([ "$rc" -eq 124 ] &&
                          echo ", past ${PEER_TIMEOUT}s")" - -
    tail -3 "$out.err" | sed 's/^/    llama.cpp: /' >&2
    return
  fi
  echo "$line" | awk -v r="$1" -v t="$2" '
      { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
      END { printf "| %5s | %3s | %-18s | %13s | %13s | %9s | %8s |\n", r, t, "llama.cpp " v["release"],
                   v["prefill_tok_s"], v["decode_ms_token"], "-", "-" }'
}

echo "model $MODEL; llama.cpp on $GGUF; prompt $PROMPT, $N decoded${LIMIT:+; under memlimit $LIMIT, cold}"
printf "| %5s | thr | %-18s | prefill tok/s | decode ms/tok | read GB/s | MB/token |\n" round engine
printf "|-------|-----|--------------------|---------------|---------------|-----------|----------|\n"
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    if [ $((r % 2)) -eq 1 ]; then
      for p in $PRECISIONS; do one_moestream "$r" "$t" "$p"; done | tee -a "$out"
      one_llama "$r" "$t" | tee -a "$out"
    else
      one_llama "$r" "$t" | tee -a "$out"
      for p in $PRECISIONS; do one_moestream "$r" "$t" "$p"; done | tee -a "$out"
    fi
  done
done

echo
echo "min / median / max per engine (decode: ms/token and x the floor of its round: MB/token over"
echo "the best read stream moestream sampled in that round at that thread count):"
awk -F'|' '/failed: / { next }
           { r = $2; t = $3; gsub(/ /, "", r); gsub(/ /, "", t)
             if ($7 + 0 > best[r "|" t]) best[r "|" t] = $7 + 0
             if ($8 + 0 > 0) mb = $8 + 0
             line[++n] = $0 }
  END { for (i = 1; i <= n; i++) { split(line[i], f, "|"); r = f[2]; t = f[3]; gsub(/ /, "", r); gsub(/ /, "", t)
          e = f[4]; gsub(/^ +| +$/, "", e); d = f[6] + 0; x = best[r "|" t] > 0 ? d / (mb / best[r "|" t]) : 0
          printf "%s|%s|%s|%s|%.2f\n", t, e, f[5] + 0, d, x } }' "$out" | sort |
  awk -F'|' '{ k = $1 "|" $2; pf[k] = pf[k] " " $3; d[k] = d[k] " " $4; x[k] = x[k] " " $5 }
    END { for (k in d) print k "#" pf[k] "#" d[k] "#" x[k] }' | sort |
  while IFS='#' read -r k pf d x; do
    printf "  %-3s %-22s prefill %-22s tok/s  decode %-22s ms  x floor %s\n" "${k%%|*}" "${k#*|}" \
      "$(mmm $pf)" "$(mmm $d)" "$(mmm $x)"
  done
