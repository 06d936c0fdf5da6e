// Tool calls and logprobs through the official `openai` npm client.
//   node tests/server/tools.mjs URL
// URL serves a tiny gpt_oss model scripted to answer every chat with the Harmony
// call  commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
// Prints one PASS/FAIL line per check.
import OpenAI from 'openai';
import { check, finish } from './check.mjs';

const url = process.argv[2];

const client = new OpenAI({ maxRetries: 0, timeout: 120000, baseURL: `${url}/v1`, apiKey: 'x' });
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];

let call = null;
await check('openai_tool_call', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: ask, tools, temperature: 0 });
  const ch = r.choices[0];
  if (ch.finish_reason !== 'tool_calls') return `finish_reason ${ch.finish_reason}`;
  const tc = ch.message.tool_calls || [];
  if (tc.length !== 1) return `${tc.length} tool calls: ${JSON.stringify(ch.message)}`;
  call = tc[0];
  if (call.type !== 'function' || !call.id) return `call ${JSON.stringify(call)}`;
  if (call.function.name !== 'get_weather') return `name ${call.function.name}`;
  if (JSON.parse(call.function.arguments).city !== 'Paris') return `arguments ${call.function.arguments}`;
  if (ch.message.content) return `content ${JSON.stringify(ch.message.content)} (the call leaked into it)`;
  if (ch.message.reasoning_content) return `reasoning ${JSON.stringify(ch.message.reasoning_content)}`;
});

await check('openai_streamed_tool_call', async () => {
  const s = await client.chat.completions.create({ model: 'm', messages: ask, tools, temperature: 0,
                                                   stream: true });
  const calls = [];
  let finish = null, text = '';
  for await (const c of s) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) finish = ch.finish_reason;
    text += (ch.delta.content || '') + (ch.delta.reasoning_content || '');
    for (const d of ch.delta.tool_calls || []) {
      const t = calls[d.index] ||= { id: '', name: '', arguments: '' };
      if (d.id) t.id = d.id;
      if (d.function?.name) t.name += d.function.name;
      if (d.function?.arguments) t.arguments += d.function.arguments;
    }
  }
  if (finish !== 'tool_calls') return `finish_reason ${finish}`;
  if (calls.length !== 1 || calls[0].name !== 'get_weather' || !calls[0].id) return JSON.stringify(calls);
  if (JSON.parse(calls[0].arguments).city !== 'Paris') return `arguments ${calls[0].arguments}`;
  if (text.includes('get_weather') || text.includes('Paris')) return `call text streamed as text: ${text}`;
});

await check('openai_tool_result_round_trip', async () => {
  if (!call) return 'no call from the first request';
  const msgs = [...ask, { role: 'assistant', content: null, tool_calls: [call] },
                { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "sky": "clear"}' }];
  const r = await client.chat.completions.create({ model: 'm', messages: msgs, tools, temperature: 0,
                                                   max_tokens: 4 });
  const first = await client.chat.completions.create({ model: 'm', messages: ask, tools, temperature: 0,
                                                       max_tokens: 4 });
  if (!(r.usage.prompt_tokens > first.usage.prompt_tokens + 10))
    return `prompt_tokens ${r.usage.prompt_tokens} vs ${first.usage.prompt_tokens}: the result was not rendered`;
});

await check('openai_tools_change_the_prompt', async () => {
  const a = await client.chat.completions.create({ model: 'm', messages: ask, tools, max_tokens: 1 });
  const b = await client.chat.completions.create({ model: 'm', messages: ask, max_tokens: 1 });
  const c = await client.chat.completions.create({ model: 'm', messages: ask, tools, tool_choice: 'none',
                                                   max_tokens: 1 });
  if (!(a.usage.prompt_tokens > b.usage.prompt_tokens)) return `with tools ${a.usage.prompt_tokens}, without ${b.usage.prompt_tokens}`;
  if (c.usage.prompt_tokens !== b.usage.prompt_tokens) return `tool_choice none rendered tools (${c.usage.prompt_tokens})`;
});

await check('openai_logprobs', async () => {
  const r = await client.chat.completions.create({ model: 'm', messages: ask, temperature: 0,
                                                   max_tokens: 5, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs?.content || [];
  if (lp.length !== r.usage.completion_tokens) return `${lp.length} entries for ${r.usage.completion_tokens} tokens`;
  for (const e of lp) {
    if (!(e.logprob <= 0) || e.top_logprobs.length !== 3 || !Array.isArray(e.bytes)) return JSON.stringify(e);
    if (Math.abs(e.top_logprobs[0].logprob - e.logprob) > 1e-9 || e.top_logprobs[0].token !== e.token)
      return `greedy token is not the top alternative: ${JSON.stringify(e)}`;
    for (let k = 1; k < 3; k++) if (e.top_logprobs[k].logprob > e.top_logprobs[k - 1].logprob) return `unsorted ${JSON.stringify(e)}`;
  }
});

await check('openai_streamed_logprobs', async () => {
  const s = await client.chat.completions.create({ model: 'm', messages: ask, temperature: 0, max_tokens: 5,
                                                   logprobs: true, top_logprobs: 2, stream: true,
                                                   stream_options: { include_usage: true } });
  let n = 0, usage = null;
  for await (const c of s) {
    if (c.usage) usage = c.usage;
    for (const e of c.choices[0]?.logprobs?.content || []) { n++; if (e.top_logprobs.length !== 2) return JSON.stringify(e); }
  }
  if (!usage || n !== usage.completion_tokens) return `${n} entries streamed for ${usage?.completion_tokens} tokens`;
});

await check('openai_completion_logprobs', async () => {
  const r = await client.completions.create({ model: 'm', prompt: 'Hello', max_tokens: 3, temperature: 0, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  if (!lp || lp.tokens.length !== 3 || lp.token_logprobs.length !== 3 || lp.top_logprobs.length !== 3) return JSON.stringify(lp);
  if (lp.tokens.join('') !== r.choices[0].text) return `tokens ${JSON.stringify(lp.tokens)} vs text ${JSON.stringify(r.choices[0].text)}`;
});

// tool_choice required / named: the call is forced by constrained decoding; the
// scripted answer is that call, so the output is the same, now guaranteed
for (const [name, choice] of [['openai_tool_choice_named', { type: 'function', function: { name: 'get_weather' } }],
                              ['openai_tool_choice_required', 'required']]) {
  await check(name, async () => {
    const r = await client.chat.completions.create({ model: 'm', messages: ask, tools, tool_choice: choice,
                                                     temperature: 0 });
    const ch = r.choices[0], tc = ch.message.tool_calls || [];
    if (ch.finish_reason !== 'tool_calls' || tc.length !== 1 || tc[0].function.name !== 'get_weather')
      return JSON.stringify(ch);
    if (JSON.parse(tc[0].function.arguments).city !== 'Paris') return `arguments ${tc[0].function.arguments}`;
  });
}

for (const [name, body, param] of [
  ['refuses_logit_bias', { logit_bias: { '11': 5 } }, 'logit_bias'],
  ['refuses_unknown_forced_tool', { tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice'],
  ['refuses_unsupported_schema', { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '^a' } } } }, 'response_format'],
]) {
  await check(name, async () => {
    try {
      await client.chat.completions.create({ model: 'm', messages: ask, max_tokens: 1, ...body });
      return 'accepted';
    } catch (e) {
      if (e.status !== 400 || e.param !== param) return `status ${e.status}, param ${e.param}: ${e.message}`;
    }
  });
}
finish();
