// OpenAI's Responses API (POST /v1/responses) through the clients that speak it by
// default: the official `openai` npm client (responses.create, responses.stream) and the
// Vercel AI SDK's OpenAI provider (@ai-sdk/openai: `provider(model)` is a Responses
// model), and LangChain's ChatOpenAI with useResponsesApi.
//   node tests/server/responses.mjs ANSWER_URL TOOL_URL JSON_URL NSTOOL_URL ANSWER REASONING
// ANSWER_URL serves a tiny gpt_oss model scripted to reason REASONING, then answer ANSWER;
// TOOL_URL one that answers every chat with the Harmony call get_weather({"city":"Paris"});
// JSON_URL one that answers with the final message {"city":"Paris"}; NSTOOL_URL one that
// calls weather__get({"city":"Paris"})
// (tests/server/test_apis.sh). Every answer is also asked of /v1/chat/completions:
// the same request in either API must give the same prompt (token counts) and the same
// text. Prints one PASS/FAIL line per check.
import OpenAI from 'openai';
import { generateText, streamText, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { z } from 'zod';
import { check, finish } from './check.mjs';

const [answerUrl, toolUrl, jsonUrl, nsToolUrl, ANSWER, REASONING] = process.argv.slice(2);
globalThis.AI_SDK_LOG_WARNINGS = false;
const client = (url) => new OpenAI({ maxRetries: 0, timeout: 120000, baseURL: `${url}/v1`, apiKey: 'x' });
const answer = client(answerUrl), tools_ = client(toolUrl), json = client(jsonUrl);
const question = 'What is the capital of France?';
const weather = 'What is the weather in Paris?';
const tools = [{
  type: 'function', name: 'get_weather', description: 'Current weather of a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'],
                additionalProperties: false },
}];
const chatTools = tools.map(({ type, ...f }) => ({ type, function: f }));
const items = (r, type) => r.output.filter((o) => o.type === type);
const textOf = (r) => items(r, 'message').map((o) => o.content.map((c) => c.text).join('')).join('');
const shape = (r) => r.output.map((o) => [o.type, o.type === 'message' ? textOf({ output: [o] }) : o.type === 'reasoning' ? reasoningOf({ output: [o] }) : o.arguments]);
const reasoningOf = (r) => items(r, 'reasoning').map((o) => o.content.map((c) => c.text).join('')).join('');
const isParis = (s) => { try { const o = JSON.parse(s); return Object.keys(o).length === 1 && o.city === 'Paris'; } catch { return false; } };

// ---- openai: responses.create -------------------------------------------------------
await check('responses_answer', async () => {
  const r = await answer.responses.create({ model: 'm', input: question, temperature: 0 });
  if (r.object !== 'response' || !r.id.startsWith('resp_') || r.status !== 'completed') return JSON.stringify(r).slice(0, 300);
  if (r.output_text !== ANSWER) return `output_text ${JSON.stringify(r.output_text)}`;
  if (reasoningOf(r) !== REASONING) return `reasoning ${JSON.stringify(reasoningOf(r))}`;
  if (r.output.map((o) => o.type).join() !== 'reasoning,message') return `items ${r.output.map((o) => o.type)}`;
  const u = r.usage;
  if (!(u.input_tokens > 0 && u.output_tokens > 0 && u.total_tokens === u.input_tokens + u.output_tokens)) return JSON.stringify(u);
  if (!(u.output_tokens_details.reasoning_tokens > 0 && u.output_tokens_details.reasoning_tokens < u.output_tokens)) return JSON.stringify(u);
  if (r.store !== true || r.tool_choice !== 'auto' || r.text.format.type !== 'text') return `echo ${JSON.stringify(r)}`;
});

await check('responses_same_as_chat', async () => {
  for (const instructions of [undefined, 'Answer in one sentence.']) {
    const r = await answer.responses.create({ model: 'm', input: question, instructions, temperature: 0 });
    const msgs = [...(instructions ? [{ role: 'system', content: instructions }] : []), { role: 'user', content: question }];
    const c = await answer.chat.completions.create({ model: 'm', messages: msgs, temperature: 0 });
    const m = c.choices[0].message;
    if (r.usage.input_tokens !== c.usage.prompt_tokens) return `instructions ${instructions}: input_tokens ${r.usage.input_tokens}, chat prompt_tokens ${c.usage.prompt_tokens}`;
    if (r.usage.output_tokens !== c.usage.completion_tokens) return `output_tokens ${r.usage.output_tokens} vs ${c.usage.completion_tokens}`;
    if (r.output_text !== m.content || reasoningOf(r) !== m.reasoning_content) return `text ${JSON.stringify(r.output)} vs ${JSON.stringify(m)}`;
  }
  const a = await answer.responses.create({ model: 'm', input: question, max_output_tokens: 1 });
  const b = await answer.responses.create({ model: 'm', input: question, instructions: 'Answer in one sentence.', max_output_tokens: 1 });
  if (!(b.usage.input_tokens > a.usage.input_tokens)) return `instructions did not reach the prompt (${a.usage.input_tokens}, ${b.usage.input_tokens})`;
});

// a conversation sent back as the output items the client got (reasoning and message), as
// clients without a stored state do: the same prompt as the chat messages it stands for
await check('responses_output_items_round_trip', async () => {
  const first = await answer.responses.create({ model: 'm', input: question, temperature: 0 });
  const next = 'And of Italy?';
  const r = await answer.responses.create({ model: 'm', temperature: 0, max_output_tokens: 2,
                                            input: [{ role: 'user', content: question }, ...first.output, { role: 'user', content: next }] });
  const c = await answer.chat.completions.create({ model: 'm', temperature: 0, max_tokens: 2, messages: [
    { role: 'user', content: question }, { role: 'assistant', content: ANSWER, reasoning_content: REASONING },
    { role: 'user', content: next }] });
  if (r.usage.input_tokens !== c.usage.prompt_tokens) return `input_tokens ${r.usage.input_tokens}, chat ${c.usage.prompt_tokens}`;
  if (!(r.usage.input_tokens > first.usage.input_tokens + 10)) return `input_tokens ${r.usage.input_tokens} after ${first.usage.input_tokens}`;
});

// kept responses (store, OpenAI's default): previous_response_id continues the conversation
// with the prompt the chat messages give and from the prompt cache; GET returns the response,
// DELETE drops it; store: false keeps nothing; the instructions of the earlier turn are not
// carried over
await check('responses_previous_response_id', async () => {
  const first = await answer.responses.create({ model: 'm', input: question, instructions: 'Be brief.', temperature: 0 });
  const next = 'And of Italy?';
  const r = await answer.responses.create({ model: 'm', input: next, previous_response_id: first.id, temperature: 0, max_output_tokens: 2 });
  const c = await answer.chat.completions.create({ model: 'm', temperature: 0, max_tokens: 2, messages: [
    { role: 'user', content: question }, { role: 'assistant', content: ANSWER, reasoning_content: REASONING },
    { role: 'user', content: next }] });
  if (r.previous_response_id !== first.id) return `echo ${r.previous_response_id}`;
  if (r.usage.input_tokens !== c.usage.prompt_tokens) return `input_tokens ${r.usage.input_tokens}, chat ${c.usage.prompt_tokens}`;
  const third = await answer.responses.create({ model: 'm', input: 'And Spain?', previous_response_id: r.id, max_output_tokens: 2 });
  if (!(third.usage.input_tokens > r.usage.input_tokens && third.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens - 1))
    return `third turn ${JSON.stringify(third.usage)} after ${JSON.stringify(r.usage)}: not continued from the cache`;
  const got = await answer.responses.retrieve(first.id);
  if (got.id !== first.id || JSON.stringify(got.output) !== JSON.stringify(first.output)) return `retrieved ${JSON.stringify(got)}`;
  await answer.responses.delete(first.id);
  try {
    await answer.responses.retrieve(first.id);
    return 'retrieved after delete';
  } catch (e) {
    if (e.status !== 404) return `after delete: ${e.status}`;
  }
  try {
    await answer.responses.create({ model: 'm', input: next, previous_response_id: first.id, max_output_tokens: 1 });
    return 'continued a deleted response';
  } catch (e) {
    if (e.status !== 404 || e.param !== 'previous_response_id') return `${e.status} ${e.param}`;
  }
  const unkept = await answer.responses.create({ model: 'm', input: question, store: false, max_output_tokens: 1 });
  if (unkept.store !== false) return `store echoed ${unkept.store}`;
  try {
    await answer.responses.retrieve(unkept.id);
    return 'store: false was kept';
  } catch (e) {
    if (e.status !== 404) return `store false: ${e.status}`;
  }
});

await check('responses_incomplete', async () => {
  const r = await answer.responses.create({ model: 'm', input: question, temperature: 0, max_output_tokens: 5 });
  if (r.status !== 'incomplete' || r.incomplete_details?.reason !== 'max_output_tokens') return `status ${r.status} ${JSON.stringify(r.incomplete_details)}`;
  if (r.usage.output_tokens !== 5 || r.max_output_tokens !== 5) return JSON.stringify(r.usage);
});

// ---- openai: responses.stream --------------------------------------------------------
await check('responses_stream', async () => {
  const s = answer.responses.stream({ model: 'm', input: question, temperature: 0 });
  const seqs = [], types = [];
  let text = '', reasoning = '';
  for await (const ev of s) {
    seqs.push(ev.sequence_number);
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.reasoning_text.delta') reasoning += ev.delta;
  }
  const r = await s.finalResponse();
  if (seqs.some((q, i) => q !== i)) return `sequence numbers ${seqs}`;
  if (types[0] !== 'response.created' || types[1] !== 'response.in_progress' || types.at(-1) !== 'response.completed') return `events ${types}`;
  if (text !== ANSWER || reasoning !== REASONING) return `deltas ${JSON.stringify(text)} / ${JSON.stringify(reasoning)}`;
  if (textOf(r) !== ANSWER || reasoningOf(r) !== REASONING || r.status !== 'completed') return `final ${r.status} ${JSON.stringify(r.output)}`;
  const whole = await answer.responses.create({ model: 'm', input: question, temperature: 0 });
  if (JSON.stringify(shape(whole)) !== JSON.stringify(shape(r)) || JSON.stringify(whole.usage) !== JSON.stringify(r.usage))
    return `streamed ${JSON.stringify(r)} vs whole ${JSON.stringify(whole)}`;
});

// reasoning.summary asked: the reasoning is also the item's summary (there is no summarizer)
await check('responses_reasoning_summary', async () => {
  const r = await answer.responses.create({ model: 'm', input: question, temperature: 0, reasoning: { summary: 'auto' } });
  const it = items(r, 'reasoning')[0];
  if (it?.summary?.[0]?.type !== 'summary_text' || it.summary[0].text !== REASONING) return JSON.stringify(it);
  if (r.reasoning.summary !== 'auto') return `echo ${JSON.stringify(r.reasoning)}`;
  const s = answer.responses.stream({ model: 'm', input: question, temperature: 0, reasoning: { summary: 'auto' } });
  let streamed = '';
  for await (const ev of s) if (ev.type === 'response.reasoning_summary_text.delta') streamed += ev.delta;
  if (streamed !== REASONING) return `summary deltas ${JSON.stringify(streamed)}`;
  const plain = await answer.responses.create({ model: 'm', input: question, temperature: 0 });
  if (items(plain, 'reasoning')[0].summary.length !== 0) return `a summary nobody asked for: ${JSON.stringify(plain.output[0])}`;
});

// ---- tools ----------------------------------------------------------------------------
let call = null;
await check('responses_tool_call', async () => {
  const r = await tools_.responses.create({ model: 'm', input: weather, tools, temperature: 0 });
  const calls = items(r, 'function_call');
  if (calls.length !== 1 || r.output.length !== 1) return `output ${JSON.stringify(r.output)}`;
  call = calls[0];
  if (call.name !== 'get_weather' || !call.call_id || !call.id.startsWith('fc_') || call.status !== 'completed') return JSON.stringify(call);
  if (!isParis(call.arguments)) return `arguments ${call.arguments}`;
  if (r.output_text) return `output_text ${JSON.stringify(r.output_text)} (the call leaked into it)`;
});

await check('responses_streamed_tool_call', async () => {
  const s = tools_.responses.stream({ model: 'm', input: weather, tools, temperature: 0 });
  let args = '', done = null;
  for await (const ev of s) {
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    if (ev.type === 'response.function_call_arguments.done') done = ev;
    if (ev.type === 'response.output_text.delta') return `text streamed: ${ev.delta}`;
  }
  const r = await s.finalResponse();
  if (!isParis(args) || done?.arguments !== args) return `arguments ${args} / ${JSON.stringify(done)}`;
  const c = items(r, 'function_call')[0];
  if (!c || c.name !== 'get_weather' || c.arguments !== args) return JSON.stringify(r.output);
});

await check('responses_tool_result_round_trip', async () => {
  if (!call) return 'no call from the first request';
  const result = '{"temperature": 21, "sky": "clear"}';
  const r = await tools_.responses.create({ model: 'm', tools, temperature: 0, max_output_tokens: 4, input: [
    { role: 'user', content: weather }, call, { type: 'function_call_output', call_id: call.call_id, output: result }] });
  const c = await tools_.chat.completions.create({ model: 'm', tools: chatTools, temperature: 0, max_tokens: 4, messages: [
    { role: 'user', content: weather },
    { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
    { role: 'tool', tool_call_id: call.call_id, content: result }] });
  const first = await tools_.responses.create({ model: 'm', input: weather, tools, max_output_tokens: 4 });
  if (!(r.usage.input_tokens > first.usage.input_tokens + 10)) return `input_tokens ${r.usage.input_tokens} vs ${first.usage.input_tokens}: the result was not rendered`;
  if (r.usage.input_tokens !== c.usage.prompt_tokens) return `input_tokens ${r.usage.input_tokens}, the same turn in chat ${c.usage.prompt_tokens}`;
});

await check('responses_tool_choice_required', async () => {
  for (const tool_choice of ['required', { type: 'function', name: 'get_weather' }]) {
    const r = await tools_.responses.create({ model: 'm', input: weather, tools, tool_choice, temperature: 0 });
    const c = items(r, 'function_call');
    if (c.length !== 1 || c[0].name !== 'get_weather' || !isParis(c[0].arguments)) return `${JSON.stringify(tool_choice)}: ${JSON.stringify(r.output)}`;
  }
});

// the answer streamed as it is made, a delta per token (the scripted answer of ANSWER_URL
// is held back by its parser; this one's is a plain final message)
await check('responses_streamed_per_token', async () => {
  const s = json.responses.stream({ model: 'm', input: weather, temperature: 0 });
  const deltas = [];
  for await (const ev of s) if (ev.type === 'response.output_text.delta') deltas.push(ev.delta);
  const r = await s.finalResponse();
  if (deltas.join('') !== '{"city":"Paris"}' || deltas.length < 4) return `deltas ${JSON.stringify(deltas)}`;
  if (r.usage.output_tokens < deltas.length) return `${deltas.length} deltas for ${r.usage.output_tokens} tokens`;
});

await check('responses_json_schema', async () => {
  const r = await json.responses.create({ model: 'm', input: weather, temperature: 0, text: { format: {
    type: 'json_schema', name: 'city', strict: true, schema: tools[0].parameters } } });
  if (!isParis(r.output_text)) return `output_text ${JSON.stringify(r.output_text)}`;
  if (r.text.format.type !== 'json_schema') return `echo ${JSON.stringify(r.text)}`;
});

for (const [name, body, param] of [
  ['responses_refuses_unknown_previous_response', { previous_response_id: 'resp_1' }, 'previous_response_id'],
  ['responses_refuses_image_input', { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }] }, 'input[0].content[0]'],
]) {
  await check(name, async () => {
    try {
      await answer.responses.create({ model: 'm', input: question, max_output_tokens: 1, ...body });
      return 'accepted';
    } catch (e) {
      if (e.status !== (param === 'previous_response_id' ? 404 : 400) || e.param !== param)
        return `status ${e.status}, param ${e.param}: ${e.message}`;
    }
  });
}

// hosted tools (Codex sends web_search by default) are not offered to the model, with a
// note in the server's log; namespaces of function tools are, as NAMESPACE__NAME, and a
// call of one comes back with its namespace and name apart
await check('responses_hosted_tools_not_offered', async () => {
  const a = await answer.responses.create({ model: 'm', input: question, max_output_tokens: 1, tools: [{ type: 'web_search' }] });
  const b = await answer.responses.create({ model: 'm', input: question, max_output_tokens: 1 });
  if (a.usage.input_tokens !== b.usage.input_tokens) return `a web_search tool changed the prompt (${a.usage.input_tokens} vs ${b.usage.input_tokens})`;
});

await check('responses_namespaced_tools', async () => {
  const ns = [{ type: 'namespace', name: 'weather', description: 'Weather tools', tools: [{ ...tools[0], name: 'get' }] }];
  const r = await tools_.responses.create({ model: 'm', input: weather, tools: ns, max_output_tokens: 1 });
  const flat = await tools_.responses.create({ model: 'm', input: weather, tools: [{ ...tools[0], name: 'weather__get' }], max_output_tokens: 1 });
  if (r.usage.input_tokens !== flat.usage.input_tokens) return `namespaced ${r.usage.input_tokens}, flat ${flat.usage.input_tokens}`;
  const c = await client(nsToolUrl).responses.create({ model: 'm', input: weather, tools: ns, temperature: 0 });
  const call = items(c, 'function_call')[0];
  if (call?.namespace !== 'weather' || call.name !== 'get' || !isParis(call.arguments)) return `call ${JSON.stringify(c.output)}`;
  const back = await client(nsToolUrl).responses.create({ model: 'm', tools: ns, max_output_tokens: 1, input: [
    { role: 'user', content: weather }, call, { type: 'function_call_output', call_id: call.call_id, output: 'sunny' }] });
  const backFlat = await client(nsToolUrl).responses.create({ model: 'm', tools: [{ ...tools[0], name: 'weather__get' }], max_output_tokens: 1, input: [
    { role: 'user', content: weather }, { ...call, name: 'weather__get', namespace: undefined },
    { type: 'function_call_output', call_id: call.call_id, output: 'sunny' }] });
  if (back.usage.input_tokens !== backFlat.usage.input_tokens) return `the call sent back: ${back.usage.input_tokens} vs ${backFlat.usage.input_tokens}`;
});

// ---- Vercel AI SDK: the OpenAI provider's default model speaks the Responses API --------
const sdk = (url) => createOpenAI({ baseURL: `${url}/v1`, apiKey: 'x' });
// forceReasoning: the provider sends reasoning settings only to models it knows reason
const summary = { openai: { reasoningSummary: 'auto', forceReasoning: true } };
await check('ai_openai_responses_text', async () => {
  const r = await generateText({ model: sdk(answerUrl)('m'), prompt: question, temperature: 0, maxRetries: 0,
                                 providerOptions: summary });
  if (r.text !== ANSWER) return `text ${JSON.stringify(r.text)}`;
  if (r.reasoningText !== REASONING) return `reasoning ${JSON.stringify(r.reasoningText)}`;
  if (r.response.id?.startsWith('resp_') !== true) return `response id ${r.response.id} (not the Responses API?)`;
});

await check('ai_openai_responses_stream', async () => {
  const s = streamText({ model: sdk(answerUrl)('m'), prompt: question, temperature: 0, maxRetries: 0,
                        providerOptions: summary });
  let text = '';
  for await (const t of s.textStream) text += t;
  if (text !== ANSWER) return `streamed ${JSON.stringify(text)}`;
  if ((await s.reasoningText) !== REASONING) return `reasoning ${JSON.stringify(await s.reasoningText)}`;
  if ((await s.finishReason) !== 'stop') return `finishReason ${await s.finishReason}`;
});

await check('ai_openai_responses_tool_call', async () => {
  const r = await generateText({ model: sdk(toolUrl)('m'), prompt: weather, temperature: 0, maxRetries: 0,
    tools: { get_weather: tool({ description: 'Current weather of a city', inputSchema: z.object({ city: z.string() }) }) } });
  if (r.finishReason !== 'tool-calls' || r.toolCalls.length !== 1) return `finishReason ${r.finishReason}: ${JSON.stringify(r.content)}`;
  const c = r.toolCalls[0];
  if (c.toolName !== 'get_weather' || c.input?.city !== 'Paris' || !c.toolCallId) return JSON.stringify(c);
});

// ---- LangChain: ChatOpenAI over the Responses API --------------------------------------
await check('langchain_responses_tool_call', async () => {
  const m = new ChatOpenAI({ model: 'm', apiKey: 'x', configuration: { baseURL: `${toolUrl}/v1` }, temperature: 0,
                             maxRetries: 0, useResponsesApi: true });
  const get = lcTool(async () => 'sunny', { name: 'get_weather', description: 'Current weather of a city', schema: z.object({ city: z.string() }) });
  const r = await m.bindTools([get]).invoke(weather);
  const tc = r.tool_calls || [];
  if (tc.length !== 1 || tc[0].name !== 'get_weather' || tc[0].args?.city !== 'Paris') return JSON.stringify(r);
});

finish();
