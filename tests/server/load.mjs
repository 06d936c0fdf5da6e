// Load test of moestream serve from a second process, on loopback only, bounded in count
// and time:
//   node tests/server/load.mjs URL [CLIENTS=16] [REQUESTS=4] [MAX_TOKENS=8] [LIMIT_S=600]
// Every request has its own prompt, length (MAX_TOKENS/2 .. MAX_TOKENS+4) and sampling:
// greedy, or temperature 0.8 / top_p 0.9 with its own seed. First each one is sent alone,
// one after the other (the reference answers); then CLIENTS clients send theirs at once,
// REQUESTS each in turn, mixing chat / completions and streaming / not. Each answer under
// load must equal the one it got alone (same token ids, same text): nothing lost, nothing
// mixed up between requests. Prints PASS/FAIL lines and a results table (indented).
import OpenAI from 'openai';
import { pass, fail, finish } from './check.mjs';

const [url, C = '16', R = '4', N = '8', L = '600'] = process.argv.slice(2);
const clients = +C, perClient = +R, maxTokens = +N, limitS = +L;
const t0 = performance.now();
const timer = setTimeout(() => {
  console.log(`FAIL load_time_limit: still running after ${limitS} s`);
  process.exit(1);
}, limitS * 1000);

const api = (i) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0,
                                timeout: limitS * 1000 });
const plan = [];
for (let i = 0; i < clients; i++)
  for (let k = 0; k < perClient; k++)
    plan.push({ client: i, k, chat: i % 2 === 0, stream: (i >> 1) % 2 === 1,
                max: Math.max(1, (maxTokens >> 1) + ((i * 7 + k * 3) % (maxTokens - (maxTokens >> 1) + 5))),
                sample: (i + k) % 3 === 1, seed: 1000 + i * 31 + k,
                prompt: `Request ${i}.${k}: tell me about the number ${i * perClient + k}.` });

async function ask(oa, p) {
  const body = { max_tokens: p.max, stream: p.stream,
                 ...(p.sample ? { temperature: 0.8, top_p: 0.9, seed: p.seed } : { temperature: 0 }) };
  const t = performance.now();
  let ids = null, text = '', reasoning = '', n = 0;
  const res = p.chat
    ? await oa.chat.completions.create({ ...body, messages: [{ role: 'user', content: p.prompt }] })
    : await oa.completions.create({ ...body, prompt: p.prompt });
  if (p.stream) {
    for await (const c of res) {
      if (c.moestream) ids = c.moestream.ids;
      const ch = c.choices[0];
      if (!ch) continue;
      text += (ch.delta ? ch.delta.content : ch.text) ?? '';
      reasoning += ch.delta?.reasoning_content ?? '';
    }
  } else {
    ids = res.moestream.ids;
    const ch = res.choices[0];
    text = ch.message ? ch.message.content : ch.text;
    reasoning = ch.message?.reasoning_content ?? '';
  }
  n = ids ? ids.length : 0;
  return { key: JSON.stringify([ids, text, reasoning]), n, ms: performance.now() - t };
}

// 1. alone, in sequence
const alone = new Map();
const solo = api(0);
for (const p of plan) alone.set(p.prompt, (await ask(solo, p)).key);
const distinct = new Set(alone.values()).size;
const tSeq = performance.now();

// 2. all clients at once
const lat = [], errors = [], mixed = [];
let tokens = 0;
const tLoad = performance.now();
await Promise.all([...Array(clients).keys()].map(async (i) => {
  const oa = api(i);
  for (const p of plan.filter((q) => q.client === i)) {
    try {
      const r = await ask(oa, p);
      lat.push(r.ms);
      tokens += r.n;
      if (r.key !== alone.get(p.prompt)) mixed.push(p.prompt);
    } catch (e) {
      errors.push(`${p.prompt}: ${e.message}`);
    }
  }
}));
const wall = (performance.now() - tLoad) / 1000;

// 3. still serving
let alive = false;
try {
  const h = await fetch(`${url}/health`);
  alive = h.ok && (await h.json()).status === 'ok' &&
          (await ask(solo, plan[0])).key === alone.get(plan[0].prompt);
} catch (e) { alive = false; }

lat.sort((a, b) => a - b);
const q = (f) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(f * lat.length))] : NaN);
const total = plan.length;
console.log(`     load: ${clients} clients x ${perClient} requests, max_tokens ${maxTokens}, ` +
            `greedy; chat/completions x stream/non-stream mixed; ${distinct} distinct answers; ` +
            `reference pass (alone, sequential) ${((tSeq - t0) / 1000).toFixed(1)} s`);
console.log('     | requests | errors | mismatched | p50 latency | p95 latency | max latency | ' +
            'throughput | generated tokens/s | wall |');
console.log('     |---|---|---|---|---|---|---|---|---|');
console.log(`     | ${total} | ${errors.length} | ${mixed.length} | ${(q(0.5) / 1000).toFixed(2)} s | ` +
            `${(q(0.95) / 1000).toFixed(2)} s | ${(lat[lat.length - 1] / 1000).toFixed(2)} s | ` +
            `${(lat.length / wall).toFixed(2)} req/s | ${(tokens / wall).toFixed(1)} | ` +
            `${wall.toFixed(1)} s |`);
errors.length ? fail('load_no_errors', errors.slice(0, 3).join('; ')) : pass('load_no_errors');
mixed.length || lat.length !== total
  ? fail('load_answers_equal_alone', `${mixed.length} differ: ${mixed.slice(0, 3).join('; ')}`)
  : pass('load_answers_equal_alone');
distinct > total / 2 ? pass('load_prompts_distinguishable')
  : fail('load_prompts_distinguishable', `only ${distinct} distinct answers of ${total}`);
alive ? pass('load_server_alive_after') : fail('load_server_alive_after', 'health or request failed');
clearTimeout(timer);
finish();
