#!/usr/bin/env bash
# One option table for every command. For each command `moestream help`
# lists: every flag its --help documents is accepted (with --dry-run, which
# shows where each value came from), each needs its value when it takes one,
# an undocumented flag and another command's flag are refused with the same
# message shape; the config file (global lines and [command] sections, from
# --config-file, $MOESTREAM_CONFIG or ~/.config) gives the same options and
# flags win; the man page renders with groff without a warning; replay says
# what it needs when the trace has no cache budget.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh options
FIX=${MOESTREAM_FIXTURES:-../shared/fixtures}/gpt_oss
shape() { # shape CMD TEXT: the one form of a usage error
  printf '%s\n' "$2" | grep -qE "^moestream $1: .+ \(moestream $1 --help lists the options\)$"
}
: >"$W/empty.cfg"
cmds=$("$BIN" help | sed -n 's/^  moestream \([a-z]*\) .*/\1/p')
ncmd=0; nflag=0; bad=""
for c in $cmds; do
  ncmd=$((ncmd + 1))
  "$BIN" "$c" --help >"$W/$c.help" || bad="$bad $c:--help"
  pos=""; grep -qE "^usage: moestream $c (\[?[A-Z_]+\]?) \[options\]" "$W/$c.help" && pos=$W/nonexistent
  echo "$pos" >"$W/$c.pos"
  # every documented name with a value it takes
  $PY - "$W/$c.help" "$W/empty.cfg" >"$W/$c.flags" <<'P'
import re, sys
empty = sys.argv[2]
rows = []
for line in open(sys.argv[1]):  # continuation lines (indented) join their row
    if line.startswith(" " * 30) and rows:
        rows[-1] += " " + line.strip()
    else:
        rows.append(line.rstrip("\n"))
for line in rows:
    m = re.match(r"  (-\S.*?)(?:   +|$)(.*)", line)
    if not m:
        continue
    left, text = m.group(1), m.group(2)
    parts = [p.strip() for p in left.split(",")]
    meta = ""
    last = parts[-1].split(" ", 1)
    if len(last) == 2:
        parts[-1], meta = last
    if "--help" in parts or "--dry-run" in parts:
        continue
    ch = re.search(r"; (\w+(?:\|\w+)+)", text)
    rng = re.search(r"\[(-?[\d.e+-]+)\.\.", text)
    if not meta:
        val = None
    elif "|" in meta:
        val = meta.split("|")[0]
    elif ch:
        val = ch.group(1).split("|")[0]
    elif rng:
        val = rng.group(1)
    elif meta in ("SIZE",):
        val = "1G"
    elif meta == "SIZES":
        val = "4G,6G"
    elif meta == "FILE" and "config-file" in parts[-1]:
        val = empty
    elif meta in ("N", "K", "M", "S"):
        val = "1"
    elif meta in ("T", "P", "R", "F"):
        val = "0.5"
    else:
        val = "x"
    for name in parts:
        print(name, val if val is not None else "")
P
  while read -r name val; do
    nflag=$((nflag + 1))
    if [ -n "$val" ]; then out=$("$BIN" "$c" $pos "$name" "$val" --dry-run 2>&1); rc=$?
    else out=$("$BIN" "$c" $pos "$name" --dry-run 2>&1); rc=$?; fi
    { [ $rc -eq 0 ] && { [ "$name" = --no-config-file ] || [ "$name" = --config-file ] ||
      printf '%s' "$out" | grep -q "(command line)"; }; } || bad="$bad $c:$name($rc:${out##*: })"
    if [ -n "$val" ]; then
      out=$("$BIN" "$c" $pos "$name" 2>&1); rc=$?
      { [ $rc -eq 2 ] && printf '%s' "$out" | grep -q -- "$name needs a value" && shape "$c" "$out"; } ||
        bad="$bad $c:$name-without-value($rc:$out)"
    fi
  done <"$W/$c.flags"
  out=$("$BIN" "$c" $pos --frobnicate 2>&1); rc=$?
  { [ $rc -eq 2 ] && shape "$c" "$out" && printf '%s' "$out" | grep -q "unknown option --frobnicate"; } ||
    bad="$bad $c:--frobnicate($rc:$out)"
done
[ $ncmd -ge 12 ] && [ -z "$bad" ] && pass "every_documented_flag_accepted ($ncmd commands, $nflag names)" ||
  fail every_documented_flag_accepted "${bad:-only $ncmd commands}"

# another command's flag: refused in the same shape, naming who takes it
bad=""
for c in $cmds; do
  other=$(cat "$W"/*.flags | cut -d' ' -f1 | sort -u | while read -r f; do
            grep -qx -- "$f.*" "$W/$c.flags" || grep -q "^$f " "$W/$c.flags" || { echo "$f"; break; }; done)
  [ -z "$other" ] && continue
  out=$("$BIN" "$c" $(cat "$W/$c.pos") "$other" 1 2>&1); rc=$?
  { [ $rc -eq 2 ] && shape "$c" "$out" && printf '%s' "$out" | grep -q "is an option of .*, not of $c"; } ||
    bad="$bad $c:$other($rc:$out)"
done
[ -z "$bad" ] && pass other_commands_flag_refused_same_shape || fail other_commands_flag_refused_same_shape "$bad"

# ---- the config file ------------------------------------------------------------------
cat >"$W/cfg" <<'C'
# global: every command that takes it
threads = 3
port = 9000          # serve's; run ignores it
[run]
n-predict = 7
stats
[serve]
port = 9001
C
out=$("$BIN" run "$FIX" --config-file "$W/cfg" --dry-run 2>&1)
printf '%s' "$out" | grep -qE -- "--threads +3 +\(config file\)" &&
  printf '%s' "$out" | grep -qE -- "--n-predict +7 +\(config file\)" &&
  printf '%s' "$out" | grep -qE -- "--stats +yes +\(config file\)" &&
  pass config_file_sections || fail config_file_sections "$out"
out=$("$BIN" run "$FIX" --config-file "$W/cfg" -t 2 --stats=no --dry-run 2>&1)
printf '%s' "$out" | grep -qE -- "--threads +2 +\(command line\)" &&
  printf '%s' "$out" | grep -qE -- "--stats +no +\(command line\)" &&
  pass flags_win_over_config || fail flags_win_over_config "$out"
out=$(MOESTREAM_CONFIG=$W/cfg "$BIN" serve "$FIX" --dry-run 2>&1)
printf '%s' "$out" | grep -qE -- "--port +9001 +\(config file\)" && pass config_from_environment ||
  fail config_from_environment "$out"
mkdir -p "$W/xdg/moestream" && printf 'ctx = 300\n' >"$W/xdg/moestream/config"
out=$(XDG_CONFIG_HOME=$W/xdg "$BIN" logits "$FIX" --dry-run 2>&1)
out2=$(XDG_CONFIG_HOME=$W/xdg "$BIN" logits "$FIX" --no-config-file --dry-run 2>&1)
printf '%s' "$out" | grep -qE -- "--ctx +300 +\(config file\)" && ! printf '%s' "$out2" | grep -q -- "--ctx" &&
  pass user_config_and_no_config_file || fail user_config_and_no_config_file "$out / $out2"
printf 'threads = 3\nthreds = 2\n' >"$W/bad1"; printf '[run]\nport = 1\n' >"$W/bad2"
printf 'threads = many\n' >"$W/bad3"; printf '[runn]\n' >"$W/bad4"
ok=1
for b in "bad1:2: unknown option \"threds\"" "bad2:2: port is an option of serve, not of run" \
         "bad3:1: threads expects an integer" "bad4:1: no command is called \"runn\""; do
  f=${b%%:*}
  out=$("$BIN" run "$FIX" --config-file "$W/$f" --dry-run 2>&1); rc=$?
  [ $rc -eq 2 ] && printf '%s' "$out" | grep -qF "$W/$b" || { ok=0; echo "  $f: rc $rc $out"; }
done
out=$("$BIN" run "$FIX" --config-file "$W/absent" --dry-run 2>&1); rc=$?
[ $rc -eq 2 ] && printf '%s' "$out" | grep -q "absent" || { ok=0; echo "  absent: $out"; }
[ $ok = 1 ] && pass config_errors_name_file_and_line || fail config_errors_name_file_and_line "see above"

# ---- the man page ---------------------------------------------------------------------
if command -v groff >/dev/null; then
  "$BIN" help --man >"$W/moestream.1"
  groff -man -Tutf8 -ww -P-cbou "$W/moestream.1" >"$W/man.txt" 2>"$W/man.err"
  miss=""; for c in $cmds; do grep -q "moestream $c" "$W/man.txt" || miss="$miss $c"; done
  [ ! -s "$W/man.err" ] && [ -z "$miss" ] && grep -q -- "--n-predict" "$W/man.txt" &&
    pass man_page_renders || fail man_page_renders "$(head -3 "$W/man.err") missing:$miss"
else
  echo "SKIP man_page_renders: no groff on this machine (tools/setup.sh installs groff-base)"
fi

# ---- replay without --ram ----------------------------------------------------------------
"$BIN" run "$FIX" --prompt-ids "$FIX/tokens.txt" -n 2 --ids --experts cache --cache-slots 8 \
  --trace "$W/c.trace" >/dev/null 2>&1
"$BIN" run "$FIX" --prompt-ids "$FIX/tokens.txt" -n 2 --ids --experts pagecache \
  --trace "$W/p.trace" >/dev/null 2>&1
out=$("$BIN" replay "$W/c.trace" 2>&1); rc=$?
out2=$("$BIN" replay "$W/p.trace" 2>&1); rc2=$?
[ $rc -eq 0 ] && printf '%s' "$out" | grep -q "slots 8 " && [ $rc2 -eq 2 ] &&
  printf '%s' "$out2" | grep -q "give one (--ram SIZE or --slots N)" &&
  pass replay_without_ram || fail replay_without_ram "$rc: $out / $rc2: $out2"

[ $fails -eq 0 ]
