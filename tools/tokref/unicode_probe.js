#!/usr/bin/env node
// Asks the reference (HF tokenizers via @anush008/tokenizers) how its own
// Unicode tables behave, for tools/tokref/gen_unicode_tables.py. HF's NFC
// normalizer (crate unicode-normalization-alignments) and its regex engine
// (Oniguruma) carry Unicode versions of their own, neither being the one of
// Python's unicodedata or of PCRE2; the generator corrects its tables with
// these answers so that the C tokenizer behaves as the reference does.
//
// stdin:  {"nonstarters": [cp], "composites": [[cp, [cp...]]], "candidates": [cp],
//          "categories": ["L", ...]}
// stdout: {"starters": [cp]          nonstarters the reference's NFC treats as class 0,
//          "not_composed": [cp]      composites whose decomposition it leaves decomposed,
//          "categories": {"L": [cp]} candidates its regex \p{L} (...) matches}
'use strict';
const {Tokenizer, nfcNormalizer} = require('@anush008/tokenizers');

const req = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const nfc = nfcNormalizer();
const ch = (cp) => String.fromCodePoint(cp);

// A nonstarter c behind a class-1 mark (or, for class 1, in front of a
// class-230 one) is reordered by NFC; a starter never is. "q" composes with
// none of the marks used.
const starters = [];
for (const [cp, cls] of req.nonstarters) {
  const [s, moved] = cls > 1 ? ['q' + ch(cp) + '\u0334', 'q\u0334' + ch(cp)]
                             : ['q\u0301' + ch(cp), 'q' + ch(cp) + '\u0301'];
  if (nfc.normalizeString(s) !== moved) starters.push(cp);
}

const notComposed = [];
for (const [cp, nfd] of req.composites) {
  if (nfc.normalizeString(String.fromCodePoint(...nfd)) !== ch(cp)) notComposed.push(cp);
}

// \p{X} membership: a Split pre-tokenizer that removes the matches; what is
// missing from the pieces matched.
function members(cat, cps) {
  const json = {
    version: '1.0', added_tokens: [], normalizer: null, post_processor: null, decoder: null,
    pre_tokenizer: {type: 'Split', pattern: {Regex: cat === 'w' ? '\\w' : `\\p{${cat}}`},
                    behavior: 'Removed', invert: false},
    model: {type: 'BPE', vocab: {}, merges: []},
  };
  const tok = Tokenizer.fromString(JSON.stringify(json));
  const chars = cps.map(ch);
  const pieces = tok.getPreTokenizer().preTokenizeString(chars.join('')).map((p) => Array.from(p[0]));
  const out = [];
  let k = 0, j = 0;
  for (let i = 0; i < chars.length; i++) {
    if (k < pieces.length && pieces[k][j] === chars[i]) {
      if (++j === pieces[k].length) k++, j = 0;
    } else {
      out.push(cps[i]);
    }
  }
  if (k !== pieces.length) throw new Error(`unicode_probe: pieces of \\p{${cat}} do not line up`);
  return out;
}

const categories = {};
for (const cat of req.categories) categories[cat] = members(cat, req.candidates);
process.stdout.write(JSON.stringify({starters, not_composed: notComposed, categories}));
