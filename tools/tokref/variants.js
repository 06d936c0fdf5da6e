#!/usr/bin/env node
// Variants of a real tokenizer.json that exercise the options the released
// files leave unused, so that they too are compared with HF tokenizers:
//
//   node tools/tokref/variants.js BASE_MODEL_DIR OUT_ROOT
//
// writes OUT_ROOT/<name>/tokenizer.json for each variant below and prints the
// names. Every variant is loaded once by HF here, so a variant HF rejects
// fails at generation, not in the comparison.
'use strict';
const fs = require('fs');
const path = require('path');
const {Tokenizer} = require('@anush008/tokenizers');

const split = (pattern, behavior, invert = false, literal = false) =>
  ({type: 'Split', pattern: literal ? {String: pattern} : {Regex: pattern}, behavior, invert});
const byteLevel = (addPrefixSpace = false, useRegex = false) =>
  ({type: 'ByteLevel', add_prefix_space: addPrefixSpace, trim_offsets: false, use_regex: useRegex});

// Added tokens get the ids HF assigns: their vocab id, else the next free one.
function assignIds(json, added) {
  const vocab = json.model.vocab;
  const size = Object.keys(vocab).length;
  let max = -1;
  for (const t of added) {
    if (t.content in vocab) t.id = vocab[t.content];
    else t.id = max < 0 ? size : (max >= size ? max + 1 : size);
    if (t.id > max) max = t.id;
  }
  json.added_tokens = added;
}

// Removes byte-level chars from the vocab (and every token and merge that
// holds one), renumbers the vocab, then appends the given tokens.
function dropChars(json, chars, append) {
  const has = (s) => chars.some((c) => s.includes(c));
  const entries = Object.entries(json.model.vocab).filter(([t]) => !has(t)).sort((a, b) => a[1] - b[1]);
  const vocab = {};
  entries.forEach(([t], i) => (vocab[t] = i));
  append.forEach((t) => (vocab[t] = Object.keys(vocab).length));
  json.model.vocab = vocab;
  json.model.merges = json.model.merges.filter((m) => {
    const [a, b] = typeof m === 'string' ? m.split(' ') : m;
    return !has(a) && !has(b);
  });
}

const VARIANTS = {
  // GPT-2 style: ByteLevel does the splitting; NFC; ignore_merges
  bytelevel_regex(j) {
    j.normalizer = {type: 'NFC'};
    j.pre_tokenizer = byteLevel(true, true);
    j.model.ignore_merges = true;
  },
  // every Split behavior, a literal pattern, and \d \w \s \h in the regexes
  split_behaviors(j) {
    j.normalizer = null;
    j.pre_tokenizer = {type: 'Sequence', pretokenizers: [
      split('\\s+', 'MergedWithPrevious'), split('\\d', 'MergedWithNext'),
      split('-', 'Contiguous', false, true), split('[,;]', 'Removed'),
      split('\\w{2,}|\\h', 'Isolated'), byteLevel(false, false)]};
  },
  split_inverted(j) {
    j.normalizer = {type: 'Sequence', normalizers: [{type: 'NFC'}]};
    j.pre_tokenizer = {type: 'Sequence', pretokenizers: [
      split('\\p{L}+', 'MergedWithPrevious', true), split('\\s', 'Contiguous', true),
      split('\\p{P}', 'MergedWithNext', true), split('', 'Isolated', false, true), byteLevel(true, false)]};
  },
  // added tokens with lstrip / rstrip / single_word / normalized
  added_flags(j) {
    j.normalizer = {type: 'NFC'};
    const flags = (content, o) => Object.assign({content, single_word: false, lstrip: false,
                                                 rstrip: false, normalized: false, special: false}, o);
    assignIds(j, j.added_tokens.slice(0, 8).concat([
      flags('<mask>', {lstrip: true, rstrip: true, special: true}),
      flags('ony', {single_word: true}),
      flags('hello', {normalized: true}),
      flags('caf\u00e9', {normalized: true}),
      flags('<sw>', {single_word: true, lstrip: true, special: true}),
      flags('end', {rstrip: true}),
      flags('\u2581x\u2581', {special: true}),
      flags('more', {single_word: true, normalized: true}),
    ]));
  },
  // byte_fallback, unk_token, fuse_unk: bytes 0xBD-0xBF lose their tokens
  fallback_unk(j) {
    dropChars(j, ['\u00bd', '\u00be', '\u00bf'], ['<0xC2>', '<0xBF>', '<unk>']);
    j.model.byte_fallback = true;
    j.model.unk_token = '<unk>';
    j.model.fuse_unk = true;
    assignIds(j, j.added_tokens.slice(0, 4));
  },
  unk_unfused(j) {
    dropChars(j, ['\u00bd', '\u00be', '\u00bf'], ['<unk>']);
    j.model.unk_token = '<unk>';
    j.model.fuse_unk = false;
    assignIds(j, j.added_tokens.slice(0, 4));
  },
};

function main() {
  const [base, outRoot] = process.argv.slice(2);
  if (!base || !outRoot) {
    console.error('usage: node tools/tokref/variants.js BASE_MODEL_DIR OUT_ROOT');
    process.exit(2);
  }
  const text = fs.readFileSync(path.join(base, 'tokenizer.json'), 'utf8');
  for (const [name, edit] of Object.entries(VARIANTS)) {
    const j = JSON.parse(text);
    edit(j);
    const dir = path.join(outRoot, name);
    fs.mkdirSync(dir, {recursive: true});
    fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(j));
    Tokenizer.fromFile(path.join(dir, 'tokenizer.json')); // HF must accept it
    console.log(name);
  }
}

main();
