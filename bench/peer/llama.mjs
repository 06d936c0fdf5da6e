// llama.cpp (the CPU build that node-llama-cpp ships prebuilt) on a GGUF
// written by tools/peer/gguf_from_hf.py, driven by token ids.
//
//   node bench/peer/llama.mjs bench GGUF THREADS PROMPT N VOCAB
//       prefill of PROMPT ids (one batch) and N greedy decode steps (VOCAB:
//       the checkpoint's vocab_size, which the prompt ids depend on); prints
//       one line: "llama.cpp prefill_tok_s=... decode_ms_token=... threads=..."
//   node bench/peer/llama.mjs probs GGUF ID...
//       one pass over the ids; for every position the next-token
//       probabilities (softmax of the logits) as a JSON line of floats
//
// The prompt ids are those `moestream bench --prompt` reads
// (cli_synthetic_prompt in app/cli.c), so both engines route the same
// tokens. Timing is wall clock around the library calls; the sampler is
// greedy.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [mode, gguf, ...rest] = process.argv.slice(2);
if (!["bench", "probs"].includes(mode) || !gguf) {
  console.error("usage: llama.mjs bench GGUF THREADS PROMPT N VOCAB | probs GGUF ID...");
  process.exit(2);
}

// app/cli.c's cli_synthetic_prompt: xorshift64 from a fixed seed
function syntheticPrompt(n, vocab) {
  const M = (1n << 64n) - 1n, mod = BigInt(vocab > 256 ? vocab - 256 : vocab);
  let x = 88172645463325252n;
  const ids = [];
  for (let i = 0; i < n; i++) {
    x ^= (x << 13n) & M;
    x ^= x >> 7n;
    x ^= (x << 17n) & M;
    ids.push(Number(x % mod));
  }
  return ids;
}

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
// The weights mapped from the file, llama.cpp's own default (node-llama-cpp's
// "auto" may read them into anonymous memory instead); LLAMA_MMAP=0 asks for that.
const useMmap = process.env.LLAMA_MMAP !== "0";

if (mode === "probs") {
  const ids = rest.map(Number);
  const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0, useMmap});
  const size = Math.max(256, ids.length + 1);
  const ctx = await model.createContext({contextSize: size, batchSize: size, threads: 2, sequences: 1});
  const out = await ctx.getSequence().controlledEvaluate(
    ids.map(t => [t, {generateNext: {probabilities: true}}]));
  const lines = out.map(o => {
    const p = o.next.probabilities; // the whole vocabulary
    const row = new Array(Math.max(...p.keys()) + 1).fill(0);
    for (const [t, v] of p) row[t] = v;
    return JSON.stringify(row) + "\n";
  });
  // exit only once a pipe has taken all of it (process.exit cuts it short)
  process.stdout.write(lines.join(""), () => process.exit(0));
  await new Promise(() => {});
}

const [threads, prompt, n, vocab] = rest.map(Number);
if (!(threads > 0 && prompt > 1 && n > 0 && vocab > 0)) {
  console.error("llama.mjs bench: THREADS, PROMPT (> 1), N and VOCAB must be positive numbers");
  process.exit(2);
}
const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0, useMmap});
const ids = syntheticPrompt(prompt, vocab);
const ctx = await model.createContext({
  contextSize: Math.max(512, prompt + n + 16), batchSize: Math.max(prompt, 1),
  threads: {ideal: threads, min: threads}, sequences: 1});
const seq = ctx.getSequence();
let t0 = performance.now();
await seq.evaluateWithoutGeneratingNewTokens(ids.slice(0, prompt - 1));
const prefillMs = performance.now() - t0;
// decode: the last prompt id, then N - 1 generated ones; the first step's
// time (it also samples the first token) is counted like the others
const stamps = [];
t0 = performance.now();
for await (const tok of seq.evaluate([ids[prompt - 1]], {temperature: 0})) {
  stamps.push(performance.now());
  if (stamps.length >= n)
    break;
}
const decodeMs = (stamps[stamps.length - 1] - t0) / stamps.length;
console.log(`llama.cpp prefill_tok_s=${((prompt - 1) / prefillMs * 1000).toFixed(2)} ` +
            `decode_ms_token=${decodeMs.toFixed(1)} threads=${threads} prompt=${prompt} n=${stamps.length} ` +
            `release=${llama.llamaCppRelease.release} mmap=${model.useMmap ? "yes" : "no"}`);
await ctx.dispose();
await model.dispose();
