// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) through
// Anthropic's own client (@anthropic-ai/sdk), the one agents such as Claude Code are built on.
//   node tests/server/messages.mjs ANSWER_URL TOOL_URL KEYED_URL ANSWER REASONING
// ANSWER_URL serves a tiny gpt_oss model scripted to reason REASONING, then answer ANSWER;
// TOOL_URL one that answers every chat with the Harmony call get_weather({"city":"Paris"});
// KEYED_URL the answer model behind --api-key k (tests/server/test_apis.sh). Every
// answer is also asked of /v1/chat/completions: the same conversation in either API must
// give the same prompt (token counts) and the same text. One PASS/FAIL line per check.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { check, finish } from './check.mjs';

const [answerUrl, toolUrl, keyedUrl, ANSWER, REASONING] = process.argv.slice(2);
const anthropic = (url, apiKey = 'x') => new Anthropic({ baseURL: url, apiKey, maxRetries: 0, timeout: 120000 });
const openai = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0, timeout: 120000 });
const answer = anthropic(answerUrl), tools_ = anthropic(toolUrl);
const question = 'What is the capital of France?';
const weather = 'What is the weather in Paris?';
const tools = [{ name: 'get_weather', description: 'Current weather of a city',
                 input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const chatTools = tools.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.input_schema } }));
const blocks = (m, type) => m.content.filter((b) => b.type === type);
const textOf = (m) => blocks(m, 'text').map((b) => b.text).join('');
const thinkingOf = (m) => blocks(m, 'thinking').map((b) => b.thinking).join('');
const prompt = (u) => u.input_tokens + (u.cache_read_input_tokens || 0) + (u.cache_creation_input_tokens || 0);

await check('messages_answer', async () => {
  const m = await answer.messages.create({ model: 'm', max_tokens: 200, temperature: 0,
                                           messages: [{ role: 'user', content: question }] });
  if (m.type !== 'message' || m.role !== 'assistant' || !m.id.startsWith('msg_')) return JSON.stringify(m).slice(0, 300);
  if (m.content.map((b) => b.type).join() !== 'thinking,text') return `blocks ${JSON.stringify(m.content)}`;
  if (textOf(m) !== ANSWER || thinkingOf(m) !== REASONING) return `content ${JSON.stringify(m.content)}`;
  if (m.stop_reason !== 'end_turn' || m.stop_sequence !== null) return `stop ${m.stop_reason} ${m.stop_sequence}`;
  if (!(prompt(m.usage) > 0 && m.usage.output_tokens > 0)) return JSON.stringify(m.usage);
});

await check('messages_same_as_chat', async () => {
  for (const system of [undefined, 'Answer in one sentence.', [{ type: 'text', text: 'Answer in one sentence.' }]]) {
    const m = await answer.messages.create({ model: 'm', max_tokens: 200, temperature: 0, system,
                                             messages: [{ role: 'user', content: [{ type: 'text', text: question }] }] });
    const msgs = [...(system ? [{ role: 'system', content: 'Answer in one sentence.' }] : []), { role: 'user', content: question }];
    const c = await openai(answerUrl).chat.completions.create({ model: 'm', messages: msgs, temperature: 0 });
    const cm = c.choices[0].message;
    if (prompt(m.usage) !== c.usage.prompt_tokens) return `system ${JSON.stringify(system)}: prompt ${JSON.stringify(m.usage)}, chat ${c.usage.prompt_tokens}`;
    if (m.usage.output_tokens !== c.usage.completion_tokens) return `output_tokens ${m.usage.output_tokens} vs ${c.usage.completion_tokens}`;
    if (textOf(m) !== cm.content || thinkingOf(m) !== cm.reasoning_content) return `${JSON.stringify(m.content)} vs ${JSON.stringify(cm)}`;
  }
});

await check('messages_multi_turn', async () => {
  // an earlier answer sent back as the blocks it came in: the prompt of the chat messages
  const first = await answer.messages.create({ model: 'm', max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: question }] });
  const next = 'And of Italy?';
  const m = await answer.messages.create({ model: 'm', max_tokens: 2, temperature: 0, messages: [
    { role: 'user', content: question }, { role: 'assistant', content: first.content }, { role: 'user', content: next }] });
  const c = await openai(answerUrl).chat.completions.create({ model: 'm', max_tokens: 2, temperature: 0, messages: [
    { role: 'user', content: question }, { role: 'assistant', content: ANSWER, reasoning_content: REASONING },
    { role: 'user', content: next }] });
  if (prompt(m.usage) !== c.usage.prompt_tokens) return `prompt ${JSON.stringify(m.usage)}, chat ${c.usage.prompt_tokens}`;
  if (!(m.usage.cache_read_input_tokens > 0)) return `no prompt-cache share reported: ${JSON.stringify(m.usage)}`;
});

// a system message inside the conversation, as Claude Code sends its environment: accepted;
// gpt-oss's template leaves it out, which the server's log must say (test_apis.sh)
await check('messages_system_message_inside', async () => {
  const m = await answer.messages.create({ model: 'm', max_tokens: 1, messages: [
    { role: 'user', content: question }, { role: 'system', content: 'Environment: the test suite' },
    { role: 'user', content: 'Go on.' }] });
  if (m.type !== 'message') return JSON.stringify(m);
});

await check('messages_max_tokens', async () => {
  const m = await answer.messages.create({ model: 'm', max_tokens: 5, temperature: 0, messages: [{ role: 'user', content: question }] });
  if (m.stop_reason !== 'max_tokens' || m.usage.output_tokens !== 5) return `${m.stop_reason} ${JSON.stringify(m.usage)}`;
});

await check('messages_stop_sequence', async () => {
  const m = await answer.messages.create({ model: 'm', max_tokens: 200, temperature: 0, stop_sequences: [' Paris'],
                                           messages: [{ role: 'user', content: question }] });
  if (m.stop_reason !== 'stop_sequence' || m.stop_sequence !== ' Paris') return `${m.stop_reason} ${m.stop_sequence}`;
  if (textOf(m) !== 'The capital of France is') return `text ${JSON.stringify(textOf(m))}`;
});

await check('messages_stream', async () => {
  const s = answer.messages.stream({ model: 'm', max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: question }] });
  const types = [];
  let text = '', thinking = '';
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'thinking_delta') thinking += ev.delta.thinking;
  }
  const m = await s.finalMessage();
  if (types[0] !== 'message_start' || types.at(-1) !== 'message_stop' || types.at(-2) !== 'message_delta') return `events ${types}`;
  if (text !== ANSWER || thinking !== REASONING) return `deltas ${JSON.stringify(text)} / ${JSON.stringify(thinking)}`;
  const whole = await answer.messages.create({ model: 'm', max_tokens: 200, temperature: 0, messages: [{ role: 'user', content: question }] });
  if (JSON.stringify(m.content) !== JSON.stringify(whole.content) || m.stop_reason !== whole.stop_reason ||
      m.usage.output_tokens !== whole.usage.output_tokens || prompt(m.usage) !== prompt(whole.usage))
    return `streamed ${JSON.stringify(m)} vs whole ${JSON.stringify(whole)}`;
});

let use = null;
await check('messages_tool_use', async () => {
  const m = await tools_.messages.create({ model: 'm', max_tokens: 200, temperature: 0, tools, messages: [{ role: 'user', content: weather }] });
  if (m.stop_reason !== 'tool_use' || m.content.length !== 1) return `${m.stop_reason} ${JSON.stringify(m.content)}`;
  use = m.content[0];
  if (use.type !== 'tool_use' || use.name !== 'get_weather' || !use.id || use.input?.city !== 'Paris' || Object.keys(use.input).length !== 1)
    return JSON.stringify(use);
});

await check('messages_streamed_tool_use', async () => {
  const s = tools_.messages.stream({ model: 'm', max_tokens: 200, temperature: 0, tools, messages: [{ role: 'user', content: weather }] });
  let json = '';
  for await (const ev of s) {
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') json += ev.delta.partial_json;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') return `text streamed: ${ev.delta.text}`;
  }
  const m = await s.finalMessage();
  if (JSON.parse(json).city !== 'Paris') return `input_json ${json}`;
  if (m.stop_reason !== 'tool_use' || m.content[0]?.input?.city !== 'Paris') return JSON.stringify(m);
});

await check('messages_tool_result_round_trip', async () => {
  if (!use) return 'no tool_use from the first request';
  const result = '{"temperature": 21, "sky": "clear"}';
  const m = await tools_.messages.create({ model: 'm', max_tokens: 4, temperature: 0, tools, messages: [
    { role: 'user', content: weather }, { role: 'assistant', content: [use] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: result }] }] });
  const c = await openai(toolUrl).chat.completions.create({ model: 'm', max_tokens: 4, temperature: 0, tools: chatTools, messages: [
    { role: 'user', content: weather },
    { role: 'assistant', content: null, tool_calls: [{ id: use.id, type: 'function', function: { name: use.name, arguments: JSON.stringify(use.input) } }] },
    { role: 'tool', tool_call_id: use.id, content: result }] });
  if (prompt(m.usage) !== c.usage.prompt_tokens) return `prompt ${JSON.stringify(m.usage)}, the same turn in chat ${c.usage.prompt_tokens}`;
});

await check('messages_tool_choice', async () => {
  for (const tool_choice of [{ type: 'any' }, { type: 'tool', name: 'get_weather' }]) {
    const m = await tools_.messages.create({ model: 'm', max_tokens: 200, temperature: 0, tools, tool_choice,
                                             messages: [{ role: 'user', content: weather }] });
    const u = blocks(m, 'tool_use');
    if (u.length !== 1 || u[0].input?.city !== 'Paris') return `${JSON.stringify(tool_choice)}: ${JSON.stringify(m.content)}`;
  }
  const a = await tools_.messages.create({ model: 'm', max_tokens: 1, tools, messages: [{ role: 'user', content: weather }] });
  const b = await tools_.messages.create({ model: 'm', max_tokens: 1, tools, tool_choice: { type: 'none' }, messages: [{ role: 'user', content: weather }] });
  if (!(prompt(b.usage) < prompt(a.usage))) return `tool_choice none still rendered the tools (${prompt(b.usage)} vs ${prompt(a.usage)})`;
});

await check('messages_count_tokens', async () => {
  const body = { model: 'm', tools, system: 'Be brief.', messages: [{ role: 'user', content: weather }] };
  const n = await tools_.messages.countTokens(body);
  const m = await tools_.messages.create({ ...body, max_tokens: 1 });
  if (n.input_tokens !== prompt(m.usage)) return `count ${n.input_tokens}, a request's prompt ${JSON.stringify(m.usage)}`;
});

await check('messages_api_key', async () => {
  const m = await anthropic(keyedUrl, 'k').messages.create({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: question }] });
  if (m.type !== 'message') return JSON.stringify(m);
  try {
    await anthropic(keyedUrl, 'wrong').messages.create({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: question }] });
    return 'a wrong x-api-key was accepted';
  } catch (e) {
    if (e.status !== 401 || e.error?.type !== 'error' || e.error?.error?.type !== 'authentication_error') return `${e.status} ${JSON.stringify(e.error)}`;
  }
});

for (const [name, body, says] of [
  ['messages_refuses_images', { messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] }] }, 'messages[0].content[0].type'],
  ['messages_refuses_server_tools', { tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 'tools[0].type'],
  ['messages_refuses_missing_max_tokens', { max_tokens: undefined }, 'max_tokens'],
]) {
  await check(name, async () => {
    try {
      await answer.messages.create({ model: 'm', max_tokens: 1, messages: [{ role: 'user', content: question }], ...body });
      return 'accepted';
    } catch (e) {
      if (e.status !== 400 || e.error?.error?.type !== 'invalid_request_error' || !e.error.error.message.includes(says))
        return `${e.status} ${JSON.stringify(e.error)}`;
    }
  });
}

finish();
