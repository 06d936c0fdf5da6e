// Tool calls and structured output through two more real clients: the Vercel AI SDK
// (`ai` with `@ai-sdk/openai-compatible`) and LangChain JS (`@langchain/openai`).
//   node tests/server/clients.mjs TOOL_URL JSON_URL
// TOOL_URL serves a tiny gpt_oss model scripted to answer every chat with the Harmony call
//   commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
// JSON_URL one scripted to answer with the final message  {"city":"Paris"}
// (tests/server/test_clients.sh). Prints one PASS/FAIL line per check.
import { generateObject, generateText, streamText, tool } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { z } from 'zod';
import OpenAI from 'openai';
import { check, finish } from './check.mjs';

const [toolUrl, jsonUrl] = process.argv.slice(2);
globalThis.AI_SDK_LOG_WARNINGS = false;

const prompt = 'What is the weather in Paris?';
const city = z.object({ city: z.string() });
const isParis = (o) => o && typeof o === 'object' && Object.keys(o).length === 1 && o.city === 'Paris';

// ---- Vercel AI SDK ----------------------------------------------------------------
const provider = (url, supportsStructuredOutputs) =>
  createOpenAICompatible({ name: 'moestream', baseURL: `${url}/v1`, apiKey: 'x', supportsStructuredOutputs });
const aiTools = { get_weather: tool({ description: 'Current weather of a city', inputSchema: city }) };
const aiTool = provider(toolUrl).chatModel('m');

await check('ai_generate_text_tool_call', async () => {
  const r = await generateText({ model: aiTool, tools: aiTools, prompt, temperature: 0, maxRetries: 0 });
  if (r.finishReason !== 'tool-calls') return `finishReason ${r.finishReason}`;
  if (r.toolCalls.length !== 1) return `${r.toolCalls.length} tool calls: ${JSON.stringify(r.content)}`;
  const c = r.toolCalls[0];
  if (c.toolName !== 'get_weather' || !c.toolCallId) return `call ${JSON.stringify(c)}`;
  if (!isParis(c.input)) return `input ${JSON.stringify(c.input)}`;
  if (r.text) return `text ${JSON.stringify(r.text)} (the call leaked into it)`;
  if (r.reasoningText) return `reasoning ${JSON.stringify(r.reasoningText)}`;
});

await check('ai_stream_text_tool_call', async () => {
  const r = streamText({ model: aiTool, tools: aiTools, prompt, temperature: 0, maxRetries: 0 });
  const calls = [], errors = [];
  let text = '';
  for await (const p of r.fullStream) {
    if (p.type === 'tool-call') calls.push(p);
    else if (p.type === 'text-delta' || p.type === 'reasoning-delta') text += p.text;
    else if (p.type === 'error') errors.push(p.error);
  }
  if (errors.length) throw errors[0];
  const finish = await r.finishReason;
  if (finish !== 'tool-calls') return `finishReason ${finish}`;
  if (calls.length !== 1 || calls[0].toolName !== 'get_weather' || !calls[0].toolCallId)
    return JSON.stringify(calls);
  if (!isParis(calls[0].input)) return `input ${JSON.stringify(calls[0].input)}`;
  if (text) return `call text streamed as text: ${JSON.stringify(text)}`;
});

// generateObject: with supportsStructuredOutputs the provider sends response_format
// json_schema (strict), without it json_object (the schema is not sent).
for (const [name, structured] of [['ai_generate_object_json_schema', true], ['ai_generate_object_json_object', false]]) {
  await check(name, async () => {
    const r = await generateObject({ model: provider(jsonUrl, structured).chatModel('m'), schema: city,
                                     prompt, temperature: 0, maxRetries: 0 });
    if (!isParis(r.object)) return `object ${JSON.stringify(r.object)}`;
    if (r.finishReason !== 'stop') return `finishReason ${r.finishReason}`;
  });
}

// ---- LangChain JS -----------------------------------------------------------------
const chat = (url) => new ChatOpenAI({ model: 'm', apiKey: 'x', temperature: 0, maxRetries: 0, timeout: 120000,
                                       configuration: { baseURL: `${url}/v1` } });
const lcWeather = lcTool(async () => 'sunny', { name: 'get_weather', description: 'Current weather of a city',
                                                schema: city });

await check('langchain_bind_tools_tool_call', async () => {
  const m = await chat(toolUrl).bindTools([lcWeather]).invoke(prompt);
  const tc = m.tool_calls || [];
  if (tc.length !== 1) return `${tc.length} tool calls: ${JSON.stringify(m)}`;
  if (tc[0].name !== 'get_weather' || !tc[0].id) return `call ${JSON.stringify(tc[0])}`;
  if (!isParis(tc[0].args)) return `args ${JSON.stringify(tc[0].args)}`;
  if (m.invalid_tool_calls?.length) return `invalid ${JSON.stringify(m.invalid_tool_calls)}`;
  if (m.content) return `content ${JSON.stringify(m.content)} (the call leaked into it)`;
  if (m.response_metadata?.finish_reason !== 'tool_calls') return `finish_reason ${m.response_metadata?.finish_reason}`;
});

await check('langchain_streamed_tool_call', async () => {
  let all = null;
  for await (const c of await chat(toolUrl).bindTools([lcWeather]).stream(prompt)) all = all ? all.concat(c) : c;
  const tc = all?.tool_calls || [];
  if (tc.length !== 1 || tc[0].name !== 'get_weather' || !tc[0].id) return JSON.stringify(all?.tool_call_chunks);
  if (!isParis(tc[0].args)) return `args ${JSON.stringify(tc[0].args)}`;
  if (all.content) return `content ${JSON.stringify(all.content)} (the call leaked into it)`;
});

// withStructuredOutput: for a model name that is not gpt-3* / gpt-4-* / gpt-4 the default
// method is jsonSchema: response_format json_schema (name "extract", no strict unless given).
await check('langchain_with_structured_output', async () => {
  const r = await chat(jsonUrl).withStructuredOutput(city, { includeRaw: true }).invoke(prompt);
  if (!isParis(r.parsed)) return `parsed ${JSON.stringify(r.parsed)} from ${JSON.stringify(r.raw?.content)}`;
});
// ---- the openai client: response_format ------------------------------------------------
const oaJson = new OpenAI({ maxRetries: 0, timeout: 120000, baseURL: `${jsonUrl}/v1`, apiKey: 'x' });
const oaTool = new OpenAI({ maxRetries: 0, timeout: 120000, baseURL: `${toolUrl}/v1`, apiKey: 'x' });
const citySchema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } },
                     required: ['city'], additionalProperties: false };
await check('openai_response_format_json_schema', async () => {
  const r = await oaJson.chat.completions.create({ model: 'm', temperature: 0, messages: [{ role: 'user', content: prompt }],
    response_format: { type: 'json_schema', json_schema: { name: 'city', strict: true, schema: citySchema } } });
  const o = JSON.parse(r.choices[0].message.content);
  if (!isParis(o) || r.choices[0].finish_reason !== 'stop') return JSON.stringify(r.choices[0]);
});
// the grammar really constrains: the tool model wants to call get_weather, the schema
// leaves it only a JSON answer, which it must then finish and stop
await check('openai_response_format_overrides_the_model', async () => {
  const r = await oaTool.chat.completions.create({ model: 'm', temperature: 0, max_tokens: 60,
    messages: [{ role: 'user', content: prompt }],
    response_format: { type: 'json_schema', json_schema: { name: 'city', strict: true, schema: citySchema } } });
  const ch = r.choices[0];
  let o;
  try { o = JSON.parse(ch.message.content); } catch (e) { return `not JSON: ${JSON.stringify(ch)}`; }
  if (!['Paris', 'Rome'].includes(o.city) || Object.keys(o).length !== 1 || ch.finish_reason !== 'stop')
    return JSON.stringify(ch);
});

finish();
