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
