// Types of @zrecord/wasm's public API (src/index.js). test/types.test.js compiles a typed
// use of every export with `tsc --noEmit`, holds the string unions to wit/zrecord.wit, and
// the report fields to what the component returns.

/** The WIT `error-code` cases. */
export type ErrorKind =
  | 'out-of-memory'
  | 'io'
  | 'index-out-of-range'
  | 'record-too-large'
  | 'store-full'
  | 'buffer-too-small'
  | 'decode'
  | 'bad-format'
  | 'locked'
  | 'invalid-argument'
  | 'checksum';

/** Each kind's stable numeric code, -1 ... -11 (the README lists what each means). */
export declare const ERROR_CODES: Readonly<Record<ErrorKind, number>>;

/** Every failure of the API: a component error, a bad argument (-10), a closed store (-9). */
export declare class ZrecordError extends Error {
  constructor(kind: ErrorKind, message: string, path?: string | null, record?: number | null, field?: string | null);
  readonly kind: ErrorKind;
  /** `ERROR_CODES[kind]`. */
  readonly code: number;
  /** The store, as opened, when a record failed its checksum or could not be decoded. */
  readonly path: string | null;
  /** That record's index. */
  readonly record: number | null;
  /** The dataset field whose store it is, when read through a `Dataset`. */
  readonly field: string | null;
}

/** How a sampler or stream draws indices (WIT `mode`). */
export type Mode = 'sequential' | 'iid' | 'shuffle';
/** How appended records are stored (WIT `codec`). */
export type Codec = 'raw' | 'flate';
/** When reads check each record's checksum (WIT `verify`). */
export type Verify = 'auto' | 'always' | 'never';

/** Record indices: non-negative integers. A negative one is a ZrecordError, code -3. */
export type Indices = BigUint64Array | Iterable<number | bigint>;

export interface OpenOptions {
  /** Make an empty store (and the directories leading to it) if there is none. */
  create?: boolean;
  /** Refuse every mutation; the default unless `create`. */
  readOnly?: boolean;
  verify?: Verify;
}

export interface Gathered {
  /** The decoded records, back to back. */
  data: Uint8Array;
  lengths: Uint32Array;
  /** `records[i]` is a view into `data` holding the record at `indices[i]`. */
  records: Uint8Array[];
}

export interface Stats {
  records: number;
  liveBytes: bigint;
  chunkBytes: bigint;
  reclaimable: bigint;
}

/** An open store. */
export interface Store {
  /** Number of live records. */
  readonly length: number;
  /** Whether `close()` was called; every use after it is a ZrecordError, code -9. */
  readonly closed: boolean;
  lengths(indices: Indices): Uint32Array;
  gather(indices: Indices): Gathered;
  /** Appends records; returns the index of the first. */
  append(records: Iterable<Uint8Array>, codec?: Codec): number;
  delete(indices: Indices): void;
  compact(): void;
  stats(): Stats;
  sync(): void;
  close(): void;
  [Symbol.dispose](): void;
}

export interface StoreConstructor {
  open(path: string, options?: OpenOptions): Store;
}

/** An endless index generator; the same seed gives the same stream on every host. */
export interface Sampler {
  readonly length: bigint;
  readonly batchSize: number;
  readonly mode: Mode;
  next(): BigUint64Array;
}

export interface SamplerConstructor {
  create(length: number | bigint, batchSize: number, mode?: Mode, seed?: number | bigint): Sampler;
}

/**
 * A dataset as a stream reads it; a saved state names it and is refused on any other. The
 * generation is usually 2^53 or more, hence bigints.
 */
export interface DatasetId {
  length: bigint;
  generation: bigint;
}

/**
 * A resume state as saved: the Python loader's `state_dict()`, or `Stream.state()`. `seed`
 * and a dataset's `generation` are decimal strings from 2^53 on (numbers below), so
 * `JSON.parse` and `JSON.stringify` keep them exact.
 */
export interface StreamState {
  version: number;
  seed: number | string;
  /** 0 sequential, 1 iid, 2 shuffle. */
  mode: number;
  global_batch: number;
  /** Global batches consumed: the next one to read. */
  step: number;
  datasets: { length: number; generation: number | string }[];
  /** `[position, epoch, length]` per era, when the dataset grew under the stream. */
  eras?: [number, number, number][];
  [field: string]: unknown;
}

export interface StreamOptions {
  mode: Mode;
  seed: number | bigint;
  /** Samples per global batch: per-rank batch size times world size. */
  globalBatch: number | bigint;
}

/** The sample stream of a training job over one dataset: indices by step and rank, and its state. */
export interface Stream {
  /** The dataset read (after a resume on a grown dataset, as it is now). */
  readonly dataset: DatasetId;
  readonly mode: Mode;
  readonly seed: bigint;
  readonly globalBatch: number;
  /** Global batches per SHUFFLE epoch; null for the endless sequential and iid streams. */
  readonly stepsPerEpoch: number | null;
  readonly closed: boolean;
  /**
   * Goes on from a saved state (object or JSON text): the stream to read and the global
   * batch to read next. A state of another dataset, seed, mode or global batch is a
   * ZrecordError, code -10, saying what differs.
   */
  resume(state: StreamState | string): { stream: Stream; step: number };
  /** The state after global batches `0 .. step` were consumed. */
  state(step: number | bigint): StreamState;
  /** Rank `rank`'s slice (of `worldSize`) of global batch `step`: `globalBatch / worldSize` indices. */
  batch(step: number | bigint, rank?: number | bigint, worldSize?: number | bigint): BigUint64Array;
  close(): void;
  [Symbol.dispose](): void;
}

export interface StreamConstructor {
  /** Over an open Dataset (its identity, and what it grew from), or over an identity alone. */
  create(dataset: Dataset | { length: number | bigint; generation: number | bigint }, options: StreamOptions): Stream;
}

/** One chunk file in an inspect report. */
export interface ChunkReport {
  id: number;
  records: number;
  live_bytes: number;
  used_bytes: number;
  file_bytes: number;
}

/** `zr inspect --json`, parsed; the fields named here, and any the core adds. */
export interface InspectReport {
  /** 1 for a sparse store (loaderx 0.5.4's layout), 2 for a dense one. */
  version: number;
  /** How the store's files are sized (`zr layout` changes it). */
  layout: 'sparse' | 'dense';
  records: number;
  raw_records: number;
  flate_records: number;
  zstd_records: number;
  bad_entries: number;
  checksums: boolean;
  live_bytes: number;
  chunk_bytes: number;
  reclaimable: number;
  chunks: ChunkReport[];
  /** The dataset schema (schema.json) of a converted .npy, or null. */
  schema: { dtype: string; shape: number[]; [field: string]: unknown } | null;
  problems: unknown[];
  [field: string]: unknown;
}

/** `zr verify --json`, parsed. */
export interface Verification {
  checked: number;
  checksummed: number;
  bad_count: number;
  /** Up to 1000 bad records. */
  bad: { index: number; error: string }[];
  problems: unknown[];
  [field: string]: unknown;
}

/** One field of a dataset, as its manifest (`dataset.json`) lists it. */
export interface FieldDescription {
  name: string;
  kind: 'fixed' | 'ragged' | 'bytes' | 'string' | 'image';
  /** NumPy `dtype.str` of one element. */
  dtype: string;
  shape: number[];
  codec: string;
}

/** A dataset's manifest, with `records`, its sample count. */
export interface DatasetDescription {
  format: string;
  version: number;
  records: number;
  fields: FieldDescription[];
  shards: { dir: string; records: number; long?: string[] }[];
  /** The dataset card. */
  metadata?: Record<string, unknown>;
  [field: string]: unknown;
}

/** `Dataset.verify(start, count)`, parsed. */
export interface DatasetVerification {
  /** Samples times fields read. */
  checked: number;
  bad_count: number;
  /** Up to 1000 failures. */
  bad: { field: string; index: number; path: string | null; record: number | null; error: string }[];
}

/** A dataset directory (`dataset.json` over shards of one store per field), read only. */
export interface Dataset {
  readonly length: number;
  readonly closed: boolean;
  describe(): DatasetDescription;
  /** The samples of `field`: a string's UTF-8, an image's encoded bytes, an array's elements. */
  gather(field: string, indices: Indices): Gathered;
  /** Each sample's byte length, from the tables only. */
  byteLengths(field: string, indices: Indices): number[];
  /** Reads and checks samples `start .. start + count` of every field. */
  verify(start: number | bigint, count: number | bigint): DatasetVerification;
  /** The dataset as a stream reads it (what a loader state names); opens every store. */
  id(): DatasetId;
  /** The identities the dataset had before its appends, oldest first. */
  grownFrom(): DatasetId[];
  close(): void;
  [Symbol.dispose](): void;
}

export interface DatasetConstructor {
  open(path: string): Dataset;
}

/** What `load()` returns. Paths are guest paths, under the preopened directories. */
export interface Zrecord {
  readonly Store: StoreConstructor;
  readonly Dataset: DatasetConstructor;
  readonly Sampler: SamplerConstructor;
  readonly Stream: StreamConstructor;
  inspect(path: string): InspectReport;
  inspectText(path: string): string;
  verify(path: string): Verification;
  /** As `zr convert`; returns the number of records appended. */
  convertNpy(input: string, output: string, codec?: Codec): number;
  /** As `zr export`; returns the number of records written. */
  exportNpy(input: string, output: string): number;
}

/**
 * A browser preopen: preview2-shim's in-memory file tree, e.g.
 * `{ dir: { 'meta.zr': { source: bytes } } }`.
 */
export interface FileTree {
  dir?: Record<string, FileTree>;
  source?: Uint8Array | string;
}

export interface LoadOptions {
  /** Guest path to host directory (Node) or to an in-memory file tree (browser). */
  preopens?: Record<string, string | FileTree>;
}

/** Instantiates zr.wasm once per process; the first call fixes the preopens. */
export declare function load(options?: LoadOptions): Promise<Zrecord>;
