#!/usr/bin/env bash
# bench --rows N: N sequences decoded together, one pass over the weights a
# step, as serve --parallel N runs its slots. Checked from the output alone,
# never its times: the batched phase decodes N x n tokens; its lm_head (the
# vocab x hidden product, sized from config.json) runs once a step with N
# tokens (1/N dispatches a token) where the one-row decode runs it once a
# token with one; the weight bytes a generated token falls below one row's;
# --rows beyond the engine's rows a pass is refused before any work.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh bench_rows
M=$W/tiny2
$PY tools/tinyckpt/gpt_oss.py --out "$M" --preset tiny2 --seed 4 >/dev/null 2>&1 ||
  { fail tiny_model_written "tools/tinyckpt/gpt_oss.py failed"; exit 1; }
R=3 N=5
"$BIN" bench "$M" --prompt 6 -n $N --rows $R --products >"$W/out" 2>"$W/err" ||
  { fail bench_rows_runs "$(tail -3 "$W/err")"; exit 1; }
if grep -q "^| decode of $R rows together, $((R * N)) tokens " "$W/out"; then
  pass rows_phase_printed
else
  fail rows_phase_printed "no row 'decode of $R rows together, $((R * N)) tokens'"
fi
read -r V D < <($PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["vocab_size"], c["hidden_size"])' "$M/config.json")
# "| bf16 V x D, 1, T | dispatches/token | ..." in the table named by $1
lm_line() { awk -v t="$1" -v k="| bf16 $V x $D, 1, " '
  index($0, "| " t " by product") == 1 { on = 1; next }
  on && /^$/ { on = 0 }
  on && index($0, k) == 1 { print; exit }' "$W/out"; }
one=$(lm_line decode); many=$(lm_line "decode of $R rows together")
case "$one" in "| bf16 $V x $D, 1, 1 | 1.00 |"*) pass one_row_lm_head_a_token ;;
  *) fail one_row_lm_head_a_token "one-row decode's lm_head line: '$one'" ;; esac
want=$(awk -v r=$R 'BEGIN { printf "%.2f", 1 / r }')
case "$many" in "| bf16 $V x $D, 1, $R | $want |"*) pass rows_lm_head_once_a_step ;;
  *) fail rows_lm_head_once_a_step "expected '| bf16 $V x $D, 1, $R | $want |', got '$many'" ;; esac
# "|   3 rows: weight bytes read | 0.2 MB/token (one row: 0.6) |"
read -r a b < <(sed -n "s/^|   $R rows: weight bytes read *| *\([0-9.]*\) MB\/token (one row: \([0-9.]*\)).*/\1 \2/p" "$W/out")
if [ -n "${a:-}" ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(a + 0 < b + 0) }'; then
  pass rows_share_weight_bytes
else
  fail rows_share_weight_bytes "weight MB a token: $R rows '${a:-?}', one row '${b:-?}'"
fi
"$BIN" bench "$M" --rows 1000 >"$W/big" 2>&1
if [ $? -ne 0 ] && grep -q -- "--rows 1000: this engine runs at most [0-9]* rows in a pass" "$W/big" &&
   ! grep -q "^| prefill" "$W/big"; then
  pass rows_beyond_a_pass_refused
else
  fail rows_beyond_a_pass_refused "$(tail -2 "$W/big")"
fi
[ "$fails" -eq 0 ]
