// The tokenizer test corpus: named cases of raw bytes, grouped for reporting.
// cases(addedTokens) returns [{group, name, bytes: Buffer}]. Deterministic
// (a seeded generator), so a failure reproduces.
'use strict';

function lcg(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

const utf8 = (s) => Buffer.from(s, 'utf8');

const ENGLISH = `The quick brown fox jumps over the lazy dog. I'm sure they'll say it's "fine" -- DON'T you think?
She said: 'We've been here since 9:30am; you'd better hurry!' (Really?) [Yes.] {Maybe...}
Mr. O'Neil's cat's toys weren't there; HE'LL find 'em. It'S, It'S, they'RE, WE'VE, I'M, YOU'D.
e-mail: someone@example.com, URL: https://example.org/path?q=1&x=y#frag ... 50% off! $12.99 #hashtag @user`;

const CODE = `#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n\tfor (int i = 0; i < argc; i++) {\n\t\tprintf("%d: %s\\n", i, argv[i]);\n\t}\n\treturn 0; // done\n}\n` +
  `def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nif __name__ == "__main__":\n    print(fib(30))\r\n\r\n` +
  `const x = {a: [1, 2, 3], "b": null}; x?.a?.map((v) => v ** 2) ?? [];\n    if (a != b && c >= d || !e) { return a << 2 >>> 1; }\n` +
  `SELECT name, COUNT(*) FROM users WHERE id IN (1,2,3) GROUP BY name;\n<div class="x"><p>Hello&nbsp;world</p></div>\n`;

const NUMBERS = `1234567890123456789012345678901234567890 3.14159265358979 1,000,000 -42 +7 1e-10 0x1F 0b1010 007
2024-01-31T12:34:56Z 192.168.0.1 +1 (555) 123-4567 abc123def 12ab34 v2.0.1 1st 2nd 3rd 4th
\u0661\u0662\u0663\u0664\u0665 \uff11\uff12\uff13 \u0967\u0968\u0969 \u00b2\u00b3\u00b9 \u00bd \u2153 \u2167 \u216b \u3007
${'9'.repeat(200)} ${'1234567'.repeat(30)}`;

const CJK = `中文测试：今天天气很好，我们去公园散步吧。机器学习和深度学习是人工智能的重要分支。
日本語のテキスト：ひらがな、カタカナ、漢字が混ざっています。東京タワーに行きました！
한국어 텍스트: 안녕하세요, 반갑습니다. 대한민국의 수도는 서울입니다.
混合Mixed中英文text with 数字123和符号！？「引用」『二重』（括弧）【墨付き】〜ー・`;

const EMOJI = `👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ ❤ 🇯🇵🇺🇸 1️⃣ #️⃣ 👩🏾‍💻 🧑‍🤝‍🧑 😀😃😄😁 🤖🦀🐍
text😀text emoji👍🏽end 🫠🫡🪿 ☺︎ ✌🏿 🏴󠁧󠁢󠁳󠁣󠁴󠁿 ©️®️™️`;

const COMBINING = `e\u0301 a\u0308 o\u0302\u0301 Tie\u0302\u0301ng Vie\u0323\u0302t caf\u00e9 cafe\u0301
\u1e0a\u0323 \u1e0c\u0307 q\u0307\u0323 a\u0328\u0301 \u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8 \u212b \u2126 K\u0301
\u0928\u092e\u0938\u094d\u0924\u0947 \u0627\u064e\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629
\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034d
\u0041\u030a \u00c5 \u0344 \u0340 \u0958 \u2adc \u1fee \u1f71 \u00c7\u0301 \u0ddd \u0f73`;

const WHITESPACE = [
  ' ', '  ', '   x', 'x   ', '\t', '\t\t\tx', '\n', '\n\n\n', 'a\n\nb', 'a \n b',
  ' \n \t\r\n', 'x  \t \n\n  \t y', '    indented\n        more\n', 'a\r\nb\r\n\r\nc',
  '\u00a0\u00a0x', 'x\u3000\u3000y', 'a\u2028b\u2029c', 'a\u0085b', 'a\u000bb\u000cc',
  'x\u1680y\u2000z\u200az\u202fz\u205fz', 'a\u180eb', 'a\u200bb\ufeffc', ' '.repeat(1000) + 'x',
  '\n'.repeat(300), '\t'.repeat(257) + 'y', (' \t\n').repeat(200), 'end with spaces   ',
];

const EDGE = [
  '', ' ', 'a', "'", "'s", "'S", "x's", "x'S", "X'ſ", "'ſ", "it'll've", "rock'n'roll",
  "it'ſ", "x'ſt", "'ſome", "DON'ſ T", "'Ss'sS", "we'Ll'VE", "I'M'm",
  '\u01c4 \u01c5 \u01c6 \u02b0 \u1d2c', '\u216b \u00bd _ \u203f', '\u0000', 'a\u0000b',
  '\u0001\u007f\u0080\u009f', '\ufeffBOM', '\ufffd', '\u{10ffff}\u{e000}',
  '<|', '|>', '<|im_start', '<|endoftext', '<｜', '｜>', 'k\u212a',
  '\u2fbe\u2fbf\uff7d\uff7e\uff7f \u00bf\u00be\u00bd \u00ff \u2fbd\u2fbe',
  'İstanbul ıi ß ẞ ǰ ﬁ ﬀ', 'ΑΒΓ αβγ ς σ', 'Привет, мир!', '\u{1d400}\u{1d41a} \u{1d7ce}',
];

// Raw byte sequences that are not UTF-8 (the documented lossy policy).
const INVALID = [
  [0x80], [0xff], [0xfe, 0xff], [0xc0, 0xaf], [0xe0, 0x80, 0xaf], [0xed, 0xa0, 0x80],
  [0xf4, 0x90, 0x80, 0x80], [0xf5, 0x80], [0xe4, 0xb8], [0xf0, 0x9f, 0x98], [0xc3],
  [0xe2, 0x82, 0x41], [0xf0, 0x9f, 0x41, 0x42], [0xc2, 0xc2, 0xa9],
];

function invalidCases() {
  const out = [];
  INVALID.forEach((bytes, i) => {
    out.push({name: `bytes_${i}`, bytes: Buffer.concat([utf8('ab '), Buffer.from(bytes), utf8('cd 中')])});
  });
  out.push({name: 'many', bytes: Buffer.concat(INVALID.map((b) => Buffer.concat([Buffer.from(b), utf8(' x')])))});
  out.push({name: 'truncated_at_end', bytes: Buffer.concat([utf8('end '), Buffer.from([0xf0, 0x9f, 0x98])])});
  out.push({name: 'only_invalid', bytes: Buffer.from([0xff, 0xfe, 0x80, 0xc3])});
  return out;
}

function specialCases(added) {
  const out = [];
  const all = added.map((t) => t.content);
  // every added token embedded in text, in groups of 40 per case
  for (let i = 0; i < all.length; i += 40) {
    const part = all.slice(i, i + 40);
    const text = part.map((c, k) => (k % 3 === 0 ? `Text ${c} more` : k % 3 === 1 ? `x${c}y` : `${c}\n`)).join(' ');
    out.push({name: `embedded_${i / 40}`, bytes: utf8(text)});
  }
  if (all.length) {
    out.push({name: 'adjacent', bytes: utf8(all.slice(0, 6).join('') + all[0])});
    out.push({name: 'at_ends', bytes: utf8(all[0] + ' middle ' + all[all.length - 1])});
    out.push({name: 'truncated', bytes: utf8(all.slice(0, 10).map((c) => c.slice(0, -1)).join(' '))});
    out.push({name: 'spaces_around', bytes: utf8(`  ${all[0]}  \n${all[1 % all.length]}\n\n  x`)});
  }
  return out;
}

function randomCases(n, seed) {
  const rnd = lcg(seed);
  const pools = [
    'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', "     \t\n\r'",
    '.,;:!?-_()[]{}<>/\\|"@#$%^&*+=~`', 'sStTdDmMlLvVrReE\'', '中文日本語한국어ひらカタ',
    'éèçñüößåÆØ', '\u0301\u0308\u0323\u0302\u034f', '\u00a0\u3000\u2028\u0085\u180e\u200b',
    '١٢٣１２３²½Ⅻ', 'ǅʰſK', 'αβγΔЖж', '<|>｜▁',
  ];
  const emoji = ['😀', '👍🏽', '👨‍👩‍👧', '🇯🇵', '❤️', '🤖'];
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rnd() * 60);
    let s = '';
    for (let k = 0; k < len; k++) {
      if (rnd() < 0.04) {
        s += emoji[Math.floor(rnd() * emoji.length)];
        continue;
      }
      const pool = Array.from(pools[Math.floor(rnd() * pools.length)]);
      const run = 1 + Math.floor(rnd() * 4);
      for (let r = 0; r < run; r++) s += pool[Math.floor(rnd() * pool.length)];
    }
    out.push({name: `r${i}`, bytes: utf8(s)});
  }
  return out;
}

function longCases() {
  return [
    {name: 'long_word', bytes: utf8('a'.repeat(20000) + ' ' + 'xyz'.repeat(5000))},
    {name: 'long_digits', bytes: utf8('31415926535897932384'.repeat(500))},
    {name: 'long_cjk', bytes: utf8('机器学习深度学习人工智能'.repeat(1500))},
    {name: 'long_spaces', bytes: utf8(' '.repeat(30000) + 'x' + '\n'.repeat(5000) + ' \t'.repeat(5000))},
    {name: 'long_punct', bytes: utf8('!?'.repeat(10000) + '\n' + '=-'.repeat(10000))},
  ];
}

// About `size` bytes of mixed text for the throughput measurement.
function bigCase(size) {
  const parts = [ENGLISH, CODE, NUMBERS, CJK, EMOJI, ...WHITESPACE.slice(0, 20)];
  const rnd = lcg(7);
  const chunks = [];
  let total = 0;
  for (let i = 0; total < size; i++) {
    const s = `\n[${i}] ` + parts[Math.floor(rnd() * parts.length)];
    chunks.push(s);
    total += Buffer.byteLength(s);
  }
  return {name: `mixed_${(size / 1e6).toFixed(1)}MB`, bytes: utf8(chunks.join(''))};
}

function cases(added, opts = {}) {
  const out = [];
  const add = (group, list) => list.forEach((c) => out.push({group, ...c}));
  add('english', [{name: 'paragraph', bytes: utf8(ENGLISH)}]);
  add('code', [{name: 'c_python_js', bytes: utf8(CODE)}]);
  add('numbers', [{name: 'digits', bytes: utf8(NUMBERS)}]);
  add('cjk', [{name: 'zh_ja_ko', bytes: utf8(CJK)}]);
  add('emoji', [{name: 'zwj', bytes: utf8(EMOJI)}]);
  add('combining', [{name: 'marks', bytes: utf8(COMBINING)}]);
  add('whitespace', WHITESPACE.map((s, i) => ({name: `ws_${i}`, bytes: utf8(s)})));
  add('edge', EDGE.map((s, i) => ({name: `edge_${i}`, bytes: utf8(s)})));
  add('edge', [{name: 'nul_bytes', bytes: utf8('a\u0000b \u0000\u0000 <|\u0000|>\u0000')}]);
  add('invalid_utf8', invalidCases());
  add('special_tokens', specialCases(added));
  add('random', randomCases(opts.random || 400, opts.seed || 12345));
  add('long_runs', longCases());
  if (opts.big) add('big', [bigCase(opts.big)]);
  return out;
}

module.exports = {cases};
