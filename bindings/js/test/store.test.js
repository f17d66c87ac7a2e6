// The component from Node: a store written by a native host (the `zr` CLI when it is
// built, else `zr-wasm`, named by $ZR_NATIVE / $ZR_WASM or found under target/release)
// is opened, gathered and inspected through the transpiled bindings; a store the
// component writes is read back, and checked by the native host when it is there.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  closeSync, existsSync, mkdtempSync, mkdirSync, openSync, readSync, rmSync, writeFileSync, readFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import { load, ZrecordError } from '../src/index.js';
import { flipByte } from './damage.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const native = process.env.ZR_NATIVE ?? join(repo, 'target/release/zr');
const wasmRunner = process.env.ZR_WASM ?? join(repo, 'target/release/zr-wasm');
const writer = existsSync(native) ? native : wasmRunner;

const ROWS = 50;
const COLS = 24;
const row = (r) => Uint8Array.from({ length: COLS }, (_, c) => (r * 7 + c) & 0xff);

/** A `|u1` .npy of ROWS x COLS. */
function npy() {
  let header = `{'descr': '|u1', 'fortran_order': False, 'shape': (${ROWS}, ${COLS}), }`;
  while ((10 + header.length + 1) % 64 !== 0) header += ' ';
  header += '\n';
  const pre = Buffer.from([0x93, ...Buffer.from('NUMPY'), 1, 0, header.length & 0xff, header.length >> 8]);
  const body = Buffer.alloc(ROWS * COLS);
  for (let r = 0; r < ROWS; r++) body.set(row(r), r * COLS);
  return Buffer.concat([pre, Buffer.from(header, 'latin1'), body]);
}

let dir;
let zr;

before(async () => {
  assert.ok(existsSync(writer), `no native host at ${native} or ${wasmRunner}: run make wasm-build`);
  dir = mkdtempSync(join(tmpdir(), 'zr-js-'));
  writeFileSync(join(dir, 'a.npy'), npy());
  execFileSync(writer, ['convert', join(dir, 'a.npy'), join(dir, 'native.zr'), '--codec', 'flate'], { stdio: 'pipe' });
  mkdirSync(join(dir, 'fresh'));
  zr = await load({ preopens: { '/data': dir } });
});

after(() => rmSync(dir, { recursive: true, force: true }));

test('gathers records of a natively written store', () => {
  const s = zr.Store.open('/data/native.zr');
  assert.equal(s.length, ROWS);
  const idx = [0, 17, ROWS - 1, 17];
  const g = s.gather(idx);
  assert.deepEqual(Array.from(g.lengths), [COLS, COLS, COLS, COLS]);
  idx.forEach((r, i) => assert.deepEqual(g.records[i], row(r)));
  assert.deepEqual(Array.from(s.lengths([3n, 4n])), [COLS, COLS]);
  s.close();
});

test('inspect and verify report the store', () => {
  const report = zr.inspect('/data/native.zr');
  assert.equal(report.records, ROWS);
  assert.equal(report.flate_records + report.raw_records, ROWS);
  assert.equal(report.bad_entries, 0);
  // A store converted from one .npy is loaderx's: sparse, version 1.
  assert.equal(report.layout, 'sparse');
  assert.equal(report.version, 1);
  assert.deepEqual(report.schema.shape, [COLS]);
  assert.equal(report.schema.dtype, '|u1');
  assert.match(zr.inspectText('/data/native.zr'), new RegExp(`records\\s+${ROWS}`));
  const v = zr.verify('/data/native.zr');
  assert.equal(v.checked, ROWS);
  assert.equal(v.bad_count, 0);
});

test('errors carry the stable codes', () => {
  assert.throws(() => zr.Store.open('/data/nothing-here'), (e) => e instanceof ZrecordError && e.code === -8 && e.kind === 'bad-format');
  const s = zr.Store.open('/data/native.zr');
  assert.throws(() => s.gather([ROWS]), (e) => e instanceof ZrecordError && e.code === -3);
  s.close();
  assert.throws(() => zr.Sampler.create(0, 4), (e) => e instanceof ZrecordError && e.code === -10);
});

test('a store the component writes reads back, here and natively', () => {
  const s = zr.Store.open('/data/fresh', { create: true });
  const recs = [new TextEncoder().encode('alpha'), new Uint8Array(3000).fill(9), Uint8Array.of(1)];
  assert.equal(s.append(recs, 'flate'), 0);
  s.delete([0]);
  s.compact();
  s.sync();
  assert.equal(s.length, 2);
  const g = s.gather([0, 1]);
  assert.deepEqual(g.records[0], Uint8Array.of(1));
  assert.deepEqual(g.records[1], recs[1]);
  assert.equal(s.stats().records, 2);
  s.close();
  if (existsSync(native)) {
    const out = execFileSync(native, ['verify', join(dir, 'fresh')], { encoding: 'utf8' });
    assert.match(out, /2 records checked, 0 bad/);
  }
});

test('convert and export round-trip a .npy', () => {
  assert.equal(zr.convertNpy('/data/a.npy', '/data/js.zr', 'raw'), ROWS);
  assert.equal(zr.exportNpy('/data/js.zr', '/data/back.npy'), ROWS);
  assert.deepEqual(readFileSync(join(dir, 'back.npy')), readFileSync(join(dir, 'a.npy')));
});

test('a failed convertNpy into a new path leaves nothing behind', () => {
  writeFileSync(join(dir, 'fake.npy'), 'not a .npy file, only text pretending to be one');
  writeFileSync(join(dir, 'trunc.npy'), npy().subarray(0, 200));
  mkdirSync(join(dir, 'npydir'));
  const cases = [
    ['/data/fake.npy', '/data/failed.zr', /not a \.npy file/],
    ['/data/trunc.npy', '/data/deep/er/failed.zr', /truncated/],
    ['/data/npydir', '/data/failed.zr', /./],
    ['/data/nope.npy', '/data/failed.zr', /no such file/],
  ];
  for (const [input, output, message] of cases) {
    assert.throws(() => zr.convertNpy(input, output), (e) => e instanceof ZrecordError && message.test(e.message));
  }
  assert.ok(!existsSync(join(dir, 'failed.zr')), 'failed.zr was left behind');
  assert.ok(!existsSync(join(dir, 'deep')), 'deep/ was left behind');
  // Appending to an existing dataset still fails cleanly and keeps what it held.
  assert.throws(() => zr.convertNpy('/data/fake.npy', '/data/native.zr'), ZrecordError);
  const s = zr.Store.open('/data/native.zr');
  assert.equal(s.length, ROWS);
  s.close();
});

test('samplers are deterministic', () => {
  const a = zr.Sampler.create(1000, 8, 'iid', 7);
  const b = zr.Sampler.create(1000, 8, 'iid', 7);
  assert.equal(a.batchSize, 8);
  assert.equal(a.mode, 'iid');
  for (let i = 0; i < 3; i++) assert.deepEqual(a.next(), b.next());
  const seq = zr.Sampler.create(10, 4);
  assert.deepEqual(Array.from(seq.next(), Number), [0, 1, 2, 3]);
});

test('every use after close is a ZrecordError with the locked code', () => {
  const s = zr.Store.open('/data/native.zr');
  assert.equal(s.closed, false);
  s.close();
  s.close(); // idempotent, as in Python
  assert.equal(s.closed, true);
  const uses = {
    length: () => s.length,
    lengths: () => s.lengths([0]),
    gather: () => s.gather([0]),
    append: () => s.append([Uint8Array.of(1)]),
    delete: () => s.delete([0]),
    compact: () => s.compact(),
    stats: () => s.stats(),
    sync: () => s.sync(),
  };
  // A closed store is the answer before the arguments are looked at.
  uses['gather of a bad index'] = () => s.gather([-1]);
  uses['append of a bad record'] = () => s.append(['not bytes']);
  for (const [name, use] of Object.entries(uses)) {
    assert.throws(
      use,
      (e) => e instanceof ZrecordError && e.code === -9 && e.kind === 'locked' && /closed/.test(e.message),
      `${name} after close`,
    );
  }
  // The store itself is untouched: a new handle reads it.
  const again = zr.Store.open('/data/native.zr');
  assert.equal(again.length, ROWS);
  again.close();
});

test('Symbol.dispose closes the store as close() does', () => {
  const s = zr.Store.open('/data/native.zr');
  assert.equal(s.gather([1]).records[0].length, COLS);
  s[Symbol.dispose]();
  assert.equal(s.closed, true);
  assert.throws(() => s.gather([0]), (e) => e instanceof ZrecordError && e.code === -9);
});

test('a damaged record is a checksum error (-11) unless verify is never', () => {
  // Written raw by the component itself, so the flipped byte still decodes: only the
  // checksum the store keeps for it can tell.
  mkdirSync(join(dir, 'fresh/sums.zr'));
  const s = zr.Store.open('/data/fresh/sums.zr', { create: true });
  s.append([row(1), row(2), row(3)], 'raw');
  s.close();
  // Files are sparse and large (meta.zr 256 MiB, a chunk 4 GiB): positional I/O only.
  const entry = Buffer.alloc(16);
  const m = openSync(join(dir, 'fresh/sums.zr/meta.zr'), 'r');
  readSync(m, entry, 0, 16, 16 + 16 * 1);
  closeSync(m);
  const offset = entry.readUInt32LE(0);
  flipByte(join(dir, 'fresh/sums.zr/0.zr'), offset);
  const checked = zr.Store.open('/data/fresh/sums.zr');
  // Named as the native host names it: the store and the record, in the fields and the
  // message.
  assert.throws(
    () => checked.gather([0, 1]),
    (e) => e instanceof ZrecordError && e.kind === 'checksum' && e.code === -11
      && e.path === '/data/fresh/sums.zr' && e.record === 1 && e.message.startsWith('/data/fresh/sums.zr: record 1 '),
  );
  // Other errors name none.
  assert.throws(() => checked.gather([3]), (e) => e instanceof ZrecordError && e.path === null && e.record === null);
  assert.deepEqual(checked.gather([0]).records[0], row(1));
  checked.close();
  const unchecked = zr.Store.open('/data/fresh/sums.zr', { verify: 'never' });
  assert.notDeepEqual(unchecked.gather([1]).records[0], row(2));
  unchecked.close();
  const v = zr.verify('/data/fresh/sums.zr');
  assert.equal(v.bad_count, 1);
  assert.equal(v.checksummed, 3);
});

test('create makes the missing directories of a new store, as Rust and zr do', () => {
  const s = zr.Store.open('/data/made/for/it.zr', { create: true });
  s.append([Uint8Array.of(5)]);
  s.close();
  assert.equal(zr.Store.open('/data/made/for/it.zr').gather([0]).records[0][0], 5);
  if (existsSync(native)) {
    assert.match(execFileSync(native, ['verify', join(dir, 'made/for/it.zr')], { encoding: 'utf8' }), /1 records checked, 0 bad/);
  }
  // Read-only opens create nothing; a file in the way is the component's error.
  assert.throws(() => zr.Store.open('/data/not/made.zr'), ZrecordError);
  assert.ok(!existsSync(join(dir, 'not')));
  writeFileSync(join(dir, 'plain'), 'a file');
  assert.throws(() => zr.Store.open('/data/plain/x.zr', { create: true }), (e) => e instanceof ZrecordError && e.code === -2);
  // Nothing is made outside the preopened directory.
  assert.throws(() => zr.Store.open('/elsewhere/x.zr', { create: true }), ZrecordError);
  assert.throws(() => zr.Store.open('/data/../escape/x.zr', { create: true }), ZrecordError);
  assert.ok(!existsSync(join(dir, '../escape')));
});
