// A typed use of every export of @zrecord/wasm, compiled by test/types.test.js with
// `tsc --noEmit` against index.d.ts (imported by the package's own name, as a user would).
// The @ts-expect-error lines are misuses the types must reject.

import { ERROR_CODES, load, ZrecordError } from '@zrecord/wasm';
import type {
  Codec, Dataset, DatasetDescription, DatasetVerification, ErrorKind, Gathered, InspectReport, Mode, Sampler, Stats,
  Store, Stream, StreamState, Verification, Verify, Zrecord, DatasetId,
} from '@zrecord/wasm';

export async function use(): Promise<number> {
  const zr: Zrecord = await load({ preopens: { '/data': '/srv/datasets', '/mem': { dir: { 'a.txt': { source: 'x' } } } } });
  const store: Store = zr.Store.open('/data/train.zr', { create: true, readOnly: false, verify: 'always' });
  const first: number = store.append([new Uint8Array(3)], 'flate');
  const g: Gathered = store.gather([0, 1n]);
  const bytes: Uint8Array = g.records[0];
  const lens: Uint32Array = store.lengths(new BigUint64Array([0n]));
  store.delete(new Set([first]));
  store.compact();
  store.sync();
  const stats: Stats = store.stats();
  const live: bigint = stats.liveBytes;
  const closed: boolean = store.closed;
  store.close();
  store[Symbol.dispose]();

  const ds: Dataset = zr.Dataset.open('/data/train_ds');
  const about: DatasetDescription = ds.describe();
  const kind: string = about.fields[0].kind;
  const captions: Gathered = ds.gather('caption', [0, 1n]);
  const sizes: number[] = ds.byteLengths('caption', [0]);
  const checked: DatasetVerification = ds.verify(0, 4096n);
  const where: string | null = checked.bad[0]?.field ?? null;
  ds.close();
  // @ts-expect-error: a field is named by its string
  ds.gather(0, [0]);

  const mode: Mode = 'shuffle';
  const sampler: Sampler = zr.Sampler.create(1000, 32, mode, 7n);
  const batch: BigUint64Array = sampler.next();
  const n: bigint = sampler.length;

  const stream: Stream = zr.Stream.create(ds, { mode: 'shuffle', seed: 42, globalBatch: 256 });
  const saved: StreamState = stream.state(10);
  const { stream: resumed, step }: { stream: Stream; step: number } = stream.resume(JSON.stringify(saved));
  const again = resumed.resume(saved).step + step;
  const slice: BigUint64Array = resumed.batch(step, 1, 4n);
  const id: DatasetId = zr.Stream.create({ length: 10n, generation: 1 }, { mode: 'iid', seed: 0n, globalBatch: 2 }).dataset;
  const grown: DatasetId[] = ds.grownFrom();
  const epoch: number | null = resumed.stepsPerEpoch;
  const generation: bigint = ds.id().generation + id.length;
  resumed.close();
  // @ts-expect-error: mode, seed and globalBatch are required
  zr.Stream.create(ds, { mode: 'shuffle' });
  // @ts-expect-error: a state is an object or its JSON text
  stream.resume(3);

  const report: InspectReport = zr.inspect('/data/train.zr');
  const dtype: string | undefined = report.schema?.dtype;
  const v: Verification = zr.verify('/data/train.zr');
  const text: string = zr.inspectText('/data/train.zr');
  const converted: number = zr.convertNpy('/data/a.npy', '/data/a.zr', 'raw' satisfies Codec);
  const exported: number = zr.exportNpy('/data/a.zr', '/data/b.npy');
  const verify: Verify = 'never';

  try {
    zr.Store.open('/data/nothing');
  } catch (e) {
    if (e instanceof ZrecordError) {
      const kind: ErrorKind = e.kind;
      const code: number = e.code === ERROR_CODES[kind] ? e.code : 0;
      return code;
    }
  }

  // @ts-expect-error: not a sampler mode
  zr.Sampler.create(10, 2, 'random');
  // @ts-expect-error: not a codec
  store.append([bytes], 'zstd');
  // @ts-expect-error: records are Uint8Arrays
  store.append([[1, 2, 3]]);
  // @ts-expect-error: indices are numbers or bigints
  store.gather(['0']);
  // @ts-expect-error: not a verify mode
  zr.Store.open('/data/x', { verify: 'sometimes' });
  // @ts-expect-error: not an error kind
  new ZrecordError('oops', 'message');
  // @ts-expect-error: the API object is frozen in shape
  zr.missing('/data/x');

  return first + lens.length + Number(live) + Number(closed) + batch.length + Number(n) +
    v.bad_count + text.length + converted + exported + (dtype?.length ?? 0) + verify.length +
    kind.length + captions.records.length + sizes.length + checked.checked + (where?.length ?? 0) +
    again + slice.length + grown.length + (epoch ?? 0) + Number(generation);
}
