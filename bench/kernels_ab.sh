#!/usr/bin/env bash
# A kernel change against another revision, both timed in one process:
#   bench/kernels_ab.sh REV [bench/kernels arguments]
# builds REV's SIMD op tables (src/kernels/x86_*.c as they are at REV, with
# REV's own headers) with their entry points renamed, links them into
# bench/kernels beside this tree's, and runs it with --ab: every line of a
# table is followed by the same line of REV's, timed right after it in each
# of the rounds, then each format's results are compared bit for bit. On a
# shared VM whose core speed flips between levels from minute to minute,
# two separate runs cannot tell a 10% change from none; one process that
# alternates can (docs/perf.md, "Batched products against the core's FMA
# peak").
#
# The rest of the library (dispatch.c's prefetch distances and FP8 order,
# the pool, the matrices) is this tree's: the two tables must share
# src/kernels/kernels.h and internal.h, else the script says so and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: bench/kernels_ab.sh REV [MiB] [--cols N] [--batch N] [--prefetch ...]" >&2
  exit 2
fi
rev=$1
shift
if ! git rev-parse -q --verify "$rev^{commit}" >/dev/null; then
  echo "kernels_ab: '$rev' is not a commit of this repository" >&2
  exit 2
fi
for h in src/kernels/kernels.h src/kernels/internal.h; do
  if ! git diff --quiet "$rev" -- "$h"; then
    echo "kernels_ab: $h differs between $rev and the working tree, so their op tables" \
         "cannot be linked into one program; compare with separate runs of bench/kernels" >&2
    exit 2
  fi
done
make -j2 build/libmoestream.a >/dev/null
short=$(git rev-parse --short "$rev")
dir=build/ab/$short
rm -rf "$dir"
mkdir -p "$dir"
git archive "$rev" src/kernels | tar -x -C "$dir"
renames=""
for t in avx2 avx512 avx512_bf16 avx512_amx avx2_int8 avx512_vnni; do
  renames+=" -Dms_kernels_$t=ab_old_kernels_$t"
done
objs=()
for f in x86_avx2 x86_avx2int8 x86_avx512 x86_avx512bf16 x86_avx512vnni x86_amx; do
  [ -f "$dir/src/kernels/$f.c" ] || continue # a table REV does not have
  # this tree's compile command for the file (its -m flags), on REV's copy,
  # REV's headers first
  cmd=$(make -n -B "build/src/kernels/$f.o" | grep -- "-c src/kernels/$f.c")
  cmd=${cmd/ -MMD -MP/}
  cmd=${cmd/ -c src\/kernels\/$f.c -o build\/src\/kernels\/$f.o/}
  cc_=${cmd%% *}
  eval "$cc_ -I$dir/src ${cmd#* } $renames -c $dir/src/kernels/$f.c -o $dir/$f.o"
  objs+=("$dir/$f.o")
done
link=$(make -n -B build/bench/kernels | grep -- "-o build/bench/kernels ")
link=${link/-o build\/bench\/kernels /-o $dir/kernels }
link=${link/ build\/libmoestream.a/ ${objs[*]} build\/libmoestream.a}
eval "$link"
echo "kernels_ab: this tree against $short ($(git log -1 --format=%s "$rev" | cut -c1-60))"
"$dir/kernels" --ab "$@"
