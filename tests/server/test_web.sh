#!/usr/bin/env bash
# The chat page at / in headless Chromium (tests/server/web.mjs): a streamed
# answer with its reasoning shown apart, a second turn, the Stop button (and
# the server cancelling the answer), no script error. Screenshots are
# written to $MS_ARTIFACTS (default: the test's work folder) and named in
# the output.
set -u
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
BIN=${MS_BIN:-./moestream}
own_tmp=; if [ -z "${MS_TMP:-}" ]; then MS_TMP=$(mktemp -d); own_tmp=1; fi
W=$MS_TMP/web; rm -rf "$W"; mkdir -p "$W"
. tests/server/lib.sh
trap 'kill_servers; [ -z "$own_tmp" ] || rm -rf "$MS_TMP"' EXIT
need_node_modules puppeteer-core
if ! command -v "${CHROMIUM:-chromium}" >/dev/null && [ ! -x "${CHROMIUM:-/usr/bin/chromium}" ]; then
  fail chromium_present "no chromium (Debian's package; tools/setup.sh installs it)"; exit 1
fi
SHOTS=${MS_ARTIFACTS:-$W}; mkdir -p "$SHOTS"

make_model "$W/m" || { fail model "tiny checkpoint"; exit 1; }
make_scripted "$W/s" "$W/m" || { fail script "model.py"; exit 1; }
start_server wscript "$W/s" --parallel 1 || exit 1
start_server wrand "$W/m" --parallel 1 || exit 1
run_node web tests/server/web.mjs "$wscript_url/" "$wrand_url/" "$SHOTS"
for _ in $(seq 1 50); do grep -q cancelled "$W/wrand.log" && break; sleep 0.1; done
grep -q "cancelled" "$W/wrand.log" && pass web_stop_cancels_on_the_server ||
  fail web_stop_cancels_on_the_server "$(tail -3 "$W/wrand.log")"
stop_server wscript
stop_server wrand
[ "$fails" -eq 0 ]
