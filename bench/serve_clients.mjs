// Concurrent streaming clients for bench/serve.sh, timed from the client's side:
//   node bench/serve_clients.mjs URL CLIENTS ROUNDS TOKENS [STAGGER_MS] [PROMPT_WORDS]
// Each round starts CLIENTS completions (own prompt, temperature 0, TOKENS tokens with
// ignore_eos, streamed), client k STAGGER_MS x k after the first (default 0: at once), and
// waits for all of them; PROMPT_WORDS (default 0) lengthens each prompt by that many
// words, about a token each, so that a late client's prompt is read while the others
// decode. Prints one line of the serve.sh
// table's timing fields:
//   aggregate tok/s (min / median / max over the rounds: generated tokens / the round's
//   wall time; the lower middle of an even count), per-client tok/s (median round /
//   CLIENTS), time to first token p50 / p95 (s, over every request) and the gap between a
//   request's streamed tokens p50 / p95 / max (ms, over every gap of every request: the
//   max shows the stall a newcomer's prompt causes).
// Plain fetch over loopback, no dependency; a request that fails or returns fewer tokens
// than asked ends the run with an error naming it.
const [url, C, R, N, S = '0', P = '0'] = process.argv.slice(2);
const clients = +C, rounds = +R, tokens = +N, stagger = +S, words = +P;
if (!url || !(clients >= 1) || !(rounds >= 1) || !(tokens >= 1) || !(stagger >= 0) ||
    !(words >= 0)) {
  console.error('usage: node bench/serve_clients.mjs URL CLIENTS ROUNDS TOKENS [STAGGER_MS] ' +
                '[PROMPT_WORDS]');
  process.exit(2);
}
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

// One streamed completion: the arrival time of each token's chunk and the usage count.
async function one(client, round) {
  await sleep(stagger * (client - 1));
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: `Client ${client} round ${round} says` + ' more'.repeat(words),
                           max_tokens: tokens,
                           ignore_eos: true, temperature: 0, stream: true,
                           stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`client ${client} round ${round}: HTTP ${res.status}`);
  const arrivals = [];
  let buf = '', used = -1;
  const dec = new TextDecoder();
  for await (const part of res.body) {
    buf += dec.decode(part, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const c = JSON.parse(ev.slice(6));
      if (c.usage) used = c.usage.completion_tokens;
      const ch = c.choices?.[0];
      if (ch && ch.finish_reason === null) arrivals.push(performance.now());
    }
  }
  if (used !== tokens)
    throw new Error(`client ${client} round ${round}: ${used} tokens, asked for ${tokens}`);
  return { ttft: (arrivals[0] - t0) / 1000, gaps: arrivals.slice(1).map((t, i) => t - arrivals[i]) };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};

const rates = [], ttfts = [], gaps = [];
for (let r = 0; r < rounds; r++) {
  const t0 = performance.now();
  const got = await Promise.all(Array.from({ length: clients }, (_, k) => one(k + 1, r + 1)));
  rates.push((clients * tokens) / ((performance.now() - t0) / 1000));
  for (const g of got) {
    ttfts.push(g.ttft);
    gaps.push(...g.gaps);
  }
}
const med = [...rates].sort((a, b) => a - b)[(rates.length - 1) >> 1];
console.log(`${Math.min(...rates).toFixed(2)} / ${med.toFixed(2)} / ${Math.max(...rates).toFixed(2)} | ` +
            `${(med / clients).toFixed(2)} | ${pct(ttfts, 0.5).toFixed(2)} / ${pct(ttfts, 0.95).toFixed(2)} | ` +
            `${pct(gaps, 0.5).toFixed(0)} / ${pct(gaps, 0.95).toFixed(0)} / ${Math.max(...gaps).toFixed(0)}`);
