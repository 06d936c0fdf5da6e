#!/usr/bin/env bash
# bench/kernels_ab.sh, the in-process A/B of a kernel change against another
# revision: against HEAD it links HEAD's op tables in beside this tree's
# (their lines printed as "old ..."), and where this tree's kernels are
# HEAD's every format's results are the same bits; a revision whose
# kernels.h differs, or a name that is no commit, is refused with the
# reason. Times are printed by the tool, never judged here.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh kernels_ab
if [ "${MS_BUILD:-build}" != build ]; then
  echo "SKIP kernels_ab: the A/B tool builds and links the plain tree (build/), not $MS_BUILD"
  exit 0
fi
if ! git rev-parse -q --verify HEAD >/dev/null 2>&1; then
  echo "SKIP kernels_ab: not a git checkout (the tool builds another revision's tables from git)"
  exit 0
fi

# this tree's kernels against HEAD's: the same bits unless src/kernels has
# uncommitted changes
bench/kernels_ab.sh HEAD 1 --batch 2 >"$W/ab" 2>"$W/ab.err"
rc=$?
own=$(grep -c "^old " "$W/ab")
if [ $rc -eq 0 ] && [ "$own" -gt 0 ] && grep -q "^bits, this tree against the revision" "$W/ab"; then
  pass "kernels_ab_links_the_revisions_tables ($own old lines)"
else
  fail kernels_ab_links_the_revisions_tables "rc $rc, $own old lines: $(tail -3 "$W/ab.err")"
fi
if grep -q "not linked in" "$W/ab"; then
  fail kernels_ab_tables_are_distinct "$(grep "not linked in" "$W/ab")"
else
  pass kernels_ab_tables_are_distinct
fi
rows=$(sed -n '/^bits, /,$p' "$W/ab" | grep -c " mxfp4 ")
if ! git diff --quiet HEAD -- src/kernels; then
  echo "SKIP kernels_ab_same_bits_against_head: src/kernels has uncommitted changes"
elif [ "$rows" -gt 0 ] && ! sed -n '/^bits, /,$p' "$W/ab" | grep -q DIFFER; then
  pass "kernels_ab_same_bits_against_head ($rows tables)"
else
  fail kernels_ab_same_bits_against_head "$(sed -n '/^bits, /,$p' "$W/ab")"
fi

# the last commit that changed kernels.h: its parent's tables cannot be
# linked with this tree's
last=$(git log --format=%H -1 -- src/kernels/kernels.h)
if [ -n "$last" ] && git rev-parse -q --verify "$last^" >/dev/null; then
  out=$(bench/kernels_ab.sh "$last^" 1 2>&1)
  rc=$?
  [ $rc -eq 2 ] && printf '%s' "$out" | grep -q "src/kernels/kernels.h differs" &&
    pass kernels_ab_refuses_another_interface ||
    fail kernels_ab_refuses_another_interface "rc $rc: $out"
else
  echo "SKIP kernels_ab_refuses_another_interface: no earlier kernels.h in this clone's history"
fi

out=$(bench/kernels_ab.sh no-such-revision 2>&1)
rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "'no-such-revision' is not a commit" &&
  pass kernels_ab_refuses_a_non_commit || fail kernels_ab_refuses_a_non_commit "rc $rc: $out"
[ $fails -eq 0 ]
