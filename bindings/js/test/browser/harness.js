// Runs the browser example's readBatch in the page and posts what it returns (or how it
// failed) to the test's server, which test/browser.test.js compares with Node's reading.

import { readBatch } from '../../examples/browser/read-store.js';

let result;
try {
  result = { ok: await readBatch(new URL('train.zr/', location.href), 4, 1234) };
} catch (e) {
  result = { error: `${e?.name}: ${e?.message}\n${e?.stack}` };
}
await fetch('/result', { method: 'POST', body: JSON.stringify(result) });
