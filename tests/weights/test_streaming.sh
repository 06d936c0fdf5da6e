#!/usr/bin/env bash
# Placement decides speed, never math: logits are bit-identical between the
# page-cache policy and the engine cache (down to a budget of top-k experts,
# forcing eviction), across I/O backends and thread counts, compute thread
# counts, prefetch on/off, buffered vs O_DIRECT reads, and prompt blocking.
# Also: synth writes a loadable checkpoint, replay reports the optimum.
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
           "cache_large --experts cache --ram 64M --feed 2" \
           "pagecache_noprefetch --experts pagecache --no-prefetch --feed 1"; do
    set -- $v; name=$1; shift
    if "$BIN" logits "$C" --prompt-ids "$W/p.ids" --out "$W/x.f32" "$@" 2>"$W/err"; then
      check ${preset}_${name}_bit_identical cmp "$W/x.f32" "$W/ref.f32"
    else
      fail ${preset}_${name}_bit_identical "$(tail -2 "$W/err" | tr '\n' ' ')"
    fi
  done
  # greedy decode through a forced-eviction cache with prefetch == page cache
  "$BIN" run "$C" --prompt-ids "$W/p.ids" -n 24 --temp 0 --ids --ignore-eos --experts pagecache >"$W/g1" 2>/dev/null
  "$BIN" run "$C" --prompt-ids "$W/p.ids" -n 24 --temp 0 --ids --ignore-eos --experts cache --cache-slots $K \
    --trace "$W/$preset.trace" --stats >"$W/g2" 2>"$W/stats"
  check ${preset}_greedy_cache_equals_pagecache cmp "$W/g1" "$W/g2"
  if grep -q "prefetch: accuracy" "$W/stats" && grep -q "experts: .* hit rate" "$W/stats"; then
    pass ${preset}_stats_report_cache
  else
    fail ${preset}_stats_report_cache "$(cat "$W/stats")"
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
