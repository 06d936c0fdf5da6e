#!/usr/bin/env bash
# `run` as people call it: llama.cpp's short forms (-c, -t, -s, --n-predict,
# --prompt, --file) mean what they mean there; -f FILE and "-" (standard
# input) for -p and -f give the same prompt as the text itself; ids are
# written as they are made, and SIGINT ends the answer with status 130 and
# the output kept; an unknown --experts value is refused by bench as by run;
# bench splits each phase's time into attention, experts, head and other,
# and --disk measures the disk as the expert cache reads it.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh run_forms
M=$W/m
text_model "$M"

Q="What is the capital of France?"
printf '%s' "$Q" >"$W/q.txt"
G="-n 6 --temp 0 --ids --ignore-eos"
"$BIN" run "$M" -p "$Q" $G >"$W/ref" 2>/dev/null
for v in "file -f $W/q.txt" "file_long --file $W/q.txt" "prompt_long --prompt" "stdin_p -p -" "stdin_f -f -"; do
  set -- $v; name=$1; shift
  if [ "$name" = prompt_long ]; then out=$("$BIN" run "$M" --prompt "$Q" $G 2>/dev/null)
  else out=$(printf '%s' "$Q" | "$BIN" run "$M" "$@" $G 2>/dev/null); fi
  [ "$out" = "$(cat "$W/ref")" ] && pass "prompt_${name}_same_as_text" ||
    fail "prompt_${name}_same_as_text" "'$out' vs '$(cat "$W/ref")'"
done
out=$("$BIN" run "$M" -p "$Q" -c 512 -t 1 -s 7 --n-predict 6 --temp 0 --ids --ignore-eos --stats 2>&1 >"$W/short")
cmp -s "$W/short" "$W/ref" && printf '%s' "$out" | grep -q "context: 512 tokens" &&
  pass llama_cpp_short_forms || fail llama_cpp_short_forms "$(cat "$W/short") / $out"
out=$("$BIN" run "$M" -p "$Q" -f "$W/q.txt" 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "needs exactly one of -p TEXT, -f FILE or --prompt-ids" &&
  pass two_prompts_refused || fail two_prompts_refused "rc $rc: $out"

# ids reach a pipe as they are made; SIGINT keeps them and exits 130
"$BIN" run "$M" -p "$Q" -n 1000000 --ignore-eos --ids -c 1000000 >"$W/sig" 2>/dev/null & pid=$!
# wait for the first ids (up to 120 s: a slow machine or ASan build takes
# seconds to set up a context of 10^6 tokens), not a fixed time
for _ in $(seq 1200); do [ -s "$W/sig" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
n1=$(wc -c <"$W/sig"); kill -INT $pid; wait $pid; rc=$?
n2=$(wc -c <"$W/sig")
[ "$n1" -gt 0 ] && [ $rc -eq 130 ] && [ "$n2" -ge "$n1" ] && tail -c 1 "$W/sig" | od -c | grep -q '\\n' &&
  pass sigint_keeps_output_exit_130 || fail sigint_keeps_output_exit_130 "rc $rc, $n1 bytes while running, $n2 after"

# a progress line on a terminal (a pseudo-terminal from script(1)), erased
# when the prefill is done; none when stderr is a file; --progress forces it
awk 'BEGIN { for (i = 0; i < 400; i++) printf "word%d ", i }' >"$W/long.txt"
if command -v script >/dev/null 2>&1; then
  printf '%s\n' "\"$BIN\" run \"$M\" -f \"$W/long.txt\" -n 1 --ids --prefill-span 64" >"$W/pty.sh"
  script -q -c "bash $W/pty.sh" "$W/pty.out" >/dev/null 2>&1
  grep -a -q $'prefill: [0-9]* / [0-9]* tokens (.* tok/s)\r\033\[K' "$W/pty.out" &&
    pass progress_line_on_a_terminal || fail progress_line_on_a_terminal "$(cat -v "$W/pty.out" | head -5)"
else
  echo "SKIP progress_line_on_a_terminal: no script(1) to make a pseudo-terminal"
fi
"$BIN" run "$M" -f "$W/long.txt" -n 1 --ids --prefill-span 64 >/dev/null 2>"$W/err.txt"
! grep -q 'prefill:' "$W/err.txt" && pass no_progress_into_a_file || fail no_progress_into_a_file "$(cat -v "$W/err.txt")"
"$BIN" run "$M" -f "$W/long.txt" -n 1 --ids --prefill-span 64 --progress >/dev/null 2>"$W/err.txt"
grep -q 'prefill: [0-9]* / [0-9]* tokens' "$W/err.txt" && pass progress_forced || fail progress_forced "$(cat -v "$W/err.txt")"

out=$("$BIN" bench "$M" --experts bogus 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- '--experts expects auto, pagecache or cache, got "bogus"' &&
  pass bench_refuses_unknown_experts || fail bench_refuses_unknown_experts "rc $rc: $out"
# bench splits each phase's time (per token) from the engine's own timers:
# four parts, not all zero, together at most the phase's own ms/token (the
# tiny model's experts can round to 0.0)
out=$("$BIN" bench "$M" --prompt 8 -n 8 2>/dev/null)
for ph in prefill decode; do
  tot=$(printf '%s\n' "$out" | sed -n "s/^| $ph, [0-9]* tokens .*(\([0-9.]*\) ms\/token).*/\1/p")
  split=$(printf '%s\n' "$out" | sed -n "s/^|   $ph: time split, ms\/token *| attn \([0-9.]*\) ([0-9]*%) experts \([0-9.]*\) ([0-9]*%) head \([0-9.]*\) ([0-9]*%) other \([0-9.]*\) .*/\1 \2 \3 \4/p")
  if [ -n "$tot" ] && [ -n "$split" ] &&
    echo "$split $tot" | awk '{ exit !($1 + $2 + $3 + $4 <= $5 + 0.25 && $1 + $2 + $3 + $4 > 0) }'; then
    pass "bench_${ph}_time_split"
  else
    fail "bench_${ph}_time_split" "total '$tot', split '$split': $(printf '%s\n' "$out" | grep "$ph")"
  fi
done
# bench --disk measures the disk the way the expert cache reads it
out=$("$BIN" bench "$M" --prompt 2 -n 2 --disk 8 2>&1)
printf '%s\n' "$out" | grep -Eq '^\| disk read bandwidth +\| [1-9][0-9]* MB/s \(8 experts of [0-9.]+ MB, read as the cache does\)' &&
  printf '%s\n' "$out" | grep -Eq '^\| decode IO floor \(bytes/token / disk\) +\| [0-9.]+ ms/token' &&
  pass bench_disk_probe || fail bench_disk_probe "$(printf '%s\n' "$out" | grep -i disk)"
[ "$fails" -eq 0 ]
