// The example page's script: reads a batch of the store published beside the page and
// shows it.

import { readBatch } from './read-store.js';

const out = document.getElementById('out');
try {
  const batch = await readBatch(new URL('train.zr/', document.baseURI), 4, 1234);
  out.textContent = JSON.stringify(batch, null, 2);
} catch (e) {
  out.textContent = `failed: ${e}`;
}
