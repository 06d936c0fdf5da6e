#!/usr/bin/env bash
# The pipeline's point, measured (issue 19): K ranks each under its own
# memory limit cache K times the experts of one process under that limit.
#
#   bench/pipeline.sh [MODEL_DIR]    default: a synthetic gpt-oss-20b in /tmp/synth
#
# Per round, the shards evicted before each run (cold): one process under
# `memlimit $LIMIT`, then `mpirun -np $RANKS` with every rank under its own
# `memlimit $LIMIT` (moestream-mpi bench --pipeline). Prints per run decode
# tok/s, bytes read from disk per token and hit rate (over every stage), and
# per stage its layers, computing and waiting per token, bytes and hit rate.
# Env: LIMIT (4G), RANKS (2), ROUNDS (2), PROMPT (16), N (32 decode tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-/tmp/synth/gpt-oss-20b}
LIMIT=${LIMIT:-4G}
RANKS=${RANKS:-2}
ROUNDS=${ROUNDS:-2}
PROMPT=${PROMPT:-16}
N=${N:-32}
MEMLIMIT=${MEMLIMIT:-../shared/tools/memlimit}
BIN=./moestream
MPI=build/moestream-mpi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMPI_MCA_mpi_yield_when_idle=1

[ -x "$BIN" ] || make -j2 >/dev/null
[ -x "$MPI" ] || make -j2 mpi >/dev/null
if [ ! -f "$MODEL/config.json" ]; then
  echo "writing a synthetic gpt-oss-20b to $MODEL (13.8 GB)..."
  mkdir -p "$(dirname "$MODEL")"
  $BIN synth --like gpt-oss-20b --out "$MODEL" --seed 1 --force
fi
shards=("$MODEL"/*.safetensors)
evict() { "$MEMLIMIT" "$LIMIT" --evict "${shards[@]}" -- true; }

# summary FILE LABEL: one row from a bench table (rank 0's rows plus its stages')
summary() {
  /usr/bin/python3 - "$1" "$2" <<'P'
import re, sys
t = open(sys.argv[1]).read()
def cell(name):
    m = re.search(r"^\|\s*" + re.escape(name) + r"\s*\|\s*(.*?)\s*\|$", t, re.M)
    return m.group(1) if m else ""
tps = re.match(r"([0-9.]+) tok/s \(([0-9.]+) ms", cell(next(
    k for k in re.findall(r"^\|\s*(decode, \d+ tokens)", t, re.M))))
mb0 = float(re.match(r"[0-9.]+", cell("  decode: bytes read from disk")).group(0))
req = re.match(r"([0-9.]+)% of (\d+)", cell("  decode: expert cache hit rate"))
mb, rows = mb0, []
for m in re.finditer(r"^\|\s*decode: stage (\d+) \(layers ([0-9-]+)\)\s*\|\s*(.*?)\s*\|$", t, re.M):
    r, layers, v = m.groups()
    if r == "0":
        w = re.search(r"([0-9.]+) ms/token", v).group(1)
        rows.append(f"stage 0, layers {layers}: waiting for the others {w} ms/token, "
                    f"read {mb0:.0f} MB/token, hit {req.group(1)}%")
        continue
    c, w, b, h = re.search(r"computing ([0-9.]+) ms/token, waiting ([0-9.]+), read ([0-9.]+) "
                           r"MB/token, hit rate ([0-9.]+)%", v).groups()
    mb += float(b)
    rows.append(f"stage {r}, layers {layers}: computing {c} ms/token, waiting {w}, "
                f"read {float(b):.0f} MB/token, hit {h}%")
caches = [m.group(1) for m in re.finditer(r"engine cache ([0-9.]+ GB)",
                                            "\n".join(l for l in t.splitlines() if "experts" in l))]
print(f"| {sys.argv[2]} | {tps.group(1)} | {tps.group(2)} | {mb:.0f} | "
      f"{'; '.join(rows) if rows else 'hit ' + req.group(1) + '%'} | {' + '.join(caches)} |")
P
}

echo "model $MODEL, each process under memlimit $LIMIT, prompt $PROMPT, decode $N tokens, cold"
rows=()
for round in $(seq 1 "$ROUNDS"); do
  evict
  "$MEMLIMIT" "$LIMIT" -- $BIN bench "$MODEL" --prompt "$PROMPT" -n "$N" >"$OUT/one" 2>"$OUT/one.err" ||
    { cat "$OUT/one.err"; exit 1; }
  rows+=("$(summary "$OUT/one" "1 process")")
  evict
  mpirun --oversubscribe --allow-run-as-root -np "$RANKS" "$MEMLIMIT" "$LIMIT" -- \
    $MPI bench "$MODEL" --pipeline --prompt "$PROMPT" -n "$N" >"$OUT/k" 2>"$OUT/k.err" ||
    { cat "$OUT/k.err"; exit 1; }
  grep -h "pipeline of" "$OUT/k.err" | head -1
  rows+=("$(summary "$OUT/k" "$RANKS ranks")")
done
echo
echo "| run | decode tok/s | ms/token | MB read from disk per token (all stages) | per stage (decode) | expert caches |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
