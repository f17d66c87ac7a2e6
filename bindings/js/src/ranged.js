// A dataset as a file tree for `load()`'s preopens whose files are read a range at a time,
// so that the component reads a page of samples without downloading the stores: the
// manifest whole, then only the blocks of each store's files that the core asks for.
//
// The files come from a `source` with two synchronous methods, given paths relative to
// the dataset directory ('dataset.json', 'shard-000000/image/meta.zr'):
//   size(path)                -> the file's length in bytes, or null when there is none
//   read(path, offset, length) -> a Uint8Array of exactly those bytes
// `httpSource` (ranged GETs by synchronous XMLHttpRequest) and `fileListSource` (the files
// of a picked directory, by FileReaderSync) are the browser's; both only work in a Web
// Worker, where synchronous reads are allowed. A test can pass its own.
//
// The tree is preview2-shim's in-memory tree (`{ dir: { name: entry } }`, a file being
// `{ source }`): a store folder is a Proxy that asks `size` the first time a name is
// looked up, and a file's `source` answers `byteLength` and `slice(start, end)`, the only
// two things the shim's read paths use, from a cache of fixed blocks.

/** Bytes fetched at a time; a read needing several missing blocks fetches them in one. */
export const BLOCK = 16 * 1024;

const MANIFEST = 'dataset.json';

/** A file of `size` bytes read through `source`, cached by block. */
class RangedBytes {
  #source;
  #path;
  #blocks = new Map();

  constructor(source, path, size) {
    this.#source = source;
    this.#path = path;
    this.byteLength = size;
  }

  slice(start = 0, end = this.byteLength) {
    start = Math.max(0, Math.min(start, this.byteLength));
    end = Math.max(start, Math.min(end, this.byteLength));
    const out = new Uint8Array(end - start);
    if (end === start) return out;
    const first = Math.floor(start / BLOCK);
    const last = Math.floor((end - 1) / BLOCK);
    // Fetch each run of missing blocks with one read.
    let b = first;
    while (b <= last) {
      if (this.#blocks.has(b)) {
        b += 1;
        continue;
      }
      let stop = b;
      while (stop + 1 <= last && !this.#blocks.has(stop + 1)) stop += 1;
      const from = b * BLOCK;
      const to = Math.min((stop + 1) * BLOCK, this.byteLength);
      const bytes = this.#source.read(this.#path, from, to - from);
      for (let k = b; k <= stop; k += 1) {
        this.#blocks.set(k, bytes.subarray((k - b) * BLOCK, Math.min((k - b + 1) * BLOCK, bytes.length)));
      }
      b = stop + 1;
    }
    for (let k = first; k <= last; k += 1) {
      const block = this.#blocks.get(k);
      const blockStart = k * BLOCK;
      const from = Math.max(start, blockStart) - blockStart;
      const to = Math.min(end, blockStart + block.length) - blockStart;
      out.set(block.subarray(from, to), blockStart + from - start);
    }
    return out;
  }
}

/** A folder whose entries are looked up through `source` when first named. */
function lazyFolder(source, prefix) {
  const entries = new Map();
  const lookup = (name) => {
    if (typeof name !== 'string') return undefined;
    if (!entries.has(name)) {
      const size = source.size(prefix + name);
      entries.set(name, size === null ? undefined : { source: new RangedBytes(source, prefix + name, size) });
    }
    return entries.get(name);
  };
  return new Proxy({}, {
    get: (_, name) => lookup(name),
    has: (_, name) => lookup(name) !== undefined,
    set: () => false,
    deleteProperty: () => false,
    ownKeys: () => [...entries.keys()].filter((n) => entries.get(n) !== undefined),
    getOwnPropertyDescriptor: (_, name) => {
      const entry = lookup(name);
      return entry === undefined ? undefined : { value: entry, enumerable: true, configurable: true, writable: false };
    },
  });
}

/**
 * The tree of the dataset that `source` serves: `dataset.json`, read whole, lists the
 * shard folders and fields, which become folders; each store folder is looked up lazily.
 * Throws when the dataset has no manifest.
 */
export function datasetTree(source) {
  const size = source.size(MANIFEST);
  if (size === null) {
    throw new Error(`no ${MANIFEST} in ${source.name ?? 'the dataset'}: not a zrecord dataset directory`);
  }
  const bytes = source.read(MANIFEST, 0, size);
  const manifest = JSON.parse(new TextDecoder().decode(bytes));
  const root = { [MANIFEST]: { source: bytes } };
  for (const shard of manifest.shards ?? []) {
    const dir = {};
    for (const field of manifest.fields ?? []) {
      dir[field.name] = { dir: lazyFolder(source, `${shard.dir}/${field.name}/`) };
    }
    root[shard.dir] = { dir };
  }
  return { dir: root };
}

/** Counts of what a source fetched. */
function counters() {
  return { requests: 0, bytes: 0, lastError: null };
}

/**
 * Files under the URL `base` (a folder URL; a trailing '/' is added), read with ranged
 * GETs and sized with HEAD, synchronously: Web Workers only. `stats` counts requests and
 * bytes. A file answered 404 (or 403, as S3 answers a missing key without list access) is
 * absent; any other failure is an I/O error for the read that needed it, with the status
 * kept in `stats.lastError`.
 *
 * A dataset pushed to an object store (`zr push`) has a listing, `remote.json`
 * (docs/format.md): when there is one, the files are the ones it lists, each `size` bytes
 * long of which the first `stored` are in the object (the rest reads as zeros), under the
 * object name `key` when it gives one, and a version 2 listing holds the manifest itself.
 */
export function httpSource(base) {
  const root = base.endsWith('/') ? base : `${base}/`;
  const stats = counters();
  const request = (method, path, range) => {
    const url = new URL(path, root).href;
    const xhr = new XMLHttpRequest();
    xhr.open(method, url, false);
    if (method === 'GET') xhr.responseType = 'arraybuffer';
    if (range) xhr.setRequestHeader('Range', range);
    try {
      xhr.send();
    } catch (e) {
      stats.lastError = `${method} ${url}: ${e.message ?? e} (a server that does not allow this page's origin, CORS, fails this way)`;
      throw path === MANIFEST || path === LISTING ? new Error(stats.lastError) : 'io';
    }
    stats.requests += 1;
    return { xhr, url };
  };
  const get = (path, offset, length) => {
    const { xhr, url } = request('GET', path, `bytes=${offset}-${offset + length - 1}`);
    if (xhr.status !== 206 && xhr.status !== 200) {
      stats.lastError = `GET ${url} (bytes ${offset}..${offset + length}): HTTP ${xhr.status}`;
      throw 'io';
    }
    let bytes = new Uint8Array(xhr.response);
    stats.bytes += bytes.length;
    // A server that ignores Range sends the whole file.
    if (xhr.status === 200) bytes = bytes.subarray(offset, offset + length);
    if (bytes.length !== length) {
      stats.lastError = `GET ${url}: ${bytes.length} bytes for a range of ${length}`;
      throw 'io';
    }
    return bytes;
  };
  const headSize = (path) => {
    const { xhr, url } = request('HEAD', path);
    if (xhr.status === 403 && path === MANIFEST) {
      throw new Error(`HEAD ${url}: HTTP 403, access denied: the page reads without credentials, so the ` +
        'dataset\'s objects must be public (a bucket policy allowing s3:GetObject to everyone, and CORS rules ' +
        'allowing GET and HEAD from this page), or pull it (zr pull) and view the local copy');
    }
    if (xhr.status === 404 || xhr.status === 403) return null;
    if (xhr.status !== 200) {
      stats.lastError = `HEAD ${url}: HTTP ${xhr.status}`;
      throw path === MANIFEST || path === LISTING ? new Error(stats.lastError) : 'io';
    }
    return Number(xhr.getResponseHeader('Content-Length'));
  };

  const listing = readListing(headSize, get, root);
  if (listing === null) {
    return { name: root, stats, size: headSize, read: get };
  }
  return {
    name: root,
    stats,
    size(path) {
      if (path === MANIFEST && listing.manifest) return listing.manifest.length;
      return listing.objects[path]?.size ?? null;
    },
    read(path, offset, length) {
      if (path === MANIFEST && listing.manifest) return listing.manifest.slice(offset, offset + length);
      const object = listing.objects[path];
      const out = new Uint8Array(length);
      const stored = Math.min(object.stored, offset + length);
      if (stored > offset) out.set(get(object.key ?? path, offset, stored - offset));
      return out;
    },
  };
}

const LISTING = 'remote.json';

/** The pushed dataset's listing under `root`, or null when there is none. */
function readListing(headSize, get, root) {
  const size = headSize(LISTING);
  if (size === null) return null;
  const listing = JSON.parse(new TextDecoder().decode(get(LISTING, 0, size)));
  if (listing.version !== 1 && listing.version !== 2) {
    throw new Error(`${root}${LISTING}: listing version ${listing.version} is not supported by this viewer`);
  }
  if (listing.kind !== 'dataset') {
    throw new Error(`${root} holds a pushed ${listing.kind}, not a dataset of named fields`);
  }
  const manifest = listing.version === 2 ? new TextEncoder().encode(JSON.stringify(listing.manifest)) : null;
  return { objects: listing.objects ?? {}, manifest };
}

/**
 * The files of a directory picked in the page (`<input type=file webkitdirectory>` or a
 * drop), read with FileReaderSync: Web Workers only. Paths are `webkitRelativePath`
 * without the picked folder's own name.
 */
export function fileListSource(files) {
  const byPath = new Map();
  let name = null;
  for (const file of files) {
    const parts = (file.webkitRelativePath || file.name).split('/');
    if (parts.length > 1) name ??= parts[0];
    byPath.set(parts.length > 1 ? parts.slice(1).join('/') : parts[0], file);
  }
  const stats = counters();
  return {
    name: name ?? 'the picked folder',
    stats,
    size: (path) => (byPath.has(path) ? byPath.get(path).size : null),
    read(path, offset, length) {
      const blob = byPath.get(path).slice(offset, offset + length);
      const bytes = new Uint8Array(new FileReaderSync().readAsArrayBuffer(blob));
      stats.requests += 1;
      stats.bytes += bytes.length;
      return bytes;
    },
  };
}
