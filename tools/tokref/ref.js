#!/usr/bin/env node
// Reference ids from the Hugging Face tokenizers library (Rust, via the
// @anush008/tokenizers Node binding) for the test corpus (corpus.js).
//
//   node tools/tokref/ref.js MODEL_DIR OUT_DIR [--big BYTES] [--random N]
//
// Writes OUT_DIR/case_N.txt (the raw bytes), case_N.ids (HF's
// encode(text, add_special_tokens=False) ids, space separated), case_N.dec
// (HF's decode(ids, skip_special_tokens=False), UTF-8), case_N.pieces (the
// pre-tokens of the normalized text, HF's pre_tokenize_str, each followed by
// a NUL byte: this checks the regexes piece by piece, which ids alone can
// hide) and manifest.json.
// Bytes that are not UTF-8 reach HF as Node's lossy decoding of them
// (Buffer#toString: one U+FFFD per maximal ill-formed subsequence, the same
// rule as Rust's String::from_utf8_lossy); the C side applies the same rule.
'use strict';
const fs = require('fs');
const path = require('path');
let Tokenizer;
try {
  ({Tokenizer} = require('@anush008/tokenizers'));
} catch (e) {
  console.error('tokref: cannot load @anush008/tokenizers (' + e.message.split('\n')[0] +
                '); run tools/setup-node.sh (npm ci) first');
  process.exit(2);
}
const {cases} = require('./corpus');

async function main() {
  const args = process.argv.slice(2);
  const opt = (name, def) => {
    const i = args.indexOf(name);
    if (i < 0) return def;
    const v = Number(args[i + 1]);
    args.splice(i, 2);
    return v;
  };
  const big = opt('--big', 0), random = opt('--random', 400);
  if (args.length !== 2) {
    console.error('usage: node tools/tokref/ref.js MODEL_DIR OUT_DIR [--big BYTES] [--random N]');
    process.exit(2);
  }
  const [dir, out] = args;
  const file = path.join(dir, 'tokenizer.json');
  fs.mkdirSync(out, {recursive: true});
  const json = JSON.parse(fs.readFileSync(file, 'utf8'));
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(file);
  const loadSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const list = cases(json.added_tokens || [], {big, random});
  const normalizer = tok.getNormalizer();
  const pretok = tok.getPreTokenizer();
  const manifest = {tokenizer: file, hf_load_seconds: loadSeconds, cases: []};
  for (let i = 0; i < list.length; i++) {
    const c = list[i];
    const text = c.bytes.toString('utf8');
    t0 = process.hrtime.bigint();
    const enc = await tok.encode(text, null, {addSpecialTokens: false});
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const ids = Array.from(enc.getIds());
    const dec = await tok.decode(ids, false);
    const base = `case_${i}`;
    fs.writeFileSync(path.join(out, base + '.txt'), c.bytes);
    fs.writeFileSync(path.join(out, base + '.ids'), ids.join(' ') + '\n');
    fs.writeFileSync(path.join(out, base + '.dec'), Buffer.from(dec, 'utf8'));
    const normalized = normalizer ? normalizer.normalizeString(text) : text;
    const pieces = pretok.preTokenizeString(normalized).map((p) => p[0] + '\0');
    fs.writeFileSync(path.join(out, base + '.pieces'), Buffer.from(pieces.join(''), 'utf8'));
    manifest.cases.push({
      group: c.group, name: c.name, base,
      valid_utf8: Buffer.from(text, 'utf8').equals(c.bytes),
      roundtrip: dec === text,
      hf_encode_seconds: seconds,
    });
  }
  fs.writeFileSync(path.join(out, 'manifest.json'), JSON.stringify(manifest, null, 1));
}

main().catch((e) => {
  console.error('tokref: ' + (e && e.stack || e));
  process.exit(1);
});
