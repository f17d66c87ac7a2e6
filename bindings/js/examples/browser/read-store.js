// Reading a zrecord store in the browser: the store's files are fetched from the server and
// handed to the component as an in-memory directory (preview2-shim's file tree), which
// Store.open then reads as it would a directory on disk. Bundled with esbuild; see the
// README's "In the browser" for the command and for how to publish a store's files.

import { load, ZrecordError } from '@zrecord/wasm';

// A store's files (docs/format.md); 0.zr is its only chunk while it holds under 4 GiB.
const FILES = ['meta.zr', '0.zr', 'checksums.zrk', 'checksums.zrc'];

async function fetchFile(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return { source: new Uint8Array(await response.arrayBuffer()) };
}

/**
 * Opens the store published under `url` (a directory URL ending in '/'), reads one batch
 * of `batchSize` records drawn by a shuffling sampler with `seed`, and returns the indices,
 * the records, the store's length and the error a bad read gets.
 */
export async function readBatch(url, batchSize, seed) {
  const dir = {};
  for (const name of FILES) dir[name] = await fetchFile(new URL(name, url));
  const zr = await load({ preopens: { '/data': { dir: { 'train.zr': { dir } } } } });

  const store = zr.Store.open('/data/train.zr');
  const indices = zr.Sampler.create(store.length, batchSize, 'shuffle', seed).next();
  const { records } = store.gather(indices);
  let refused = null;
  try {
    store.gather([store.length]);
  } catch (e) {
    if (!(e instanceof ZrecordError)) throw e;
    refused = { kind: e.kind, code: e.code, message: e.message };
  }
  const length = store.length;
  store.close();
  return { length, indices: Array.from(indices, Number), records: records.map((r) => Array.from(r)), refused };
}
