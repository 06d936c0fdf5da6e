#!/usr/bin/env bash
# --pipeline over MPI (moestream-mpi, `make mpi`), with mpirun on this one
# machine: every family's upstream fixture and the tiny L1 checkpoints give
# bit-identical logits and greedy ids with 1, 2 and 3 ranks, with the page
# cache and with an expert cache of a few slots per rank (forced eviction:
# what a memory limit per rank makes the engine do); explicit --stages; a
# bad --stages and a rank that cannot open its stage stop the job with the
# rank named, never a hang; every rank under its own memory limit (a
# cgroup each, shared/tools/memlimit). Skipped, saying so, where there is
# no MPI build (no mpicc, or the sanitizer run).
cd "$(dirname "$0")/../.." && . tests/init.sh pipeline
MPI=${MS_BUILD:-build}/moestream-mpi
FIX=${MOESTREAM_FIXTURES:-../shared/fixtures}
if [ ! -x "$MPI" ] || ! command -v mpirun >/dev/null; then
  echo "SKIP pipeline: no $MPI or mpirun (mpicc absent, or a sanitizer build): not tested here"
  exit 0
fi
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mrun() { local np=$1; shift; timeout 120 mpirun --oversubscribe --allow-run-as-root -np "$np" "$@"; }
PRE=() # what each rank runs under (memlimit)
# shared/tools/memlimit (a cgroup per rank), where this machine allows it
ML=""
for m in ../shared/tools/memlimit /work/shared/tools/memlimit; do [ -x "$m" ] && { ML=$m; break; }; done
[ -n "$ML" ] && ! "$ML" 64M -- true >/dev/null 2>&1 && ML=""
[ -n "$ML" ] || echo "SKIP pipeline_memlimit_cases: no usable shared/tools/memlimit here (it needs the repository's ../shared and cgroups)"

# same NAME DIR NP [OPTS...]: logits and 8 greedy ids of NP ranks == one process
same() {
  local name=$1 dir=$2 np=$3 out
  shift 3
  if ! out=$(mrun "$np" "${PRE[@]}" "$MPI" logits "$dir" --prompt-ids "$W/p.ids" --out "$W/$name.f32" \
             --pipeline --threads 1 "$@" 2>&1); then
    fail "$name" "logits: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"; return
  fi
  mrun "$np" "${PRE[@]}" "$MPI" run "$dir" --prompt-ids "$W/p.ids" -n 8 --temp 0 --ids --ignore-eos \
    --pipeline --threads 1 "$@" >"$W/$name.ids" 2>"$W/err"
  if cmp -s "$W/$name.f32" "$W/ref.f32" && [ -s "$W/ref.ids" ] &&
     [ "$(xargs <"$W/$name.ids")" = "$(xargs <"$W/ref.ids")" ]; then
    pass "$name"
  else
    fail "$name" "logits or greedy ids differ from one process ($(tail -1 "$W/err"))"
  fi
}

models=()
for f in gpt_oss qwen3_moe qwen3_moe_fp8 deepseek_v3 longcat_flash longcat_flash_fp8; do
  models+=("fixture_$f:$FIX/$f")
done
for g in gpt_oss qwen3_moe deepseek_v3 longcat_flash glm4_moe; do
  if $PY tools/tinyckpt/$g.py --out "$W/tiny_$g" >/dev/null 2>"$W/err"; then
    models+=("tiny_$g:$W/tiny_$g")
  else
    fail "tiny_${g}_written" "$(tail -1 "$W/err")"
  fi
done
for m in "${models[@]}"; do
  name=${m%%:*}; dir=${m#*:}
  V=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$dir/config.json")
  L=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("num_hidden_layers") or c["num_layers"])' "$dir/config.json")
  awk -v v="$V" 'BEGIN { for (i = 0; i < 24; i++) printf "%d ", (i * 37 + 11) % (v - 20); print "" }' >"$W/p.ids"
  "$BIN" logits "$dir" --prompt-ids "$W/p.ids" --out "$W/ref.f32" 2>"$W/err" ||
    { fail "${name}_reference" "$(tail -1 "$W/err")"; continue; }
  "$BIN" run "$dir" --prompt-ids "$W/p.ids" -n 8 --temp 0 --ids --ignore-eos >"$W/ref.ids" 2>"$W/err"
  same "${name}_1rank" "$dir" 1
  same "${name}_2ranks" "$dir" 2
  [ "$L" -ge 3 ] && same "${name}_3ranks" "$dir" 3
  K=$($PY -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c.get("num_experts_per_tok") or c.get("experts_per_token") or c["moe_topk"])' "$dir/config.json")
  same "${name}_2ranks_cache" "$dir" 2 --experts cache --cache-slots "$K" --micro-batches 3
  if [ -n "$ML" ]; then # each rank in a cgroup of 64 MB: its plan sized from its own limit
    PRE=("$ML" 64M --)
    same "${name}_2ranks_memlimit" "$dir" 2 --experts cache --kv f32 --ctx 512
    PRE=()
  fi
done

# explicit stages, and the refusals
dir=$FIX/qwen3_moe
V=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$dir/config.json")
awk -v v="$V" 'BEGIN { for (i = 0; i < 24; i++) printf "%d ", (i * 37 + 11) % (v - 20); print "" }' >"$W/p.ids"
"$BIN" logits "$dir" --prompt-ids "$W/p.ids" --out "$W/ref.f32" 2>/dev/null
"$BIN" run "$dir" --prompt-ids "$W/p.ids" -n 8 --temp 0 --ids --ignore-eos >"$W/ref.ids" 2>/dev/null
same stages_explicit "$dir" 2 --stages 0-2,3-3
# bench's rows per stage: an expert cache of top-k slots on each rank
# evicts on every layer of stage 1 (reads, no hits); the page cache reads
# nothing through the engine and hits every time
out=$(mrun 2 "$MPI" bench "$dir" --pipeline --prompt 8 -n 4 --experts cache --cache-slots 3 2>&1)
if printf '%s' "$out" | grep -q "^|   prefill: stage 0 (layers 0-0) *| waiting for the other stages [0-9.]* ms/token" &&
   printf '%s' "$out" | grep -Eq "^\|   decode: stage 1 \(layers 1-3\) *\| computing [0-9.]+ ms/token, waiting [0-9.]+, read 0\.[1-9][0-9] MB/token, hit rate 0\.0%" &&
   printf '%s' "$out" | grep -q "^| stage 1: experts *| engine cache 0.00 GB: 3 slots"; then
  pass bench_rows_per_stage_cache
else
  fail bench_rows_per_stage_cache "$(printf '%s' "$out" | grep -i "stage\|error" | tr '\n' ' ')"
fi
out=$(mrun 2 "$MPI" bench "$dir" --pipeline --prompt 8 -n 4 --experts pagecache 2>&1)
if printf '%s' "$out" | grep -Eq "^\|   decode: stage 1 \(layers 1-3\) *\| computing [0-9.]+ ms/token, waiting [0-9.]+, read 0\.00 MB/token, hit rate 100\.0%"; then
  pass bench_rows_per_stage_pagecache
else
  fail bench_rows_per_stage_pagecache "$(printf '%s' "$out" | grep -i "stage\|error" | tr '\n' ' ')"
fi

# every rank under its own memory limit (a cgroup each): the expert cache
# sized from it, the same bits; a limit too small for rank 1's stage is
# refused with the numbers, the rank named
if [ -n "$ML" ]; then
  PRE=("$ML" 64M --)
  same memlimit_3ranks "$dir" 3 --experts cache --kv f32 --ctx 512
  PRE=()
  out=$(timeout 120 mpirun --oversubscribe --allow-run-as-root -np 1 "$MPI" logits "$dir" --prompt-ids "$W/p.ids" \
        --out "$W/x.f32" --pipeline : -np 1 "$ML" 40M -- "$MPI" logits "$dir" --prompt-ids "$W/p.ids" \
        --out "$W/x.f32" --pipeline 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
     printf '%s' "$out" | grep -q "rank 1: stage 1 (layers [0-9]*-3): cannot open its stage: [0-9]* MB available .* needs at least [0-9]* MB"; then
    pass memlimit_too_small_on_rank1_named
  else
    fail memlimit_too_small_on_rank1_named "rc=$rc: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
  fi
fi
out=$(mrun 2 "$MPI" logits "$dir" --prompt-ids "$W/p.ids" --out "$W/x.f32" --pipeline --stages 0-1,3-3 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "range 3-3: expected one starting at layer 2"; then
  pass stages_gap_refused
else
  fail stages_gap_refused "rc=$rc: $(printf '%s' "$out" | tail -2 | tr '\n' ' ')"
fi
out=$(mrun 3 "$MPI" logits "$FIX/longcat_flash_fp8" --prompt-ids "$W/p.ids" --out "$W/x.f32" --pipeline 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "the model has 2 layers"; then
  pass more_ranks_than_layers_refused
else
  fail more_ranks_than_layers_refused "rc=$rc: $(printf '%s' "$out" | tail -2 | tr '\n' ' ')"
fi
# rank 1 opens a copy whose last shard is gone (each rank may have its own copy)
mkdir -p "$W/broken"
for f in "$dir"/*; do ln -s "$(readlink -f "$f")" "$W/broken/"; done
rm "$W/broken/model-00003-of-00003.safetensors"
out=$(timeout 120 mpirun --oversubscribe --allow-run-as-root -np 1 "$MPI" logits "$dir" --prompt-ids "$W/p.ids" \
      --out "$W/x.f32" --pipeline : -np 1 "$MPI" logits "$W/broken" --prompt-ids "$W/p.ids" \
      --out "$W/x.f32" --pipeline 2>&1); rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "rank 1: .*model-00003-of-00003.safetensors"; then
  pass missing_shard_on_rank1_named
else
  fail missing_shard_on_rank1_named "rc=$rc: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
fi
# the default binary refuses --pipeline, saying how to get it
out=$("$BIN" logits "$dir" --prompt-ids "$W/p.ids" --out "$W/x.f32" --pipeline 2>&1); rc=$?
if [ $rc -ne 0 ] && printf '%s' "$out" | grep -q "make mpi"; then
  pass default_binary_refuses_pipeline
else
  fail default_binary_refuses_pipeline "rc=$rc: $out"
fi
[ $fails -eq 0 ]
