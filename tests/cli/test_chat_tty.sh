#!/usr/bin/env bash
# `chat` on a terminal, driven through tmux (send-keys, paste-buffer,
# capture-pane): a 60,000-character bracketed paste arrives whole as one
# message, a 3-line paste is one turn, arrow keys edit the line, Up recalls
# the history (saved under $XDG_STATE_HOME), /help is answered by chat and
# not sent to the model, Ctrl-C at the prompt drops the line, Ctrl-C during
# an answer stops it and the conversation goes on, Ctrl-C while a long
# message is read stops the reading and drops the turn, Ctrl-D ends with status 0
# and no "^D" left on the screen. What reached the model is read from
# --stats ("the message: N bytes in L lines") and the history file.
set -u
cd "$(dirname "$0")/../.." && . tests/init.sh chat_tty
M=$W/m
text_model "$M"

# ---- piped: commands, a """ message, /save -----------------------------------------
printf '/system Be brief.\n"""\nfirst\nsecond\n"""\n/bogus\n/stats\n//slash\n/save %s\n/quit\n' \
  "$W/saved.json" | "$BIN" chat "$M" -n 2 --temp 0 --ids --stats >"$W/p.out" 2>"$W/p.err"
$PY - "$W/saved.json" <<'P' && grep -q "the message: 12 bytes in 2 lines" "$W/p.err" &&
import json, sys
m = json.load(open(sys.argv[1]))
roles = [x["role"] for x in m]
assert roles == ["system", "user", "assistant", "user", "assistant"], roles
assert m[0]["content"] == "Be brief." and m[1]["content"] == "first\nsecond", m[:2]
assert m[3]["content"] == "/slash", m[3]
P
  grep -q "unknown command /bogus" "$W/p.err" && grep -q "^decode:" "$W/p.err" &&
  pass piped_commands_block_and_save || fail piped_commands_block_and_save "$(tail -5 "$W/p.err")"

if ! command -v tmux >/dev/null; then
  echo "SKIP chat_on_a_terminal: no tmux on this machine (tools/setup.sh installs it)"; exit $((fails > 0))
fi
BINABS=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")

T="tmux -L ms_chat_tty_$$"
trap '$T kill-server 2>/dev/null' EXIT
# start SESSION ARGS...: chat in a 160x50 terminal; stderr into $W/SESSION.err
start() {
  local s=$1; shift
  $T new-session -d -s "$s" -x 160 -y 50 \
    "XDG_STATE_HOME=$W/state $BINABS chat $M $* 2>$W/$s.err; echo EXIT=\$? >$W/$s.exit; sleep 60"
  wait_for "$s" "/help lists the commands" "$W/$s.err" 60
}
# wait_for SESSION PATTERN FILE SECONDS [COUNT]: until FILE has COUNT lines matching
wait_for() {
  local n=0 want=${5:-1} c
  while c=$(grep -c -- "$2" "$3" 2>/dev/null); [ "${c:-0}" -lt "$want" ]; do
    sleep 0.1; n=$((n + 1))
    [ $n -gt $(($4 * 10)) ] && return 1
  done
  return 0
}
turns() { grep -c "the message: " "$W/$1.err"; }

# ---- editing, pastes, history, /help ------------------------------------------------
start e -n 2 --temp 0 --ids --stats || { fail chat_started "$(cat "$W/e.err")"; exit 1; }
$T send-keys -t e "helo" Left "l" Enter
wait_for e "the message: " "$W/e.err" 30 1
grep -qx hello "$W/state/moestream/chat_history" 2>/dev/null &&
  grep -q "the message: 5 bytes in 1 line" "$W/e.err" && pass arrow_keys_edit ||
  fail arrow_keys_edit "$(tail -1 "$W/e.err"); history: $(cat "$W/state/moestream/chat_history" 2>&1)"

# paste NAME TEXTFILE TURNS: a bracketed paste, then Enter; waits for turn TURNS
paste() {
  $T load-buffer -b "$1" "$2"
  $T paste-buffer -p -b "$1" -t e
  sleep 0.5
  $T send-keys -t e Enter
  wait_for e "the message: " "$W/e.err" 30 "$3"
}
$PY -c "print('x' * 59999 + 'y', end='')" >"$W/big.txt"
paste big "$W/big.txt" 2
grep -q "the message: 60000 bytes in 1 line" "$W/e.err" && [ "$(turns e)" = 2 ] &&
  pass paste_60000_characters_whole || fail paste_60000_characters_whole "$(tail -1 "$W/e.err")"

printf 'first line\nsecond line\nthird line' >"$W/three.txt"
paste three "$W/three.txt" 3
grep -q "the message: 33 bytes in 3 lines" "$W/e.err" && [ "$(turns e)" = 3 ] &&
  pass three_line_paste_one_turn || fail three_line_paste_one_turn "$(tail -2 "$W/e.err")"

$T send-keys -t e "/help" Enter
sleep 1
$T capture-pane -p -t e >"$W/pane"
[ "$(turns e)" = 3 ] && grep -q "/reset" "$W/e.err" && pass help_not_sent_to_model ||
  fail help_not_sent_to_model "turns $(turns e); $(tail -3 "$W/e.err")"

$T send-keys -t e "dropped" C-c
sleep 0.5
$T send-keys -t e Up Up Enter   # the 3-line paste, then "hello" (the long paste is not kept)
wait_for e "the message: " "$W/e.err" 30 4
[ "$(tail -1 "$W/e.err" | grep -c 'the message: 5 bytes in 1 line')" = 1 ] && [ "$(turns e)" = 4 ] &&
  pass ctrl_c_drops_line_history_recalls || fail ctrl_c_drops_line_history_recalls "$(tail -2 "$W/e.err")"

$T send-keys -t e C-d
wait_for e "EXIT=" "$W/e.exit" 20
$T capture-pane -p -t e >"$W/pane"
grep -q "EXIT=0" "$W/e.exit" && ! grep -q '\^D' "$W/pane" && pass ctrl_d_ends_cleanly ||
  fail ctrl_d_ends_cleanly "$(cat "$W/e.exit" 2>&1) $(grep -v '^$' "$W/pane" | tail -2)"

# ---- Ctrl-C during an answer ----------------------------------------------------------
start c -n 100000 --ctx 200000 --ignore-eos --temp 0 --stats ||
  { fail chat_started "$(cat "$W/c.err")"; exit 1; }
$T send-keys -t c "tell me a long story" Enter
sleep 1.5
$T send-keys -t c C-c
wait_for c "stopped" "$W/c.err" 30 1
$T send-keys -t c "more" Enter
sleep 1.5
$T send-keys -t c C-c
wait_for c "stopped" "$W/c.err" 30 2
wait_for c "the message: " "$W/c.err" 30 2
$T send-keys -t c C-d
wait_for c "EXIT=" "$W/c.exit" 20
[ "$(grep -c stopped "$W/c.err")" = 2 ] && grep -q "the message: 4 bytes" "$W/c.err" &&
  grep -q "EXIT=0" "$W/c.exit" && pass ctrl_c_stops_answer_keeps_session ||
  fail ctrl_c_stops_answer_keeps_session "$(tail -4 "$W/c.err") $(cat "$W/c.exit" 2>&1)"

# ---- Ctrl-C while a long prompt is read -----------------------------------------------
# one position a call, so that the message takes seconds to read: 60,000 characters
# of words (~30,000 tokens, 4.5-5.5 s here), where the 60,000 x's above make only
# ~7,600 tokens, which a quiet machine read in 0.6 s, before the Ctrl-C came
$PY -c "print('x ' * 30000, end='')" >"$W/words.txt"
start r -n 2 --temp 0 --stats --prefill-span 1 --ctx 40000 ||
  { fail chat_started "$(cat "$W/r.err")"; exit 1; }
$T load-buffer -b bigr "$W/words.txt"
$T paste-buffer -p -b bigr -t r
sleep 0.5
$T send-keys -t r Enter
sleep 1
$T send-keys -t r C-c
wait_for r "stopped while reading the prompt" "$W/r.err" 30 1
$T send-keys -t r "again" Enter
wait_for r "the message: " "$W/r.err" 60 1
$T send-keys -t r C-d
wait_for r "EXIT=" "$W/r.exit" 20
grep -q "stopped while reading the prompt" "$W/r.err" && [ "$(turns r)" = 1 ] &&
  grep -q "the message: 5 bytes in 1 line" "$W/r.err" && grep -q "EXIT=0" "$W/r.exit" &&
  pass ctrl_c_stops_prompt_reading || fail ctrl_c_stops_prompt_reading "$(tail -4 "$W/r.err") $(cat "$W/r.exit" 2>&1)"

[ $fails -eq 0 ]
