// @zrecord/wasm: zrecord stores from JavaScript through the zr.wasm component.
//
// gen/ is `jco transpile zr.wasm` output (built by `npm run build`, scripts/build.js); this
// file only adds what the raw bindings lack: choosing the directories the component may see
// before it first touches the filesystem, JavaScript-friendly argument types checked before
// they cross into the component, and errors that carry zrecord's stable numeric codes. Every
// operation runs in the component, on the same core as the native `zr` and the Python
// package.

import { _setPreopens, preopens, types } from '@bytecodealliance/preview2-shim/filesystem';

// wasi-libc asks for `mutate-directory` whenever it opens a file for writing (the flag is
// inherited from the directory it opens through). preview2-shim 0.26 on Node refuses any
// open carrying it with `unsupported`, so no store could be created or appended to. On a
// file descriptor the flag grants nothing (only directory descriptors can mutate
// directories), so it is dropped for non-directory opens; directory opens pass unchanged.
const openAt = types.Descriptor.prototype.openAt;
types.Descriptor.prototype.openAt = function (pathFlags, path, openFlags, descriptorFlags) {
  if (descriptorFlags?.mutateDirectory && !openFlags?.directory) {
    descriptorFlags = { ...descriptorFlags, mutateDirectory: false };
  }
  return openAt.call(this, pathFlags, path, openFlags, descriptorFlags);
};

/**
 * The WIT `error-code` cases and the stable numeric codes they stand for: the core's table
 * (`ERROR_KINDS` in core/src/error.rs), which core/tests/error_table.rs and
 * test/errors.test.js hold this copy to.
 */
export const ERROR_CODES = Object.freeze({
  'out-of-memory': -1,
  io: -2,
  'index-out-of-range': -3,
  'record-too-large': -4,
  'store-full': -5,
  'buffer-too-small': -6,
  decode: -7,
  'bad-format': -8,
  locked: -9,
  'invalid-argument': -10,
  checksum: -11,
});

/**
 * An error returned by the component: `kind` is the WIT case, `code` its number. Using a
 * `Store` after `close()` is one too: `kind` 'locked', code -9, as in the Python package.
 * A record that fails its checksum or cannot be decoded is named: `path` (the store, as
 * opened) and `record` (its index); both are null for other errors.
 */
export class ZrecordError extends Error {
  constructor(kind, message, path = null, record = null, field = null) {
    super(message);
    this.name = 'ZrecordError';
    this.kind = kind;
    this.code = ERROR_CODES[kind] ?? ERROR_CODES['invalid-argument'];
    this.path = path;
    this.record = record;
    this.field = field;
  }
}

// jco throws a WIT `err` as a ComponentError whose payload is the error record (its
// options are undefined when none, the u64 index a BigInt).
function rethrow(e) {
  const p = e?.payload;
  if (p && typeof p.code === 'string' && typeof p.message === 'string') {
    const record = p.record === undefined || p.record === null ? null : Number(p.record);
    throw new ZrecordError(p.code, p.message, p.path ?? null, record, p.field ?? null);
  }
  throw e;
}

function call(f) {
  try {
    return f();
  } catch (e) {
    return rethrow(e);
  }
}

// Arguments are checked here, before jco lowers them: its lowering throws TypeError for a
// wrong type or enum string, and wraps a negative or too large integer into the u64/u32
// range silently (-1 became index 18446744073709551615, 2n ** 64n became index 0).

const U64_END = 1n << 64n;
// The largest integer every JSON parser keeps exactly (2^53 - 1).
const MAX_EXACT = (1n << 53n) - 1n;

// The WIT enums' cases (wit/zrecord.wit; test/arguments.test.js holds these to it).
const CASES = Object.freeze({
  mode: ['sequential', 'iid', 'shuffle'],
  codec: ['raw', 'flate'],
  verify: ['auto', 'always', 'never'],
});

function shown(value) {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || value === undefined || typeof value === 'number' || typeof value === 'boolean') {
    return String(value);
  }
  const name = value?.constructor?.name ?? typeof value;
  return `${/^[aeiou]/i.test(name) ? 'an' : 'a'} ${name}`;
}

function invalid(message) {
  return new ZrecordError('invalid-argument', message);
}

function string(value, name) {
  if (typeof value !== 'string') throw invalid(`${name} must be a string, got ${shown(value)}`);
  return value;
}

function boolean(value, name) {
  if (typeof value !== 'boolean') throw invalid(`${name} must be true or false, got ${shown(value)}`);
  return value;
}

function choice(value, name) {
  if (!CASES[name].includes(value)) {
    throw invalid(`${name} must be one of ${CASES[name].map((c) => `'${c}'`).join(', ')}, got ${shown(value)}`);
  }
  return value;
}

function isInteger(value) {
  return typeof value === 'bigint' || Number.isInteger(value);
}

/** A count or seed: an integer (number or bigint) in 0 .. 2^64 - 1, as a bigint. */
function u64(value, name) {
  if (!isInteger(value) || value < 0 || BigInt(value) >= U64_END) {
    throw invalid(`${name} must be an integer in 0 .. 2^64 - 1, got ${shown(value)}`);
  }
  return BigInt(value);
}

function u32(value, name) {
  if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
    throw invalid(`${name} must be an integer in 0 .. 2^32 - 1, got ${shown(value)}`);
  }
  return value;
}

/**
 * Record indices (an array or iterable of numbers or bigints, or a BigUint64Array) as the
 * BigUint64Array the component takes. A negative index is out of range (-3), as one past the
 * end is and as in the Python package; anything but an integer is an invalid argument.
 */
function indexArray(indices) {
  if (indices instanceof BigUint64Array) return indices;
  if (typeof indices?.[Symbol.iterator] !== 'function' || typeof indices === 'string') {
    throw invalid(`indices must be an array of record indices, got ${shown(indices)}`);
  }
  const list = Array.from(indices);
  const out = new BigUint64Array(list.length);
  list.forEach((i, at) => {
    if (!isInteger(i)) throw invalid(`indices[${at}] must be an integer (number or bigint), got ${shown(i)}`);
    if (i < 0 || BigInt(i) >= U64_END) {
      throw new ZrecordError(
        'index-out-of-range',
        `index ${i} out of range: record indices run from 0 to the store's length - 1`,
      );
    }
    out[at] = BigInt(i);
  });
  return out;
}

function recordList(records) {
  if (typeof records?.[Symbol.iterator] !== 'function' || typeof records === 'string') {
    throw invalid(`records must be an array of Uint8Array, got ${shown(records)}`);
  }
  const list = Array.from(records);
  list.forEach((r, at) => {
    if (!(r instanceof Uint8Array)) throw invalid(`records[${at}] must be a Uint8Array, got ${shown(r)}`);
  });
  return list;
}

function options(value, name) {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object') throw invalid(`${name} must be an object, got ${shown(value)}`);
  return value;
}

// Rust's Store::open and `zr` make a new store's missing directories; the component's
// open-with makes only the store's files (its WIT says the directory must exist). So the
// missing directories are made here, through the same preopened descriptors the component
// uses (so under the same sandbox). Anything that cannot be made is left for the
// component's open to report, in the core's words.
function createMissingDirs(path) {
  if (!path.startsWith('/')) return;
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) return;
  let best = null;
  for (const [descriptor, guest] of preopens.getDirectories()) {
    const root = guest.split('/').filter((p) => p !== '' && p !== '.');
    const inside = root.length <= parts.length && root.every((p, i) => p === parts[i]);
    if (inside && (best === null || root.length > best.root.length)) best = { descriptor, root };
  }
  if (best === null) return;
  for (let depth = best.root.length + 1; depth <= parts.length; depth++) {
    try {
      best.descriptor.createDirectoryAt(parts.slice(best.root.length, depth).join('/'));
    } catch (e) {
      if (e !== 'exist') return;
    }
  }
}

let loaded = null;
let loadedWith = null;

/** The preopens as `[guest path, host]` pairs in guest path order. */
function preopenPairs(dirs) {
  return Object.entries(options(dirs, 'preopens')).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * Instantiates zr.wasm once per process. `preopens` maps guest paths to host directories
 * (`{ '/data': '/srv/datasets' }`; in a browser, to in-memory file trees); the component
 * sees nothing else, and all paths given to the API are guest paths. The preopens are fixed
 * by the first call: the component's libc reads them on its first filesystem access. A later
 * call must name the same ones (the same strings, or the very same file tree objects).
 */
export async function load(opts) {
  const pairs = preopenPairs(options(opts, 'options').preopens);
  if (loaded) {
    const same = pairs.length === loadedWith.length &&
      pairs.every(([guest, host], i) => guest === loadedWith[i][0] && host === loadedWith[i][1]);
    if (!same) throw invalid('zr.wasm is already loaded with other preopens; load() once per process');
    return loaded;
  }
  loadedWith = pairs;
  _setPreopens(Object.fromEntries(pairs));
  const zr = await import('../gen/zr.js');
  loaded = api(zr);
  return loaded;
}

function api(zr) {
  // The open component resource of a Store, Dataset or Stream, or the error every use after
  // `close()` gets (the released resource would otherwise throw a TypeError about
  // resources). A symbol, so it is no part of the public API.
  const LIVE = Symbol('live');

  /** What Store, Dataset and Stream share: a component resource that `close()` releases. */
  class Handle {
    // The component's handle; null once closed.
    #inner;
    #what;

    constructor(inner, what) {
      this.#inner = inner;
      this.#what = what;
    }

    [LIVE]() {
      if (this.#inner === null) throw new ZrecordError('locked', `${this.#what} is closed`);
      return this.#inner;
    }

    /** Whether `close()` was called. */
    get closed() {
      return this.#inner === null;
    }

    /** Releases the handle (a store syncs first); calling it again does nothing. */
    close() {
      const inner = this.#inner;
      if (inner === null) return;
      this.#inner = null;
      inner[Symbol.dispose]();
    }

    [Symbol.dispose]() {
      this.close();
    }
  }

  class Store extends Handle {
    constructor(inner) {
      super(inner, 'store');
    }

    /**
     * Opens the store at `path`; `create` makes an empty one, and the directories leading to
     * it. `verify` ('auto', 'always' or 'never', as in Rust, Python and the CLI) sets when
     * reads check each record's checksum; a mismatch is a ZrecordError of kind 'checksum', -11.
     */
    static open(path, opts) {
      const { create = false, readOnly = !create, verify = 'auto' } = options(opts, 'options');
      string(path, 'path');
      boolean(create, 'create');
      boolean(readOnly, 'readOnly');
      choice(verify, 'verify');
      if (create && !readOnly) createMissingDirs(path);
      return new Store(call(() => zr.store.Store.openWith(path, create, readOnly, verify)));
    }

    /** Number of live records. */
    get length() {
      return this[LIVE]().len();
    }

    /** Logical length of each record, as a Uint32Array. */
    lengths(indices) {
      const inner = this[LIVE]();
      const list = indexArray(indices);
      return call(() => inner.lengths(list));
    }

    /**
     * Decodes the records at `indices`: `{ data, lengths, records }`, where `records[i]` is
     * a view into `data` holding record `indices[i]`.
     */
    gather(indices) {
      const inner = this[LIVE]();
      const list = indexArray(indices);
      const { data, lengths } = call(() => inner.gather(list));
      return split(data, lengths);
    }

    /** Appends `records` (Uint8Arrays) with `codec` ('flate' or 'raw'); returns the first index. */
    append(records, codec = 'flate') {
      const inner = this[LIVE]();
      records = recordList(records);
      choice(codec, 'codec');
      const lengths = Uint32Array.from(records, (r) => r.length);
      const data = new Uint8Array(lengths.reduce((a, b) => a + b, 0));
      let at = 0;
      for (const r of records) {
        data.set(r, at);
        at += r.length;
      }
      return call(() => inner.append(data, lengths, codec));
    }

    /** Removes records; the last live record moves into each hole. */
    delete(indices) {
      const inner = this[LIVE]();
      const list = indexArray(indices);
      call(() => inner.delete(list));
    }

    /** Repacks live records and frees chunk files past the new frontier. */
    compact() {
      call(() => this[LIVE]().compact());
    }

    /** `{ records, liveBytes, chunkBytes, reclaimable }` (byte counts as bigint). */
    stats() {
      return call(() => this[LIVE]().stats());
    }

    /** Makes every completed append durable. */
    sync() {
      call(() => this[LIVE]().sync());
    }
  }

  // Record `i` of a WIT `gathered` as a view into its data.
  function split(data, lengths) {
    const records = [];
    let at = 0;
    for (const n of lengths) {
      records.push(data.subarray(at, at + n));
      at += n;
    }
    return { data, lengths, records };
  }

  /** A dataset directory (`dataset.json` over shards), read only. */
  class Dataset extends Handle {
    #description = null;

    constructor(inner) {
      super(inner, 'dataset');
    }

    /** Opens the dataset at `path` (the directory holding `dataset.json`), read only. */
    static open(path) {
      string(path, 'path');
      return new Dataset(call(() => zr.dataset.Dataset.open(path)));
    }

    /** Number of samples. */
    get length() {
      return Number(this[LIVE]().len());
    }

    /** The manifest (fields, shards, the dataset card as `metadata`) and `records`. */
    describe() {
      this.#description ??= JSON.parse(this[LIVE]().describe());
      return this.#description;
    }

    /**
     * The samples of `field` at `indices`: `{ data, lengths, records }`, `records[i]` a view
     * of sample `indices[i]`'s bytes (a string's UTF-8, an image's encoded bytes, an
     * array's little-endian elements).
     */
    gather(field, indices) {
      const inner = this[LIVE]();
      const name = string(field, 'field');
      const list = indexArray(indices);
      const { data, lengths } = call(() => inner.gather(name, list));
      return split(data, lengths);
    }

    /** Each sample's byte length (as `gather` returns it), from the tables only. */
    byteLengths(field, indices) {
      const inner = this[LIVE]();
      const name = string(field, 'field');
      const list = indexArray(indices);
      return Array.from(call(() => inner.byteLengths(name, list)), Number);
    }

    /** Reads and checks samples `start .. start + count` of every field. */
    verify(start, count) {
      const inner = this[LIVE]();
      const from = u64(start, 'start');
      const n = u64(count, 'count');
      return JSON.parse(call(() => inner.verify(from, n)));
    }

    /**
     * The dataset as a stream reads it, `{ length, generation }` (bigints): what a loader
     * state names, computed as the native loader does. Opens every store.
     */
    id() {
      const inner = this[LIVE]();
      return call(() => inner.id());
    }

    /** The identities the dataset had before its appends, oldest first. */
    grownFrom() {
      return this[LIVE]().grownFrom();
    }
  }

  /** A dataset identity (`{ length, generation }`, integers) as the component takes it. */
  function datasetId(value, name) {
    if (value === null || typeof value !== 'object') {
      throw invalid(`${name} must be a Dataset or { length, generation }, got ${shown(value)}`);
    }
    return { length: u64(value.length, `${name}.length`), generation: u64(value.generation, `${name}.generation`) };
  }

  // A state object as JSON. A bigint is written as the state's portable numbers are: a
  // JSON number below 2^53, a decimal string from there (JSON.stringify refuses bigints).
  function stateText(state) {
    if (typeof state === 'string') return state;
    if (state === null || typeof state !== 'object') {
      throw invalid(`state must be a state object or its JSON text, got ${shown(state)}`);
    }
    return JSON.stringify(state, (_, v) => (typeof v === 'bigint' ? (v <= MAX_EXACT ? Number(v) : String(v)) : v));
  }

  /**
   * The sample stream of a training job over one dataset (the core's `Stream`): which
   * dataset indices each rank reads at each global batch, and the resume state the Python
   * loader saves (`DataLoader.state_dict()`), both ways.
   */
  class Stream extends Handle {
    // The identities the dataset had before its appends, which `resume` passes on.
    #grownFrom;

    constructor(inner, grownFrom) {
      super(inner, 'stream');
      this.#grownFrom = grownFrom;
    }

    /**
     * The stream over `dataset` (a Dataset, or its `{ length, generation }`) in `mode`
     * ('sequential', 'iid' or 'shuffle'), with `seed`, in global batches of `globalBatch`
     * samples (per-rank batch size times world size). The three are required: a resumed
     * state must have been saved with the same.
     */
    static create(dataset, opts) {
      const { mode, seed, globalBatch } = options(opts, 'options');
      let id;
      let grownFrom = [];
      if (dataset instanceof Dataset) {
        id = dataset.id();
        grownFrom = dataset.grownFrom();
      } else {
        id = datasetId(dataset, 'dataset');
      }
      choice(mode, 'mode');
      const start = u64(seed, 'seed');
      const g = u64(globalBatch, 'globalBatch');
      return new Stream(call(() => zr.stream.Stream.create(id, mode, start, g)), grownFrom);
    }

    /**
     * Goes on from `state` (an object, as `state()` or `JSON.parse` of the Python loader's
     * saved `state_dict()` gives it, or its JSON text): `{ stream, step }`, the stream to
     * read and the global batch to read next. A state saved from another dataset, seed,
     * mode or global batch is refused (ZrecordError 'invalid-argument', saying what
     * differs); one saved on the dataset before appends resumes (when it was opened as a
     * Dataset), its running epoch finishing as it would have.
     */
    resume(state) {
      const inner = this[LIVE]();
      const text = stateText(state);
      const [stream, step] = call(() => inner.resumed(text, this.#grownFrom));
      return { stream: new Stream(stream, this.#grownFrom), step: Number(step) };
    }

    /** The state after global batches `0 .. step` were consumed: what to save. */
    state(step) {
      const inner = this[LIVE]();
      const at = u64(step, 'step');
      return JSON.parse(inner.state(at));
    }

    /**
     * Rank `rank`'s slice (of `worldSize` ranks) of global batch `step`: a BigUint64Array
     * of `globalBatch / worldSize` dataset indices.
     */
    batch(step, rank = 0, worldSize = 1) {
      const inner = this[LIVE]();
      const args = [u64(step, 'step'), u64(rank, 'rank'), u64(worldSize, 'worldSize')];
      return call(() => inner.batch(...args));
    }

    /** The dataset read, `{ length, generation }` (bigints). */
    get dataset() {
      return this[LIVE]().dataset();
    }

    get mode() {
      return this[LIVE]().mode();
    }

    /** The seed, as a bigint. */
    get seed() {
      return this[LIVE]().seed();
    }

    get globalBatch() {
      return Number(this[LIVE]().globalBatch());
    }

    /** Global batches per SHUFFLE epoch; null for the endless sequential and iid streams. */
    get stepsPerEpoch() {
      const n = this[LIVE]().stepsPerEpoch();
      return n === undefined ? null : Number(n);
    }
  }

  class Sampler {
    #inner;

    constructor(inner) {
      this.#inner = inner;
    }

    /** An endless index generator; the same seed gives the same stream on every host. */
    static create(length, batchSize, mode = 'sequential', seed = 0) {
      const n = u64(length, 'length');
      const size = u32(batchSize, 'batchSize');
      choice(mode, 'mode');
      const start = u64(seed, 'seed');
      return new Sampler(call(() => zr.store.Sampler.create(n, size, mode, start)));
    }

    get length() {
      return this.#inner.length();
    }

    get batchSize() {
      return this.#inner.batchSize();
    }

    get mode() {
      return this.#inner.mode();
    }

    /** The next batch of indices, as a BigUint64Array. */
    next() {
      return this.#inner.nextBatch();
    }
  }

  return Object.freeze({
    Store,
    Dataset,
    Sampler,
    Stream,
    /** The `zr inspect --json` report of the store at `path`, parsed. */
    inspect: (path) => JSON.parse(call(() => zr.tools.inspect(string(path, 'path')))),
    /** The `zr inspect` text report. */
    inspectText: (path) => call(() => zr.tools.inspectText(string(path, 'path'))),
    /** `{ checked, bad_count, bad: [{ index, error }] }` after decoding every record. */
    verify: (path) => JSON.parse(call(() => zr.tools.verify(string(path, 'path')))),
    /** Converts a .npy into a dataset store (as `zr convert`); returns the records appended. */
    convertNpy: (input, output, codec = 'flate') => {
      const args = [string(input, 'input'), string(output, 'output'), choice(codec, 'codec')];
      return Number(call(() => zr.tools.convertNpy(...args)));
    },
    /** Writes a dataset store to a .npy (as `zr export`); returns the records written. */
    exportNpy: (input, output) => {
      const args = [string(input, 'input'), string(output, 'output')];
      return Number(call(() => zr.tools.exportNpy(...args)));
    },
  });
}
