// Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/version) through
// Ollama's own client (the `ollama` npm package), as editors and chat front ends that know
// local models through Ollama speak it.
//   node tests/server/ollama.mjs ANSWER_URL TOOL_URL JSON_URL ANSWER REASONING
// ANSWER_URL serves a tiny gpt_oss model scripted to reason REASONING, then answer ANSWER;
// TOOL_URL one that answers every chat with the Harmony call get_weather({"city":"Paris"});
// JSON_URL one that answers with the final message {"city":"Paris"}
// (tests/server/test_apis.sh). Prints one PASS/FAIL line per check.
import { Ollama } from 'ollama';
import OpenAI from 'openai';
import { check, finish } from './check.mjs';

const [answerUrl, toolUrl, jsonUrl, ANSWER, REASONING] = process.argv.slice(2);
const client = (host) => new Ollama({ host });
const answer = client(answerUrl), tools_ = client(toolUrl), json = client(jsonUrl);
const question = 'What is the capital of France?';
const weather = 'What is the weather in Paris?';
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather of a city',
                 parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const greedy = { temperature: 0 };

await check('ollama_list_show_version', async () => {
  const l = await answer.list();
  const m = l.models?.[0];
  if (l.models.length !== 1 || !m.name || m.details?.family !== 'gpt_oss' || !(m.size > 0)) return JSON.stringify(l);
  const s = await answer.show({ model: m.name });
  if (!s.capabilities?.includes('tools') || !(s.model_info?.['gpt_oss.context_length'] > 0)) return JSON.stringify(s);
  const v = await answer.version();
  if (!v.version) return JSON.stringify(v);
});

await check('ollama_chat', async () => {
  const r = await answer.chat({ model: 'm', messages: [{ role: 'user', content: question }], options: greedy });
  if (r.message.content !== ANSWER || r.message.thinking !== REASONING) return JSON.stringify(r.message);
  if (!r.done || r.done_reason !== 'stop' || !(r.eval_count > 0) || !(r.total_duration > 0)) return JSON.stringify(r);
  // the same answer as the same request in chat completions
  const c = await new OpenAI({ baseURL: `${answerUrl}/v1`, apiKey: 'x', maxRetries: 0 }).chat.completions.create({
    model: 'm', messages: [{ role: 'user', content: question }], temperature: 0 });
  if (c.choices[0].message.content !== r.message.content || c.usage.completion_tokens !== r.eval_count)
    return `chat completions ${JSON.stringify(c.choices[0].message)} ${c.usage.completion_tokens} vs ${r.eval_count}`;
});

await check('ollama_chat_stream', async () => {
  let content = '', thinking = '', n = 0, last = null;
  for await (const part of await answer.chat({ model: 'm', messages: [{ role: 'user', content: question }], options: greedy, stream: true })) {
    content += part.message.content || '';
    thinking += part.message.thinking || '';
    n++;
    last = part;
  }
  if (content !== ANSWER || thinking !== REASONING) return `${JSON.stringify(content)} / ${JSON.stringify(thinking)}`;
  if (!last.done || last.done_reason !== 'stop' || n < 5) return `${n} parts, last ${JSON.stringify(last)}`;
});

await check('ollama_generate', async () => {
  const r = await answer.generate({ model: 'm', prompt: question, options: greedy });
  if (r.response !== ANSWER || r.thinking !== REASONING || !r.done) return JSON.stringify(r);
  const cut = await answer.generate({ model: 'm', prompt: question, options: { ...greedy, num_predict: 5 } });
  if (cut.done_reason !== 'length' || cut.eval_count !== 5) return `num_predict: ${JSON.stringify(cut)}`;
});

await check('ollama_tool_call', async () => {
  const r = await tools_.chat({ model: 'm', messages: [{ role: 'user', content: weather }], tools, options: greedy });
  const c = r.message.tool_calls || [];
  if (c.length !== 1 || c[0].function.name !== 'get_weather' || c[0].function.arguments?.city !== 'Paris' || r.message.content)
    return JSON.stringify(r.message);
  const back = await tools_.chat({ model: 'm', tools, options: { num_predict: 1 }, messages: [
    { role: 'user', content: weather }, r.message, { role: 'tool', tool_name: 'get_weather', content: 'sunny' }] });
  if (!back.done) return JSON.stringify(back);
  let streamed = null;
  for await (const part of await tools_.chat({ model: 'm', messages: [{ role: 'user', content: weather }], tools, stream: true }))
    if (part.message.tool_calls) streamed = part.message.tool_calls;
  if (streamed?.[0]?.function?.arguments?.city !== 'Paris') return `streamed ${JSON.stringify(streamed)}`;
});

await check('ollama_format', async () => {
  const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  for (const format of ['json', schema]) {
    const r = await json.chat({ model: 'm', messages: [{ role: 'user', content: weather }], format, options: greedy });
    if (JSON.parse(r.message.content).city !== 'Paris') return `${JSON.stringify(format)}: ${r.message.content}`;
  }
});

await check('ollama_refuses_images', async () => {
  try {
    await answer.chat({ model: 'm', messages: [{ role: 'user', content: question, images: ['aGk='] }] });
    return 'accepted';
  } catch (e) {
    if (e.status_code !== 400 || !e.message.includes('messages[0].images')) return `${e.status_code} ${e.message}`;
  }
});

finish();
