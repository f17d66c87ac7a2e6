// Bad arguments are ZrecordErrors with a stable code, checked before they reach the
// component: jco's lowering threw TypeError for a wrong type or enum string, and wrapped a
// negative or too large integer silently (gather([-1]) asked for index 18446744073709551615,
// gather([2n ** 64n]) returned record 0, a batch size of -1 became 4294967295).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { load, ZrecordError } from '../src/index.js';
import { witEnum } from './wit.js';

let dir;
let zr;
let store;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'zr-js-args-'));
  mkdirSync(join(dir, 's.zr'));
  zr = await load({ preopens: { '/data': dir } });
  store = zr.Store.open('/data/s.zr', { create: true });
  store.append([Uint8Array.of(1), Uint8Array.of(2, 2)], 'raw');
});

after(() => {
  store?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Asserts `f` throws a ZrecordError of `kind` whose message matches `message`. */
function refuses(f, kind, message, what) {
  assert.throws(
    f,
    (e) => {
      assert.ok(e instanceof ZrecordError, `${what}: ${e?.constructor?.name}: ${e?.message}`);
      assert.equal(e.kind, kind, `${what}: ${e.message}`);
      assert.match(e.message, message, what);
      return true;
    },
    what,
  );
}

test('a negative index is out of range (-3) and the message names it as given', () => {
  for (const use of [(i) => store.gather(i), (i) => store.lengths(i), (i) => store.delete(i)]) {
    refuses(() => use([0, -1]), 'index-out-of-range', /^index -1 out of range/, 'index -1');
    refuses(() => use([-7n]), 'index-out-of-range', /^index -7 out of range/, 'index -7n');
    refuses(() => use([2n ** 64n]), 'index-out-of-range', /^index 18446744073709551616 out of range/, 'index 2^64');
  }
  assert.equal(store.length, 2, 'a refused delete removed nothing');
  assert.equal(store.gather([1n]).records[0].length, 2, 'bigint indices still work');
  assert.equal(store.gather(new BigUint64Array([0n])).records[0][0], 1);
  assert.equal(store.gather(new Uint8Array([1])).records[0][0], 2, 'typed arrays of numbers work');
});

test('an index that is not an integer is an invalid argument (-10)', () => {
  for (const bad of [1.5, NaN, Infinity, '0', null, undefined, {}, true]) {
    refuses(() => store.gather([0, bad]), 'invalid-argument', /^indices\[1\] must be an integer/, `index ${String(bad)}`);
  }
  for (const bad of [null, undefined, 3, '01', {}]) {
    refuses(() => store.gather(bad), 'invalid-argument', /^indices must be an array/, `indices ${String(bad)}`);
  }
});

test('an enum string outside its WIT cases is an invalid argument naming the cases', () => {
  const cases = (name) => new RegExp(`^${name} must be one of ${witEnum(name).map(([c]) => `'${c}'`).join(', ')}, got "bogus"$`);
  refuses(() => zr.Sampler.create(10, 2, 'bogus'), 'invalid-argument', cases('mode'), 'mode');
  refuses(() => store.append([Uint8Array.of(1)], 'bogus'), 'invalid-argument', cases('codec'), 'codec');
  refuses(() => zr.convertNpy('/data/a.npy', '/data/b.zr', 'bogus'), 'invalid-argument', cases('codec'), 'convert codec');
  refuses(() => zr.Store.open('/data/s.zr', { verify: 'bogus' }), 'invalid-argument', cases('verify'), 'verify');
  // Every WIT case is accepted.
  for (const [mode] of witEnum('mode')) assert.equal(zr.Sampler.create(10, 2, mode).mode, mode);
  for (const [verify] of witEnum('verify')) zr.Store.open('/data/s.zr', { verify }).close();
  for (const [codec] of witEnum('codec')) assert.equal(typeof store.append([Uint8Array.of(9)], codec), 'number');
});

test('arguments of the wrong type are invalid arguments, not TypeErrors', () => {
  const cases = {
    'open path': [() => zr.Store.open(5), /^path must be a string, got 5$/],
    'open options': [() => zr.Store.open('/data/s.zr', 'rw'), /^options must be an object/],
    'open create': [() => zr.Store.open('/data/s.zr', { create: 'yes' }), /^create must be true or false, got "yes"$/],
    'open readOnly': [() => zr.Store.open('/data/s.zr', { readOnly: 0 }), /^readOnly must be true or false/],
    'inspect path': [() => zr.inspect(undefined), /^path must be a string, got undefined$/],
    'inspectText path': [() => zr.inspectText(null), /^path must be a string/],
    'verify path': [() => zr.verify(['/data/s.zr']), /^path must be a string, got an Array$/],
    'exportNpy output': [() => zr.exportNpy('/data/s.zr', 1), /^output must be a string/],
    'append records': [() => store.append('abc'), /^records must be an array of Uint8Array/],
    'append record': [() => store.append([Uint8Array.of(1), [1, 2]]), /^records\[1\] must be a Uint8Array, got an Array$/],
    'sampler length': [() => zr.Sampler.create('10', 2), /^length must be an integer in 0 \.\. 2\^64 - 1, got "10"$/],
    'sampler negative length': [() => zr.Sampler.create(-1, 2), /^length must be an integer/],
    'sampler batch -1': [() => zr.Sampler.create(10, -1), /^batchSize must be an integer in 0 \.\. 2\^32 - 1, got -1$/],
    'sampler batch 2.5': [() => zr.Sampler.create(10, 2.5), /^batchSize must be an integer/],
    'sampler batch bigint': [() => zr.Sampler.create(10, 2n), /^batchSize must be an integer/],
    'sampler seed -1': [() => zr.Sampler.create(10, 2, 'iid', -1), /^seed must be an integer in 0 \.\. 2\^64 - 1, got -1$/],
    'sampler seed 2^64': [() => zr.Sampler.create(10, 2, 'iid', 2n ** 64n), /^seed must be an integer/],
  };
  for (const [what, [use, message]] of Object.entries(cases)) refuses(use, 'invalid-argument', message, what);
  for (const [what, [use]] of Object.entries(cases)) {
    assert.throws(use, (e) => e.code === -10, `${what} carries code -10`);
  }
  // The largest values still pass.
  assert.equal(zr.Sampler.create(2n ** 64n - 1n, 1, 'iid', 2n ** 64n - 1n).length, 2n ** 64n - 1n);
});
