// The viewer page: asks its worker (worker.js, where zr.wasm reads the dataset) for the
// manifest and for pages of samples, and draws them. Nothing here reads a store: the page
// only turns bytes the component returned into text, numbers and pictures.
//
// Query: `?dataset=URL` opens a dataset folder URL (relative to the page: `zr view`
// serves the dataset under /dataset/); `&tokenizer=URL` a tokenizer.json for token fields;
// `&index=N` the first sample shown.

import { decoderFor } from './tokens.js';

const $ = (id) => document.getElementById(id);
const worker = new Worker('worker.js', { type: 'module' });
const pending = new Map();
let nextId = 1;

worker.onmessage = ({ data }) => {
  const waiting = pending.get(data.id);
  if (!waiting) return;
  if (data.progress) {
    waiting.progress?.(data.progress);
    return;
  }
  pending.delete(data.id);
  if (data.error) waiting.reject(Object.assign(new Error(data.error.message), data.error));
  else waiting.resolve(data.result);
};

function ask(op, args = {}, progress) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, progress });
    worker.postMessage({ id, op, ...args });
  });
}

const state = { description: null, length: 0, start: 0, perPage: 20, decode: null, indices: [] };

// -- values --------------------------------------------------------------------------

const ARRAYS = {
  u1: Uint8Array, i1: Int8Array, b1: Uint8Array, u2: Uint16Array, i2: Int16Array,
  u4: Uint32Array, i4: Int32Array, u8: BigUint64Array, i8: BigInt64Array, f4: Float32Array, f8: Float64Array,
};

/** The elements of `bytes` as a typed array of `dtype` (NumPy's `<u2`, `|u1`, ...). */
function elements(bytes, dtype) {
  const code = dtype.slice(1);
  if (code === 'f2') {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    return Array.from({ length: bytes.length / 2 }, (_, i) => halfToFloat(view.getUint16(2 * i, true)));
  }
  const Type = ARRAYS[code];
  if (!Type || dtype[0] === '>') return null;
  const copy = bytes.slice();
  return new Type(copy.buffer, 0, copy.length / Type.BYTES_PER_ELEMENT);
}

function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

function formatNumber(v) {
  if (typeof v === 'bigint') return v.toString();
  return Number.isInteger(v) ? String(v) : v.toPrecision(5);
}

/** The type of an encoded JPEG, PNG or WebP image by its signature, or null. */
function knownImage(bytes) {
  const at = (offset, sig) => sig.every((b, k) => bytes[offset + k] === b);
  if (at(0, [0xff, 0xd8, 0xff])) return 'image/jpeg';
  if (at(0, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png';
  if (at(0, [0x52, 0x49, 0x46, 0x46]) && at(8, [0x57, 0x45, 0x42, 0x50])) return 'image/webp';
  return null;
}

function imageType(bytes) {
  return knownImage(bytes) ?? 'application/octet-stream';
}

/** A thumbnail of the encoded image `bytes`. */
function thumbnail(name, bytes) {
  const img = document.createElement('img');
  img.src = URL.createObjectURL(new Blob([bytes], { type: imageType(bytes) }));
  img.alt = `${name}, ${bytes.length} bytes`;
  return img;
}

/** The HWC layout of a uint8 array field that holds pictures, or null. */
function pictureShape(field) {
  if (field.kind !== 'fixed' || field.dtype !== '|u1') return null;
  const s = field.shape;
  if (s.length === 2 && s[0] >= 8 && s[1] >= 8) return { h: s[0], w: s[1], c: 1, chw: false };
  if (s.length === 3 && [1, 3, 4].includes(s[2]) && s[0] >= 8) return { h: s[0], w: s[1], c: s[2], chw: false };
  if (s.length === 3 && [1, 3, 4].includes(s[0]) && s[1] >= 8) return { h: s[1], w: s[2], c: s[0], chw: true };
  return null;
}

function canvasOf(bytes, { h, w, c, chw }) {
  const canvas = document.createElement('canvas');
  canvas.width = w;
  canvas.height = h;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(w, h);
  for (let y = 0; y < h; y += 1) {
    for (let x = 0; x < w; x += 1) {
      const p = y * w + x;
      const at = (k) => (chw ? bytes[k * h * w + p] : bytes[p * c + k]);
      const r = at(0);
      img.data[4 * p] = r;
      img.data[4 * p + 1] = c >= 3 ? at(1) : r;
      img.data[4 * p + 2] = c >= 3 ? at(2) : r;
      img.data[4 * p + 3] = c === 4 ? at(3) : 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  return canvas;
}

function text(s, max = 300) {
  const span = document.createElement('span');
  span.textContent = s.length > max ? `${s.slice(0, max)}…` : s;
  if (s.length > max) span.title = s.slice(0, 4000);
  return span;
}

/** The cell showing one sample of `field`. */
function cell(field, bytes) {
  const td = document.createElement('td');
  td.dataset.field = field.name;
  // Image fields, and bytes fields whose value is an encoded image (JPEGs written as a
  // plain list of bytes), show as thumbnails.
  if (field.kind === 'image' || (field.kind === 'bytes' && knownImage(bytes))) {
    td.append(thumbnail(field.name, bytes));
    return td;
  }
  if (field.kind === 'string') {
    td.append(text(new TextDecoder().decode(bytes)));
    return td;
  }
  if (field.kind === 'bytes') {
    const hex = Array.from(bytes.subarray(0, 24), (b) => b.toString(16).padStart(2, '0')).join(' ');
    td.append(text(`${bytes.length} bytes: ${hex}${bytes.length > 24 ? ' …' : ''}`));
    td.className = 'ids';
    return td;
  }
  const picture = pictureShape(field);
  if (picture) {
    td.append(canvasOf(bytes, picture));
    return td;
  }
  const values = elements(bytes, field.dtype);
  if (values === null) {
    td.append(text(`${bytes.length} bytes of ${field.dtype}`));
    return td;
  }
  const list = Array.from(values, formatNumber);
  if (field.kind === 'ragged' && state.decode && /^[<|][iu]/.test(field.dtype)) {
    td.append(text(state.decode(Array.from(values, Number))));
    const ids = document.createElement('div');
    ids.className = 'ids';
    ids.append(text(`${list.length} ids: ${list.slice(0, 16).join(' ')}${list.length > 16 ? ' …' : ''}`));
    td.append(ids);
    return td;
  }
  if (list.length === 1) {
    td.className = 'num';
    td.textContent = list[0];
    return td;
  }
  td.className = 'ids';
  td.append(text(`${field.kind === 'ragged' ? `${list.length}: ` : ''}${list.slice(0, 32).join(' ')}${list.length > 32 ? ' …' : ''}`));
  return td;
}

// -- the page --------------------------------------------------------------------------

function row(cells, tag = 'td') {
  const tr = document.createElement('tr');
  for (const c of cells) {
    const el = document.createElement(tag);
    el.textContent = c;
    tr.append(el);
  }
  return tr;
}

function showAbout(name, d) {
  state.description = d;
  state.length = d.records;
  $('title').textContent = name;
  $('summary').textContent = `${d.records.toLocaleString('en')} samples, ${d.fields.length} fields, ` +
    `${d.shards.length} shards (format ${d.format} version ${d.version})`;
  $('card').textContent = d.metadata ? JSON.stringify(d.metadata, null, 2) : '(no dataset card)';
  const fields = $('fields');
  fields.replaceChildren(row(['field', 'kind', 'dtype', 'shape', 'codec'], 'th'));
  for (const f of d.fields) fields.append(row([f.name, f.kind, f.dtype, JSON.stringify(f.shape ?? []), f.codec]));
  const shards = $('shards');
  shards.replaceChildren(row(['shard', 'samples', 'first index', 'long fields'], 'th'));
  let at = 0;
  d.shards.forEach((s, k) => {
    if (k < 50) shards.append(row([s.dir, s.records.toLocaleString('en'), at.toLocaleString('en'), (s.long ?? []).join(', ')]));
    at += s.records;
  });
  if (d.shards.length > 50) shards.append(row([`… ${d.shards.length - 50} more shards`, '', '', '']));
  $('about').hidden = false;
}

async function showPage(indices, label) {
  const d = state.description;
  state.indices = indices;
  const table = $('samples');
  const { samples, errors } = await ask('samples', { fields: d.fields.map((f) => f.name), indices });
  const head = document.createElement('tr');
  for (const name of ['index', ...d.fields.map((f) => f.name)]) {
    const th = document.createElement('th');
    th.textContent = name;
    head.append(th);
  }
  const rows = [head];
  indices.forEach((index, k) => {
    const tr = document.createElement('tr');
    tr.dataset.index = index;
    const first = document.createElement('td');
    first.className = 'num';
    first.textContent = String(index);
    tr.append(first);
    for (const f of d.fields) {
      if (errors[f.name]) {
        const td = document.createElement('td');
        td.className = 'error';
        td.textContent = k === 0 ? errors[f.name].message : '';
        tr.append(td);
      } else {
        tr.append(cell(f, samples[f.name][k]));
      }
    }
    rows.push(tr);
  });
  table.replaceChildren(...rows);
  $('showing').textContent = label;
  await showFetched();
}

async function showFetched() {
  const s = await ask('stats');
  $('fetched').textContent = `${s.requests.toLocaleString('en')} reads, ${s.bytes.toLocaleString('en')} bytes fetched so far`;
  document.body.dataset.fetchedBytes = String(s.bytes);
}

function pageFrom(start) {
  state.start = Math.max(0, Math.min(start, Math.max(0, state.length - state.perPage)));
  const end = Math.min(state.length, state.start + state.perPage);
  const indices = [];
  for (let i = state.start; i < end; i += 1) indices.push(i);
  return showPage(indices, `samples ${state.start.toLocaleString('en')} to ${(end - 1).toLocaleString('en')} of ${state.length.toLocaleString('en')}`);
}

/** `n` distinct indices below `length` drawn from `seed` (xorshift; a preview, not a loader). */
function drawn(seed, n, length) {
  let x = (BigInt(seed) * 0x9e3779b97f4a7c15n + 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn;
  const next = () => {
    x ^= (x << 13n) & 0xffffffffffffffffn;
    x ^= x >> 7n;
    x ^= (x << 17n) & 0xffffffffffffffffn;
    return x;
  };
  const out = new Set();
  while (out.size < Math.min(n, length)) out.add(Number(next() % BigInt(length)));
  return [...out];
}

function randomPage() {
  const seed = Number($('seed').value) || 0;
  const indices = drawn(seed, state.perPage, state.length).sort((a, b) => a - b);
  return showPage(indices, `a random page (seed ${seed}) of ${state.length.toLocaleString('en')}`);
}

// -- histograms --------------------------------------------------------------------------

/** Samples the histograms read: all of a small dataset, 10,000 drawn ones of a large. */
const HIST_ALL = 100_000;
const HIST_SAMPLE = 10_000;

function bars(title, entries, note) {
  const box = document.createElement('div');
  const h = document.createElement('h3');
  h.textContent = title;
  box.append(h);
  const table = document.createElement('table');
  table.className = 'histogram';
  const max = entries.reduce((m, [, n]) => Math.max(m, n), 1);
  for (const [label, n] of entries) {
    const tr = document.createElement('tr');
    const a = document.createElement('td');
    a.textContent = label;
    const b = document.createElement('td');
    b.className = 'num';
    b.textContent = String(n);
    const c = document.createElement('td');
    const bar = document.createElement('span');
    bar.className = 'bar';
    bar.style.width = `${Math.round((200 * n) / max)}px`;
    c.append(bar);
    tr.append(a, b, c);
    table.append(tr);
  }
  box.append(table);
  if (note) {
    const p = document.createElement('div');
    p.className = 'note';
    p.textContent = note;
    box.append(p);
  }
  return box;
}

async function histograms() {
  const d = state.description;
  const all = state.length <= HIST_ALL;
  const indices = all ? Array.from({ length: state.length }, (_, i) => i) : drawn(7, HIST_SAMPLE, state.length);
  $('hist-note').textContent = all ? `over all ${state.length.toLocaleString('en')} samples`
    : `over ${HIST_SAMPLE.toLocaleString('en')} samples drawn with seed 7`;
  const out = [];
  for (const f of d.fields) {
    const scalar = f.kind === 'fixed' && (f.shape ?? []).length === 0 && /^[<|][iub]/.test(f.dtype);
    if (scalar) {
      const counts = new Map();
      for (let at = 0; at < indices.length; at += 65536) {
        const part = indices.slice(at, at + 65536);
        const { samples } = await ask('samples', { fields: [f.name], indices: part });
        for (const bytes of samples[f.name]) {
          const v = formatNumber(elements(bytes, f.dtype)[0]);
          counts.set(v, (counts.get(v) ?? 0) + 1);
        }
      }
      const entries = [...counts].sort((a, b) => Number(a[0]) - Number(b[0]));
      const shown = entries.length > 40 ? [...entries].sort((a, b) => b[1] - a[1]).slice(0, 40) : entries;
      out.push(bars(`${f.name}: values`, shown, entries.length > 40 ? `the 40 most common of ${entries.length} values` : null));
    } else if (f.kind !== 'fixed') {
      const item = f.kind === 'ragged' ? Number(f.dtype.slice(2)) : 1;
      let values = [];
      for (let at = 0; at < indices.length; at += 65536) {
        const part = await ask('byteLengths', { field: f.name, indices: indices.slice(at, at + 65536) });
        values = values.concat(part.map((b) => b / item));
      }
      // Loops, not Math.min(...values): a spread of 10^5 arguments can overflow the stack.
      let lo = Infinity;
      let hi = -Infinity;
      for (const v of values) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      const bins = Math.min(20, hi - lo + 1);
      const width = (hi - lo + 1) / bins;
      const counts = new Array(bins).fill(0);
      for (const v of values) counts[Math.min(bins - 1, Math.floor((v - lo) / width))] += 1;
      const unit = f.kind === 'ragged' ? 'elements' : 'bytes';
      out.push(bars(`${f.name}: lengths (${unit})`, counts.map((n, k) => {
        const a = Math.ceil(lo + k * width);
        const b = Math.ceil(lo + (k + 1) * width) - 1;
        return [a >= b ? String(a) : `${a}–${b}`, n];
      })));
    }
  }
  $('hists').replaceChildren(...out);
  await showFetched();
}

// -- verify --------------------------------------------------------------------------

async function verify() {
  const bar = $('verify-progress');
  bar.hidden = false;
  bar.value = 0;
  $('verify-result').textContent = '';
  const r = await ask('verify', {}, (p) => {
    bar.max = p.total;
    bar.value = p.done;
    $('verify-result').textContent = `${p.done.toLocaleString('en')} of ${p.total.toLocaleString('en')} samples, ${p.bad} bad`;
  });
  const first = r.bad.slice(0, 5).map((b) => `${b.field} sample ${b.index}: ${b.error}`).join('; ');
  $('verify-result').textContent = r.bad_count === 0
    ? `verified: ${r.checked.toLocaleString('en')} records, all good`
    : `${r.bad_count} bad of ${r.checked.toLocaleString('en')} records: ${first}`;
  $('verify-result').className = r.bad_count === 0 ? '' : 'error';
  await showFetched();
}

// -- wiring ----------------------------------------------------------------------------

function failed(e) {
  $('status').textContent = `failed: ${e.message}`;
  $('status').className = 'error';
  document.body.dataset.ready = 'error';
}

async function run(task) {
  try {
    document.body.dataset.ready = 'busy';
    await task();
    document.body.dataset.ready = 'yes';
  } catch (e) {
    failed(e);
  }
}

async function open(args, first = 0) {
  $('status').textContent = 'opening…';
  const { name, description } = await ask('open', args);
  $('open').hidden = true;
  $('status').textContent = '';
  showAbout(name, description);
  await pageFrom(first);
  if (state.length <= HIST_ALL) await histograms();
}

async function loadTokenizer(json) {
  state.decode = decoderFor(JSON.parse(json));
  if (state.description) await showPage(state.indices, $('showing').textContent);
}

$('open-url').onclick = () => run(() => open({ url: new URL($('url').value, document.baseURI).href }));
$('folder').onchange = () => run(() => open({ files: [...$('folder').files] }));
$('tokenizer').onchange = () => run(async () => loadTokenizer(await $('tokenizer').files[0].text()));
$('prev').onclick = () => run(() => pageFrom(state.start - state.perPage));
$('next').onclick = () => run(() => pageFrom(state.start + state.perPage));
$('go').onclick = () => run(() => pageFrom(Number($('goto').value) || 0));
$('random').onclick = () => run(randomPage);
$('per-page').onchange = () => run(() => {
  state.perPage = Number($('per-page').value);
  return pageFrom(state.start);
});
$('histograms').onclick = () => run(histograms);
$('verify').onclick = () => run(verify);

const query = new URLSearchParams(location.search);
run(async () => {
  const tokenizer = query.get('tokenizer');
  if (tokenizer) {
    const response = await fetch(new URL(tokenizer, document.baseURI));
    if (!response.ok) throw new Error(`${tokenizer}: HTTP ${response.status}`);
    state.decode = decoderFor(await response.json());
  }
  const url = query.get('dataset');
  if (url) await open({ url: new URL(url, document.baseURI).href }, Number(query.get('index')) || 0);
});
