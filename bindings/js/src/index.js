// @zrecord/wasm: zrecord stores from JavaScript through the zr.wasm component.
//
// gen/ is `jco transpile zr.wasm` output (built by `npm run build`); this file only adds
// what the raw bindings lack: choosing the directories the component may see before it
// first touches the filesystem, JavaScript-friendly argument types, and errors that carry
// zrecord's stable numeric codes. Every operation runs in the component, on the same core
// as the native `zr` and the Python package.

import { _setPreopens, types } from '@bytecodealliance/preview2-shim/filesystem';

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
});

/**
 * An error returned by the component: `kind` is the WIT case, `code` its number. Using a
 * `Store` after `close()` is one too: `kind` 'locked', code -9, as in the Python package.
 */
export class ZrecordError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'ZrecordError';
    this.kind = kind;
    this.code = ERROR_CODES[kind] ?? ERROR_CODES['invalid-argument'];
  }
}

// jco throws a WIT `err` as a ComponentError whose payload is the error record.
function rethrow(e) {
  const p = e?.payload;
  if (p && typeof p.code === 'string' && typeof p.message === 'string') {
    throw new ZrecordError(p.code, p.message);
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

function u64s(indices) {
  if (indices instanceof BigUint64Array) return indices;
  return BigUint64Array.from(indices, (i) => BigInt(i));
}

let loaded = null;
let loadedWith = null;

/**
 * Instantiates zr.wasm once per process. `preopens` maps guest paths to host directories
 * (`{ '/data': '/srv/datasets' }`); the component sees nothing else, and all paths given
 * to the API are guest paths. The preopens are fixed by the first call: the component's
 * libc reads them on its first filesystem access.
 */
export async function load({ preopens = {} } = {}) {
  const key = JSON.stringify(Object.entries(preopens).sort());
  if (loaded) {
    if (key !== loadedWith) {
      throw new Error('zr.wasm is already loaded with other preopens; load() once per process');
    }
    return loaded;
  }
  _setPreopens(preopens);
  loadedWith = key;
  const zr = await import('../gen/zr.js');
  loaded = api(zr);
  return loaded;
}

function api(zr) {
  class Store {
    // The component's handle; null once closed.
    #inner;

    constructor(inner) {
      this.#inner = inner;
    }

    // The open handle, or the error every use after `close()` gets (the released component
    // resource would otherwise throw a TypeError about resources).
    #live() {
      if (this.#inner === null) throw new ZrecordError('locked', 'store is closed');
      return this.#inner;
    }

    /** Opens the store at `path`; `create` makes an empty one in an existing directory. */
    static open(path, { create = false, readOnly = !create } = {}) {
      return new Store(call(() => zr.store.Store.open(path, create, readOnly)));
    }

    /** Number of live records. */
    get length() {
      return this.#live().len();
    }

    /** Logical length of each record, as a Uint32Array. */
    lengths(indices) {
      return call(() => this.#live().lengths(u64s(indices)));
    }

    /**
     * Decodes the records at `indices`: `{ data, lengths, records }`, where `records[i]` is
     * a view into `data` holding record `indices[i]`.
     */
    gather(indices) {
      const { data, lengths } = call(() => this.#live().gather(u64s(indices)));
      const records = [];
      let at = 0;
      for (const n of lengths) {
        records.push(data.subarray(at, at + n));
        at += n;
      }
      return { data, lengths, records };
    }

    /** Appends `records` (Uint8Arrays) with `codec` ('flate' or 'raw'); returns the first index. */
    append(records, codec = 'flate') {
      const lengths = Uint32Array.from(records, (r) => r.length);
      const data = new Uint8Array(lengths.reduce((a, b) => a + b, 0));
      let at = 0;
      for (const r of records) {
        data.set(r, at);
        at += r.length;
      }
      return call(() => this.#live().append(data, lengths, codec));
    }

    /** Removes records; the last live record moves into each hole. */
    delete(indices) {
      call(() => this.#live().delete(u64s(indices)));
    }

    /** Repacks live records and frees chunk files past the new frontier. */
    compact() {
      call(() => this.#live().compact());
    }

    /** `{ records, liveBytes, chunkBytes, reclaimable }` (byte counts as bigint). */
    stats() {
      return call(() => this.#live().stats());
    }

    /** Makes every completed append durable. */
    sync() {
      call(() => this.#live().sync());
    }

    /** Whether `close()` was called. */
    get closed() {
      return this.#inner === null;
    }

    /** Syncs and releases the handle; calling it again does nothing. */
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

  class Sampler {
    #inner;

    constructor(inner) {
      this.#inner = inner;
    }

    /** An endless index generator; the same seed gives the same stream on every host. */
    static create(length, batchSize, mode = 'sequential', seed = 0) {
      return new Sampler(call(() => zr.store.Sampler.create(BigInt(length), batchSize, mode, BigInt(seed))));
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
    Sampler,
    /** The `zr inspect --json` report of the store at `path`, parsed. */
    inspect: (path) => JSON.parse(call(() => zr.tools.inspect(path))),
    /** The `zr inspect` text report. */
    inspectText: (path) => call(() => zr.tools.inspectText(path)),
    /** `{ checked, bad_count, bad: [{ index, error }] }` after decoding every record. */
    verify: (path) => JSON.parse(call(() => zr.tools.verify(path))),
    /** Converts a .npy into a dataset store (as `zr convert`); returns the records appended. */
    convertNpy: (input, output, codec = 'flate') => Number(call(() => zr.tools.convertNpy(input, output, codec))),
    /** Writes a dataset store to a .npy (as `zr export`); returns the records written. */
    exportNpy: (input, output) => Number(call(() => zr.tools.exportNpy(input, output))),
  });
}
