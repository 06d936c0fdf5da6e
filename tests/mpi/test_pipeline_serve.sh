#!/usr/bin/env bash
# serve --pipeline over MPI, end to end: `mpirun -np 2 moestream-mpi serve
# --pipeline --parallel 2` answers the same concurrent completions and chat
# requests (greedy) with the same text as the one-process server, its
# decode steps batched across slots (micro-batches in flight); chat gives
# one process's answers; prompt caches on disk (each stage its part) give
# the answer of no cache, and a lost part is named and costs only time;
# SIGTERM to rank 0 stops the job cleanly, to mpirun leaves no rank behind.
# A tiny gpt_oss over the released o200k tokenizer. Skipped, saying so,
# where there is no MPI build.
cd "$(dirname "$0")/../.." && . tests/init.sh pipeline_serve
MPI=${MS_BUILD:-build}/moestream-mpi
if [ ! -x "$MPI" ] || ! command -v mpirun >/dev/null; then
  echo "SKIP pipeline_serve: no $MPI or mpirun (mpicc absent, or a sanitizer build): not tested here"
  exit 0
fi
. tests/server/lib.sh
trap 'kill_servers' EXIT
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
M=$W/model
text_model "$M"
# start_server runs "$BIN" serve ...: for the pipeline, a launcher in its place
printf '#!/bin/sh\nexec mpirun --oversubscribe --allow-run-as-root -np 2 %s "$@" --pipeline\n' \
  "$(readlink -f "$MPI")" >"$W/mpi2"
chmod +x "$W/mpi2"

start_server one "$M" --parallel 2 --threads 1 || exit 1
BIN=$W/mpi2 start_server two "$M" --parallel 2 --threads 1 --stats || exit 1
grep -q "pipeline of 2 stages (layers 0-[0-9]*, [0-9]*-2)" "$W/two.log" &&
  pass pipeline_serve_starts || fail pipeline_serve_starts "$(head -5 "$W/two.log")"

# ask URL NAME: four requests at once (three completions, one streamed chat)
ask() {
  local url=$1 name=$2 i
  for i in 0 1 2; do
    curl -s -m 120 "$url/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"Story $i: once upon a time\", \"max_tokens\": $((10 + 3 * i)), \"temperature\": 0}" \
      >"$W/$name.c$i" &
  done
  curl -s -N -m 120 "$url/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 14, "temperature": 0, "stream": true}' \
    >"$W/$name.chat" &
  wait $(jobs -p | grep -v "^${one_pid:-x}$" | grep -v "^${two_pid:-x}$") 2>/dev/null
}
texts() { # NAME: the completions' texts and the chat's streamed content, one per line
  local name=$1 i
  for i in 0 1 2; do
    $PY -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["text"]))' "$W/$name.c$i" ||
      echo "no text in $name.c$i"
  done
  $PY - "$W/$name.chat" <<'P'
import json, sys
out = []
for line in open(sys.argv[1]):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        d = json.loads(line[6:])["choices"][0]["delta"]
        out.append(d.get("content") or "")
print(json.dumps("".join(out)))
P
}
for round in 1 2; do
  ask "$one_url" one
  ask "$two_url" two
  texts one >"$W/one.txt" 2>&1
  texts two >"$W/two.txt" 2>&1
  if [ "$(wc -l <"$W/one.txt")" -eq 4 ] && ! grep -q '^""$\|no text' "$W/one.txt" &&
     cmp -s "$W/one.txt" "$W/two.txt"; then
    pass "pipeline_serve_same_answers_round$round"
  else
    fail "pipeline_serve_same_answers_round$round" "$(diff "$W/one.txt" "$W/two.txt" | head -6 | tr '\n' ' ')"
  fi
done
curl -s -m 10 "$two_url/metrics" >"$W/two.metrics"
mean=$(sed -n 's/^moestream_decode_rows_total \([0-9.e+]*\)$/\1/p' "$W/two.metrics")
steps=$(sed -n 's/^moestream_decode_steps_total \([0-9.e+]*\)$/\1/p' "$W/two.metrics")
if [ -n "$mean" ] && [ -n "$steps" ] && $PY -c "import sys; sys.exit(not float('$mean') > float('$steps'))"; then
  pass "pipeline_serve_decode_batched ($mean rows in $steps steps)"
else
  fail pipeline_serve_decode_batched "rows ${mean:-?}, steps ${steps:-?}"
fi

# gone NAME PID: mpirun PID and every rank of it exit within 10 s; "" or why not
gone() {
  local i
  for i in $(seq 1 100); do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$2" 2>/dev/null; then
    kill -KILL "$2"; echo "mpirun still running 10 s after the signal"; return
  fi
  sleep 0.5
  pgrep -f "$W/model" | grep -v "^$one_pid$" | grep -q . && echo "left: $(pgrep -af "$W/model")"
}
# SIGTERM to rank 0 (what serve's own stop is): it stops cleanly, tells rank 1,
# and the job ends with status 0
r0=
for p in $(pgrep -f "moestream-mpi serve $W/model"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=0" && r0=$p
done
if [ -z "$r0" ]; then
  fail pipeline_serve_sigterm_rank0 "no rank 0 process found"
  kill -TERM "$two_pid"
else
  kill -TERM "$r0"
  why=$(gone two "$two_pid")
  wait "$two_pid"; rc=$?
  if [ -z "$why" ] && [ $rc -eq 0 ] && grep -q "SIGTERM, stopping" "$W/two.log" &&
     tail -1 "$W/two.log" | grep -q "^serve: [0-9]* decode steps"; then
    pass pipeline_serve_sigterm_rank0
  else
    fail pipeline_serve_sigterm_rank0 "status $rc ${why}: $(tail -3 "$W/two.log" | tr '\n' ' ')"
  fi
fi
two_pid=
stop_server one

# chat over two ranks: the turns come through mpirun's stdin to rank 0, the
# answers (greedy ids) are those of one process
printf 'Hello there\nAnd again\n' | timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 \
  "$MPI" chat "$M" -n 6 --temp 0 --ids --pipeline >"$W/chat2.ids" 2>"$W/chat2.err"
printf 'Hello there\nAnd again\n' | "$BIN" chat "$M" -n 6 --temp 0 --ids >"$W/chat1.ids" 2>/dev/null
if [ "$(wc -l <"$W/chat1.ids")" -eq 2 ] && cmp -s "$W/chat1.ids" "$W/chat2.ids"; then
  pass pipeline_chat_same_ids
else
  fail pipeline_chat_same_ids "$(tail -2 "$W/chat2.err" | tr '\n' ' ')"
fi

# prompt caches on disk over two ranks: A's conversation leaves its only
# slot for B and C, each stage writing its part, and comes back from the
# files, with the answer it gets from one process with no cache at all
BIN=$W/mpi2 start_server pd "$M" --parallel 1 --threads 1 --prompt-cache-disk 64M \
  --prompt-cache-dir "$W/pcd" || exit 1
read -r reuse_d ans_d <<<"$(convo_answer "$pd_url" long)"
parts=$(ls "$W/pcd"/*.kv.stage1 2>/dev/null | wc -l)
curl -s "$pd_url/metrics" >"$W/pd.metrics"
# SIGTERM to mpirun (Ctrl-C at its terminal): every rank goes, no hang (mpirun
# itself exits 1 after a signal whatever its ranks did)
kill -TERM "$pd_pid"
why=$(gone pd "$pd_pid")
wait "$pd_pid" 2>/dev/null; pd_pid=
[ -z "$why" ] && pass pipeline_serve_sigterm_mpirun_stops_all || fail pipeline_serve_sigterm_mpirun_stops_all "$why"
start_server plain "$M" --parallel 1 || exit 1
read -r reuse_n ans_n <<<"$(convo_answer "$plain_url" long)"
stop_server plain
loaded=$(sed -n 's/^moestream_prompt_cache_disk_loaded_total \([0-9]*\)/\1/p' "$W/pd.metrics")
if [ "${reuse_d:-0}" -ge 32 ] && [ "${reuse_n:-0}" -lt "${reuse_d:-0}" ] && [ "${loaded:-0}" -ge 1 ] &&
   [ -n "$ans_d" ] && [ "$ans_d" = "$ans_n" ]; then
  pass "pipeline_prompt_cache_on_disk (reused $reuse_d from disk, $reuse_n without; stage 1 parts: $parts)"
else
  fail pipeline_prompt_cache_on_disk "reused ${reuse_d:-?} (without ${reuse_n:-?}), loaded ${loaded:-?}, parts $parts, answers $ans_d / $ans_n; $(grep -i 'prompt cache' "$W/pd.log" | tail -2)"
fi
# B and C stay on disk, each with its stage part; A's went with its file
files=$(ls "$W/pcd"/*.kv 2>/dev/null | wc -l)
[ "$files" -eq 2 ] && [ "$parts" -eq 2 ] && pass pipeline_prompt_cache_parts_with_their_files ||
  fail pipeline_prompt_cache_parts_with_their_files "$files files, $parts stage 1 parts: $(ls "$W/pcd")"
# a stage's part gone: the returning conversation is evaluated afresh (its
# answer unchanged), the failure said with the rank named
B="Conversation B: bananas, where they grow best, how they are shipped across the oceans, ripened in warehouses and sold in the markets all the year round. And pears?"
for f in "$W/pcd"/*.kv.stage1; do rm -f "$f"; done
BIN=$W/mpi2 start_server pd2 "$M" --parallel 1 --threads 1 --prompt-cache-disk 64M \
  --prompt-cache-dir "$W/pcd" || exit 1
got=$(curl -s -m 120 "$pd2_url/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"prompt\": \"$B\", \"max_tokens\": 8, \"temperature\": 0}" |
  $PY -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["text"]))')
want=$("$BIN" run "$M" -p "$B" --raw -n 8 --temp 0 2>/dev/null |
  $PY -c 'import json,sys; t = sys.stdin.read(); print(json.dumps(t[:-1] if t.endswith("\n") else t))')
kill -TERM "$pd2_pid"; gone pd2 "$pd2_pid" >/dev/null; wait "$pd2_pid" 2>/dev/null; pd2_pid=
if grep -q "prompt cache .* not loaded: rank 1: stage 1 (layers [0-9]*-2): .*stage1" "$W/pd2.log" &&
   [ -n "$got" ] && [ "$got" = "$want" ]; then
  pass pipeline_prompt_cache_lost_part_named
else
  fail pipeline_prompt_cache_lost_part_named "answer $got vs $want: $(grep -i 'prompt cache' "$W/pd2.log" | tail -2 | tr '\n' ' ')"
fi
[ $fails -eq 0 ]
