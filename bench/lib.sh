# Shell helpers shared by the bench scripts (sourced).

# "min / median / max" of the numbers given (the median: the lower middle);
# words that are not numbers are left out
mmm() {
  local v n
  v=$(printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | tr '\n' ' ')
  set -- $v
  n=$#
  if [ "$n" -eq 0 ]; then echo "- / - / -"; return; fi
  echo "$1 / $(echo $v | cut -d' ' -f$(( (n + 1) / 2 ))) / ${!n}"
}

# The figures of a `moestream bench [--floor]` table read on stdin, as one
# line "PREFILL_TOK_S DECODE_MS READ_GB_S MB_TOKEN FLOOR_MS X_FLOOR" ("-" for
# a figure the table lacks, e.g. without --floor)
bench_figures() {
  awk -F'|' '
    /prefill, / { split($3, a, " "); pf = a[1] }
    /decode, / { d = $3; sub(/.*\(/, "", d); sub(/ ms.*/, "", d) }
    /memory read stream/ { split($3, a, " "); bw = a[1] }
    /weight bytes read/ { split($3, a, " "); mb = a[1] }
    /decode floor/ { split($3, a, " "); fl = a[1]; x = $3; sub(/.*decode /, "", x); sub(/x floor.*/, "", x) }
    function v(s) { gsub(/ /, "", s); return s == "" ? "-" : s }
    END { print v(pf), v(d), v(bw), v(mb), v(fl), v(x) }'
}
