// The server seen through the official `openai` npm client (node_modules/openai).
//   node tests/server/client.mjs CONFIG.json
// CONFIG (written by test_serve.sh): URLs of two servers (main: the random tiny model;
// keyed: the scripted model behind an API key) and what `moestream run` / `chat` gave
// for the same requests. Prints one PASS/FAIL line per check.
import fs from 'node:fs';
import OpenAI from 'openai';
import { check, finish } from './check.mjs';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

const opts = { maxRetries: 0, timeout: 120000 };
const main = new OpenAI({ ...opts, baseURL: `${cfg.main}/v1`, apiKey: 'unused' });
const keyed = new OpenAI({ ...opts, baseURL: `${cfg.keyed}/v1`, apiKey: cfg.key });
const wrong = new OpenAI({ ...opts, baseURL: `${cfg.keyed}/v1`, apiKey: 'not-the-key' });
const Q = [{ role: 'user', content: cfg.question }];

// Collects a streamed response: content, reasoning, chunks, final ids.
async function collect(stream) {
  const r = { content: '', reasoning: '', chunks: [], finish: null, ids: null, usage: null,
              role: null };
  for await (const c of stream) {
    r.chunks.push(c);
    if (c.usage) r.usage = c.usage;
    if (c.moestream) r.ids = c.moestream.ids;
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta) {
      if (ch.delta.role) r.role = ch.delta.role;
      r.content += ch.delta.content ?? '';
      r.reasoning += ch.delta.reasoning_content ?? '';
    } else {
      r.content += ch.text ?? '';
    }
    if (ch.finish_reason) r.finish = ch.finish_reason;
  }
  return r;
}

await check('models_list', async () => {
  const l = await main.models.list();
  const ids = l.data.map((m) => m.id);
  return same(ids, [cfg.model_name]) ? '' : `got ${JSON.stringify(ids)}`;
});

let first;
await check('chat_ids_equal_run', async () => {
  first = await main.chat.completions.create({ model: cfg.model_name, messages: Q,
                                               max_tokens: 16, temperature: 0 });
  const ch = first.choices[0];
  if (!same(first.moestream.ids, cfg.chat_ids))
    return `ids ${first.moestream.ids} vs run ${cfg.chat_ids}`;
  if (first.object !== 'chat.completion' || ch.message.role !== 'assistant' ||
      ch.finish_reason !== 'length')
    return `object ${first.object}, role ${ch.message.role}, finish ${ch.finish_reason}`;
  if (ch.message.content !== cfg.chat_text)
    return `content ${JSON.stringify(ch.message.content)} vs run ${JSON.stringify(cfg.chat_text)}`;
  const u = first.usage;
  if (u.prompt_tokens !== cfg.prompt_tokens || u.completion_tokens !== 16 ||
      u.total_tokens !== cfg.prompt_tokens + 16)
    return `usage ${JSON.stringify(u)}, prompt has ${cfg.prompt_tokens} tokens`;
  return '';
});

await check('chat_stream_equals_nonstream', async () => {
  const s = await collect(await main.chat.completions.create({
    messages: Q, max_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true } }));
  const m = first.choices[0].message;
  if (s.role !== 'assistant') return `first delta role ${s.role}`;
  if (s.content !== m.content || s.reasoning !== (m.reasoning_content ?? ''))
    return `streamed ${JSON.stringify([s.content, s.reasoning])} vs ${JSON.stringify([m.content, m.reasoning_content])}`;
  if (s.finish !== 'length' || !same(s.ids, cfg.chat_ids))
    return `finish ${s.finish}, ids ${s.ids}`;
  const last = s.chunks[s.chunks.length - 1];
  if (!s.usage || last.choices.length !== 0 || s.usage.completion_tokens !== 16 ||
      s.usage.prompt_tokens !== cfg.prompt_tokens)
    return `usage chunk ${JSON.stringify(last)}`;
  if (s.chunks.some((c) => c.object !== 'chat.completion.chunk' || c.id !== s.chunks[0].id))
    return 'chunks differ in object or id';
  return '';
});

await check('chat_multiturn_equals_cli_chat_and_reuses_prefix', async () => {
  const m = first.choices[0].message;
  const r = await main.chat.completions.create({
    messages: [...Q, { role: 'assistant', content: m.content,
                       reasoning_content: m.reasoning_content },
               { role: 'user', content: cfg.question2 }],
    max_tokens: 16, temperature: 0 });
  if (!same(r.moestream.ids, cfg.chat2_ids))
    return `ids ${r.moestream.ids} vs moestream chat ${cfg.chat2_ids}`;
  const cached = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  return cached > 50 ? '' : `only ${cached} prompt tokens reused`;
});

let comp;
await check('completion_ids_equal_run_raw', async () => {
  comp = await main.completions.create({ model: cfg.model_name, prompt: cfg.comp_prompt,
                                         max_tokens: 12, temperature: 0 });
  if (!same(comp.moestream.ids, cfg.comp_ids))
    return `ids ${comp.moestream.ids} vs run --raw ${cfg.comp_ids}`;
  if (comp.object !== 'text_completion' || comp.choices[0].text !== cfg.comp_text)
    return `object ${comp.object}, text ${JSON.stringify(comp.choices[0].text)} vs ${JSON.stringify(cfg.comp_text)}`;
  return comp.usage.completion_tokens === 12 ? '' : `usage ${JSON.stringify(comp.usage)}`;
});

await check('completion_stream_equals_nonstream', async () => {
  const s = await collect(await main.completions.create({
    prompt: cfg.comp_prompt, max_tokens: 12, temperature: 0, stream: true }));
  if (s.content !== comp.choices[0].text) return `${JSON.stringify(s.content)} vs ${JSON.stringify(comp.choices[0].text)}`;
  if (s.usage) return 'usage chunk without stream_options.include_usage';
  return s.finish === 'length' && same(s.ids, cfg.comp_ids) ? '' : `finish ${s.finish} ids ${s.ids}`;
});

await check('seed_reproducible', async () => {
  const a = await main.completions.create({ prompt: cfg.comp_prompt, max_tokens: 8,
                                            temperature: 1, seed: 7 });
  const b = await main.completions.create({ prompt: cfg.comp_prompt, max_tokens: 8,
                                            temperature: 1, seed: 7 });
  return same(a.moestream.ids, b.moestream.ids) ? '' : `${a.moestream.ids} vs ${b.moestream.ids}`;
});

await check('bad_request_error_through_client', async () => {
  try {
    await main.chat.completions.create({ messages: Q, temperature: 5 });
    return 'accepted temperature 5';
  } catch (e) {
    return e.status === 400 && e.param === 'temperature' && e.type === 'invalid_request_error'
      ? '' : `status ${e.status} param ${e.param} type ${e.type}`;
  }
});

// ---- the scripted model (keyed server): reasoning split, stop sequences, API key ----

const S = [{ role: 'user', content: 'What is the capital of France?' }];
await check('reasoning_split_nonstream', async () => {
  const r = await keyed.chat.completions.create({ messages: S, max_tokens: 64, temperature: 0 });
  const m = r.choices[0].message;
  if (m.reasoning_content !== cfg.script_reasoning || m.content !== cfg.script_answer)
    return `reasoning ${JSON.stringify(m.reasoning_content)} content ${JSON.stringify(m.content)}`;
  if (m.content !== cfg.script_run_answer || m.reasoning_content !== cfg.script_run_reasoning)
    return `differs from run: ${JSON.stringify([cfg.script_run_answer, cfg.script_run_reasoning])}`;
  return r.choices[0].finish_reason === 'stop' ? '' : `finish ${r.choices[0].finish_reason}`;
});

await check('reasoning_split_stream', async () => {
  const s = await collect(await keyed.chat.completions.create({
    messages: S, max_tokens: 64, temperature: 0, stream: true }));
  if (s.reasoning !== cfg.script_reasoning || s.content !== cfg.script_answer)
    return `reasoning ${JSON.stringify(s.reasoning)} content ${JSON.stringify(s.content)}`;
  const order = s.chunks.map((c) => c.choices[0]?.delta?.reasoning_content ? 'R'
                                    : c.choices[0]?.delta?.content ? 'C' : '').join('');
  if (!/^R+C+$/.test(order)) return `delta order ${order}`;
  return s.finish === 'stop' ? '' : `finish ${s.finish}`;
});

const cut = (stop) => cfg.script_answer.slice(0, cfg.script_answer.indexOf(stop));
await check('stop_string_nonstream', async () => {
  const r = await keyed.chat.completions.create({ messages: S, max_tokens: 64, temperature: 0,
                                                  stop: ' is' });
  const c = r.choices[0];
  return c.message.content === cut(' is') && c.finish_reason === 'stop' ? ''
    : `content ${JSON.stringify(c.message.content)} finish ${c.finish_reason}`;
});

await check('stop_ends_generation_at_its_token', async () => {
  // no chat template: the prompt "assistant" starts the chain, its text is all content
  const r = await keyed.completions.create({ prompt: 'assistant', max_tokens: 64,
                                             temperature: 0, stop: ['Let me'] });
  const c = r.choices[0];
  return c.text === '<|channel|>analysis<|message|>' && c.finish_reason === 'stop' &&
    r.usage.completion_tokens === 5 ? ''
    : `text ${JSON.stringify(c.text)} finish ${c.finish_reason} ${r.usage.completion_tokens} tokens`;
});

await check('stop_list_across_tokens_stream', async () => {
  const stop = ['never appears', 'ty kno']; // spans the tokens " city" and " known"
  const s = await collect(await keyed.chat.completions.create({
    messages: S, max_tokens: 64, temperature: 0, stream: true, stop }));
  return s.content === cut('ty kno') && s.finish === 'stop' && s.reasoning === cfg.script_reasoning
    ? '' : `content ${JSON.stringify(s.content)} finish ${s.finish}`;
});

await check('stop_not_matched_keeps_everything', async () => {
  const r = await keyed.chat.completions.create({ messages: S, max_tokens: 64, temperature: 0,
                                                  stop: ['parks!', 'Paris,,'] });
  return r.choices[0].message.content === cfg.script_answer ? ''
    : `content ${JSON.stringify(r.choices[0].message.content)}`;
});

await check('max_tokens_length', async () => {
  const r = await keyed.chat.completions.create({ messages: S, max_completion_tokens: 5,
                                                  temperature: 0 });
  const c = r.choices[0]; // <|channel|> analysis <|message|> Let " me"
  return c.finish_reason === 'length' && r.usage.completion_tokens === 5 &&
    c.message.reasoning_content === 'Let me' && c.message.content === ''
    ? '' : `${c.finish_reason} ${JSON.stringify(c.message)}`;
});

await check('api_key_wrong_is_401', async () => {
  try {
    await wrong.models.list();
    return 'accepted a wrong key';
  } catch (e) {
    return e.status === 401 && e.code === 'invalid_api_key' ? '' : `status ${e.status} code ${e.code}`;
  }
});

finish();
