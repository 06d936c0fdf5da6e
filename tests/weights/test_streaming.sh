#!/usr/bin/env bash
# Placement decides speed, never math: logits are bit-identical between the
# page-cache policy and the engine cache (down to a budget of top-k experts,
# forcing eviction), across I/O backends and thread counts, compute thread
# counts, prefetch on/off, buffered vs O_DIRECT reads, and prompt blocking.
# Also: synth writes a loadable checkpoint, replay reports the optimum, the
# per-expert usage is kept across runs (and changes no token).
# Prints "PASS name" / "FAIL name: why"; exits 1 when any case fails.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); trap 'rm -rf "$MS_TMP"' EXIT; fi
W=$MS_TMP/streaming
rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
check() {
  local name=$1; shift
  local out
  if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$(printf '%s' "$out" | tail -3 | tr '\n' ' ')"; fi
}
# same_logits NAME MODEL IDS REF ARGS...: logits with ARGS are REF's, bit for bit
same_logits() {
  local name=$1 m=$2 ids=$3 ref=$4; shift 4
  if "$BIN" logits "$m" --prompt-ids "$ids" --out "$W/x.f32" "$@" 2>"$W/err"; then
    check "$name" cmp "$W/x.f32" "$ref"
  else
    fail "$name" "$(tail -2 "$W/err" | tr '\n' ' ')"
  fi
}

for cfg in "gpt_oss tiny 3" "gpt_oss tiny2 4"; do
  set -- $cfg; fam=$1; preset=$2; seed=$3
  C=$W/$preset
  $PY tools/tinyckpt/$fam.py --out "$C" --preset "$preset" --seed "$seed" >/dev/null 2>&1 ||
    { fail ${preset}_generate "generator failed"; continue; }
  K=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("num_experts_per_tok") or c["experts_per_token"])' "$C/config.json")
  awk 'BEGIN { for (i = 0; i < 40; i++) printf "%d ", (i * 53 + 7) % 200; print "" }' >"$W/p.ids"
  "$BIN" logits "$C" --prompt-ids "$W/p.ids" --out "$W/ref.f32" --experts pagecache 2>/dev/null
  for v in "cache_topk_budget --experts cache --cache-slots $K" \
           "cache_topk_feed1 --experts cache --cache-slots $K --feed 1" \
           "cache_topk_feed5_threads1 --experts cache --cache-slots $K --feed 5 --threads 1" \
           "cache_iothreads1 --experts cache --cache-slots $K --io-threads 1 --feed 1" \
           "cache_iothreads3 --experts cache --cache-slots $K --io-threads 3 --feed 3" \
           "cache_buffered --experts cache --cache-slots $K --buffered --feed 1" \
           "cache_noprefetch --experts cache --cache-slots $K --no-prefetch --feed 1" \
           "cache_prefetch_early --experts cache --cache-slots $((2 * K)) --prefetch-early 2 --feed 1" \
           "cache_large --experts cache --ram 64M --feed 2" \
           "pagecache_noprefetch --experts pagecache --no-prefetch --feed 1"; do
    set -- $v; name=$1; shift
    same_logits ${preset}_${name}_bit_identical "$C" "$W/p.ids" "$W/ref.f32" "$@"
  done
  # greedy decode through a forced-eviction cache with prefetch == page cache
  "$BIN" run "$C" --prompt-ids "$W/p.ids" -n 24 --temp 0 --ids --ignore-eos --experts pagecache >"$W/g1" 2>/dev/null
  "$BIN" run "$C" --prompt-ids "$W/p.ids" -n 24 --temp 0 --ids --ignore-eos --experts cache --cache-slots $K \
    --trace "$W/$preset.trace" --stats >"$W/g2" 2>"$W/stats"
  check ${preset}_greedy_cache_equals_pagecache cmp "$W/g1" "$W/g2"
  if grep -q "prefetch: accuracy" "$W/stats" && grep -q "experts: .* hits (no read issued), .* prefetch hits, .* misses" "$W/stats"; then
    pass ${preset}_stats_report_cache
  else
    fail ${preset}_stats_report_cache "$(cat "$W/stats")"
  fi
  # the learned placement: run keeps the per-expert counts under
  # $XDG_STATE_HOME; the next run reads them (said on stderr) and answers
  # the same tokens; --expert-usage none and bench keep nothing
  S=$W/state-$preset
  for i in 1 2; do
    XDG_STATE_HOME=$S "$BIN" run "$C" --prompt-ids "$W/p.ids" -n 24 --temp 0 --ids --ignore-eos \
      --experts cache --cache-slots $K >"$W/u$i" 2>"$W/u$i.err"
  done
  usage=$(ls "$S"/moestream/expert-usage/$preset-* 2>/dev/null)
  if [ -n "$usage" ] && head -1 "$usage" | grep -q "^moestream expert usage 1 layers " &&
     grep -q "expert usage from $usage" "$W/u2.err" && ! grep -q "expert usage from" "$W/u1.err"; then
    pass ${preset}_expert_usage_kept
  else
    fail ${preset}_expert_usage_kept "file '$usage'; second run: $(tail -2 "$W/u2.err" | tr '\n' ' ')"
  fi
  check ${preset}_expert_usage_same_tokens cmp "$W/g1" "$W/u2"
  S0=$W/state0-$preset
  XDG_STATE_HOME=$S0 "$BIN" run "$C" --prompt-ids "$W/p.ids" -n 4 --experts cache --cache-slots $K \
    --expert-usage none >/dev/null 2>&1
  XDG_STATE_HOME=$S0 "$BIN" bench "$C" --prompt 8 -n 4 --experts cache --cache-slots $K >/dev/null 2>&1
  if [ -z "$(ls -A "$S0/moestream/expert-usage" 2>/dev/null)" ]; then
    pass ${preset}_expert_usage_none_and_bench_keep_nothing
  else
    fail ${preset}_expert_usage_none_and_bench_keep_nothing "$(ls "$S0/moestream/expert-usage")"
  fi
  # the replay's optimum is an upper bound of the other policies
  out=$("$BIN" replay "$W/$preset.trace" --slots "$K" 2>&1)
  if printf '%s' "$out" | awk '{ for (i = 1; i <= NF; i++) if ($i == "hit") v[$(i-1)] = $(i+1) + 0 }
       END { exit !(v["policy"] <= v["(Belady)"] + 1e-9 && v["LRU"] <= v["(Belady)"] + 1e-9 && v["(Belady)"] > 0) }'; then
    pass ${preset}_replay_optimum_bounds
  else
    fail ${preset}_replay_optimum_bounds "$out"
  fi
done

# The replay's policies on a trace worked by hand: A B A C A B A D in one
# layer of four experts, two slots. LRU and Belady both keep A and lose B to
# C (3 hits); the best fixed set keeps A and B and reads C and D through (A
# 3 hits after its first read, B 1: 4 of 8).
{ echo "# moestream expert trace v1 layers=1 experts=4 slot_bytes=4096 expert_bytes=4096 slots=2"
  for e in 0 1 0 2 0 1 0 3; do echo "B 0 $e"; done; } >"$W/hand.trace"
out=$("$BIN" replay "$W/hand.trace" 2>&1)
case "$out" in
  *"LRU hit 37.5%"*"fixed set hit 50.0%"*"optimal (Belady) hit 37.5%"*)
    pass replay_hand_trace ;;
  *) fail replay_hand_trace "$out" ;;
esac

# Prefill spans: a call runs each layer over the whole span (up to the
# memory-sized --prefill-span) before the next layer. The logits of a
# 700-token prompt are bit-identical between one span, blocks of 256 (the
# attention block), spans of 100, token-by-token feeding and a cache too
# small for two layers; and one span asks each layer for its experts once
# where blocks of 256 ask three times (the trace's batches).
awk 'BEGIN { for (i = 0; i < 700; i++) printf "%d ", (i * 53 + 7) % 200; print "" }' >"$W/p700.ids"
for cfg in "gpt_oss tiny 5" "qwen3_moe tiny2 6" "deepseek_v3 tiny 7" "longcat_flash tiny 8"; do
  set -- $cfg; fam=$1; preset=$2; seed=$3
  C=$W/span_$fam
  $PY tools/tinyckpt/$fam.py --out "$C" --preset "$preset" --seed "$seed" >/dev/null 2>&1 ||
    { fail ${fam}_span_generate "generator failed"; continue; }
  E=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("num_local_experts") or c.get("n_routed_experts") or c.get("num_experts"))' "$C/config.json")
  "$BIN" logits "$C" --prompt-ids "$W/p700.ids" --out "$W/span_ref.f32" --feed 1 2>"$W/err" ||
    { fail ${fam}_span_reference "$(tail -2 "$W/err")"; continue; }
  for v in "whole_prompt" "blocks_of_256 --prefill-span 256" "spans_of_100 --prefill-span 100" \
           "cache_of_one_layer --experts cache --cache-slots $E" \
           "cache_of_one_layer_blocks --experts cache --cache-slots $E --prefill-span 256"; do
    set -- $v; name=$1; shift
    same_logits ${fam}_span_${name}_equals_token_by_token "$C" "$W/p700.ids" "$W/span_ref.f32" "$@"
  done
  [ "$fam" = longcat_flash ] && continue # its ScMoE loop runs blocks (max_batch per call)
  "$BIN" logits "$C" --prompt-ids "$W/p700.ids" --out "$W/span_x.f32" --experts cache \
    --cache-slots "$E" --trace "$W/span.trace" 2>/dev/null
  "$BIN" logits "$C" --prompt-ids "$W/p700.ids" --out "$W/span_x.f32" --experts cache \
    --cache-slots "$E" --trace "$W/blocks.trace" --prefill-span 256 2>/dev/null
  moe=$(grep -c '^B ' "$W/span.trace"); blk=$(grep -c '^B ' "$W/blocks.trace")
  layers=$(awk '/^B / { s[$2] = 1 } END { print length(s) }' "$W/span.trace")
  [ "$moe" -eq "$layers" ] && [ "$blk" -eq $((3 * layers)) ] &&
    pass ${fam}_span_fetches_each_layer_once ||
    fail ${fam}_span_fetches_each_layer_once "span: $moe batches, blocks: $blk, MoE layers: $layers"
done

# 4000 positions with 6 experts, 2 per position: ~1300 rows per expert, so
# an expert's rows go through its FFN in several chunks (1024 rows at most)
C=$W/span_gpt_oss
awk 'BEGIN { for (i = 0; i < 4000; i++) printf "%d ", (i * 53 + 7) % 200; print "" }' >"$W/p4000.ids"
"$BIN" logits "$C" --prompt-ids "$W/p4000.ids" --out "$W/span_ref.f32" --feed 1 2>/dev/null
for v in "whole_prompt" "blocks_of_256 --prefill-span 256" "cache_of_one_layer --experts cache --cache-slots 6"; do
  set -- $v; name=$1; shift
  same_logits gpt_oss_span4000_${name}_equals_token_by_token "$C" "$W/p4000.ids" "$W/span_ref.f32" "$@"
done

# synth: a config from the released set, tiny dimensions, passes L0 and runs
C=$W/tiny
$PY - "$C/config.json" "$W/synth_cfg.json" <<'EOF'
import json, sys
json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"))
EOF
if "$BIN" synth --config "$W/synth_cfg.json" --out "$W/synth" --shard-size 100K 2>"$W/err"; then
  check synth_inspect_passes "$BIN" inspect "$W/synth"
  check synth_layout_like_release $PY tools/tinyckpt/check_layout.py "$W/synth"
  "$BIN" run "$W/synth" --prompt-ids "$W/p.ids" -n 4 --temp 0 --ids >"$W/s.out" 2>"$W/err"
  if [ "$(wc -w <"$W/s.out")" -eq 4 ]; then pass synth_runs; else fail synth_runs "$(cat "$W/err")"; fi
  n=$(ls "$W/synth"/model-*.safetensors | wc -l)
  [ "$n" -gt 1 ] && [ -f "$W/synth/model-00000-of-0000$((n - 1)).safetensors" ] &&
    pass synth_shards_named_like_release || fail synth_shards_named_like_release "$(ls "$W/synth")"
else
  fail synth_inspect_passes "$(tail -2 "$W/err")"
fi
# synth never overwrites by accident nor writes through a link
mkdir -p "$W/busy"; echo mine >"$W/busy/notes.txt"
out=$("$BIN" synth --config "$W/synth_cfg.json" --out "$W/busy" --shard-size 100K 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q "busy is not empty (it holds notes.txt).*--force" &&
  [ "$(cat "$W/busy/notes.txt")" = mine ] && [ ! -f "$W/busy/config.json" ] &&
  pass synth_refuses_non_empty_folder || fail synth_refuses_non_empty_folder "rc=$rc $out"
mkdir -p "$W/linked"; echo precious >"$W/target.json"; ln -s "$W/target.json" "$W/linked/config.json"
if "$BIN" synth --config "$W/synth_cfg.json" --out "$W/linked" --shard-size 100K --force 2>"$W/err" &&
   [ "$(cat "$W/target.json")" = precious ] && [ ! -L "$W/linked/config.json" ] &&
   "$BIN" inspect "$W/linked" >/dev/null 2>&1 && ! ls -a "$W/linked" | grep -q partial; then
  pass synth_force_replaces_links_not_targets
else
  fail synth_force_replaces_links_not_targets "$(cat "$W/err") target: $(cat "$W/target.json") $(ls -la "$W/linked" | head -5)"
fi
out=$("$BIN" synth --like no-such-model --out "$W/x" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q 'no built-in configuration "no-such-model" (have: .*gpt-oss-20b' &&
  pass synth_unknown_name_refused || fail synth_unknown_name_refused "rc=$rc $out"

[ "$fails" -eq 0 ]
