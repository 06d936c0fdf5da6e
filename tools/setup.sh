#!/usr/bin/env bash
# Installs what moestream needs to build and test on Debian 12 (idempotent).
# Build: gcc, make, jansson (JSON), liburing (io_uring), PCRE2 (tokenizer regexes),
# libmicrohttpd (moestream serve), libedit (chat's line editor). Tests and tools: Python 3 with NumPy from Debian
# (oracle, tiny-checkpoint writer), Jinja2 (chat-template oracle), the Prometheus
# client's text parser (checks /metrics), curl (server tests), Chromium (the chat
# page, headless), tmux (chat on a terminal), groff (the man page), Open MPI (the
# pipeline over several processes: `make mpi`, its tests run with mpirun on one machine),
# clang with its libFuzzer runtime (tools/fuzz; tests/fuzz runs each target briefly).
set -euo pipefail
pkgs=(build-essential pkg-config libjansson-dev liburing-dev libpcre2-dev libmicrohttpd-dev libedit-dev groff-base tmux curl python3 python3-numpy python3-jinja2 python3-prometheus-client chromium libopenmpi-dev openmpi-bin clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "setup: dependencies present (${pkgs[*]})"
