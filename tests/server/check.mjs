// The PASS / FAIL lines the Node test programs of tests/server print (a test script's FAIL
// lines count, tests/server/lib.sh run_node), and how a thrown error is told.
let failed = 0;
export const pass = (name) => console.log(`PASS ${name}`);
export const fail = (name, why) => { console.log(`FAIL ${name}: ${why}`); failed++; };

// An error, with what the server answered when a client threw over an HTTP error: the AI
// SDK's APICallError (statusCode, responseBody, requestBodyValues), the openai and
// Anthropic clients' APIError (status, error), under any wrapping (cause, lastError).
export function describe(e) {
  const s = `${e.constructor.name}: ${e.message}`;
  for (let c = e, depth = 0; c && depth < 4; c = c.cause ?? c.lastError, depth++) {
    if (c.statusCode !== undefined)
      return `${s} (HTTP ${c.statusCode}: ${c.responseBody}; request ${JSON.stringify(c.requestBodyValues)})`;
    if (c.status !== undefined) return `${s} (HTTP ${c.status}: ${JSON.stringify(c.error)})`;
    if (c.text !== undefined) return `${s} (response text ${JSON.stringify(c.text)})`;
  }
  return s;
}

// One check: fn returns nothing when it holds, else why not.
export async function check(name, fn) {
  try {
    const why = await fn();
    if (why) fail(name, why); else pass(name);
  } catch (e) {
    fail(name, describe(e));
  }
}

export const finish = () => process.exit(failed ? 1 : 0);
