// The viewer's Web Worker: it holds zr.wasm and the dataset, so the component's file reads
// can be synchronous ranged requests (allowed in a worker, not on the page's thread).
//
// Messages from the page are `{ id, op, ... }`; each gets one `{ id, result }` or
// `{ id, error }` back (an error as `{ message, kind, path, field, record }`), and `verify`
// also posts `{ id, progress: { done, total, bad } }` as it goes.

import { load, ZrecordError } from '../src/index.js';
import { datasetTree, fileListSource, httpSource } from '../src/ranged.js';

let zr = null;
let dataset = null;
let source = null;

function errorOf(e) {
  if (e instanceof ZrecordError) {
    const lastError = source?.stats.lastError;
    const message = e.kind === 'io' && lastError ? `${e.message} (${lastError})` : e.message;
    return { message, kind: e.kind, path: e.path, field: e.field, record: e.record };
  }
  return { message: String(e?.message ?? e), kind: null, path: null, field: null, record: null };
}

const ops = {
  // `{ url }` (a dataset folder URL) or `{ files }` (a picked directory's File objects).
  async open({ url, files }) {
    if (dataset !== null) throw new Error('a dataset is already open in this page; reload it to open another');
    source = url ? httpSource(url) : fileListSource(files);
    const tree = datasetTree(source);
    zr = await load({ preopens: { '/dataset': tree } });
    dataset = zr.Dataset.open('/dataset');
    return { name: source.name, description: dataset.describe() };
  },

  // The samples of `fields` at `indices`: per field, each sample's bytes.
  samples({ fields, indices }) {
    const out = {};
    const errors = {};
    for (const field of fields) {
      try {
        out[field] = dataset.gather(field, indices).records.map((r) => r.slice());
      } catch (e) {
        // One field that fails (a damaged record) should not hide the others.
        errors[field] = errorOf(e);
      }
    }
    return { samples: out, errors };
  },

  byteLengths({ field, indices }) {
    return dataset.byteLengths(field, indices);
  },

  stats() {
    return { ...source.stats };
  },

  // Reads and checks every sample, `step` at a time, posting progress.
  verify({ step = 4096 }, id) {
    const total = dataset.length;
    let checked = 0;
    let badCount = 0;
    const bad = [];
    for (let start = 0; start < total; start += step) {
      const report = dataset.verify(start, step);
      checked += report.checked;
      badCount += report.bad_count;
      for (const b of report.bad) if (bad.length < 1000) bad.push(b);
      postMessage({ id, progress: { done: Math.min(start + step, total), total, bad: badCount } });
    }
    return { checked, bad_count: badCount, bad };
  },
};

onmessage = async ({ data }) => {
  const { id, op } = data;
  try {
    if (!(op in ops)) throw new Error(`unknown operation ${op}`);
    if (op !== 'open' && dataset === null) throw new Error('no dataset is open');
    postMessage({ id, result: await ops[op](data, id) });
  } catch (e) {
    postMessage({ id, error: errorOf(e) });
  }
};
