// The chat page of moestream serve in a real browser (Debian's chromium, headless,
// driven by puppeteer-core).
//   node tests/server/web.mjs SCRIPTED_URL RANDOM_URL SHOT_DIR
// SCRIPTED_URL serves a tiny gpt_oss model that answers every chat with the reasoning
// "Let me think" and an answer about Paris; RANDOM_URL a random one that writes until
// stopped. Prints one PASS/FAIL line per check; screenshots go to SHOT_DIR.
import puppeteer from 'puppeteer-core';
import { check, finish } from './check.mjs';

const [scripted, random, shots] = process.argv.slice(2);

const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const page = await browser.newPage();
await page.setViewport({ width: 900, height: 640 });
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));
const lastAssistant = () => page.evaluate(() => {
  const b = [...document.querySelectorAll('.msg.assistant')].pop();
  return b && { reasoning: b.querySelector('.reasoning').textContent, text: b.querySelector('.text').textContent,
                note: (b.querySelector('.note') || {}).textContent || null };
});
async function ask(text) {
  await page.type('#input', text);
  await page.keyboard.press('Enter');
}

await check('web_page_loads', async () => {
  const r = await page.goto(scripted, { waitUntil: 'networkidle0' });
  if (r.status() !== 200) return `status ${r.status()}`;
  await page.waitForFunction(() => document.querySelector('#model').textContent.includes('gpt_oss'), { timeout: 20000 });
});

await check('web_streamed_answer_with_reasoning_apart', async () => {
  await ask('What is the capital of France?');
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('.msg.assistant')].pop();
    return b && b.querySelector('.note');
  }, { timeout: 60000 });
  const a = await lastAssistant();
  await page.screenshot({ path: `${shots}/web_answer.png` });
  console.log(`     screenshot: ${shots}/web_answer.png`);
  if (!a.reasoning.includes('Let me think')) return `reasoning ${JSON.stringify(a.reasoning)}`;
  if (!a.text.includes('Paris') || a.text.includes('Let me think')) return `answer ${JSON.stringify(a.text)}`;
  if (!/tok\/s/.test(a.note)) return `note ${JSON.stringify(a.note)}`;
});

await check('web_second_turn', async () => {
  await ask('And of Italy?');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant .note').length === 2, { timeout: 60000 });
  const n = await page.evaluate(() => document.querySelectorAll('.msg.user').length);
  if (n !== 2) return `${n} user messages`;
});

await check('web_stop_button', async () => {
  await page.goto(random, { waitUntil: 'networkidle0' });
  await ask('Write forever.');
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('.msg.assistant')].pop();
    return b && (b.querySelector('.text').textContent.length + b.querySelector('.reasoning').textContent.length) > 20;
  }, { timeout: 60000 });
  if (await page.$eval('#stop', (b) => b.disabled)) return 'Stop is disabled while writing';
  await page.click('#stop');
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('.msg.assistant')].pop();
    return b && b.querySelector('.note');
  }, { timeout: 20000 });
  const a = await lastAssistant();
  await page.screenshot({ path: `${shots}/web_stopped.png` });
  console.log(`     screenshot: ${shots}/web_stopped.png`);
  if (!a.note.startsWith('stopped')) return `note ${JSON.stringify(a.note)}`;
  if (await page.$eval('#send', (b) => b.disabled)) return 'Send stays disabled';
});

await check('web_no_script_errors', async () => (errors.length ? errors.join('; ') : ''));
await browser.close();
finish();
