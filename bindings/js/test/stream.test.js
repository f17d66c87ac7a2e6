// `Stream` (the WIT `stream` resource) against the Python package's loader: states that
// `DataLoader.state_dict()` saved (test/stream_fixture.py), sent through JSON.parse and
// JSON.stringify as a JavaScript program keeps them, resume here on the same dataset and
// give the batches the Python loader returned after saving, on one rank or split over
// two; the identity `Dataset.id()` computes is the one the state names; a state of
// another dataset, seed, mode or global batch is refused saying so; one saved before an
// append resumes on the grown dataset, its epoch finishing over the old samples, and one
// saved before a field was added resumes after it.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { load, ZrecordError } from '../src/index.js';

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, '../../..');
const python = process.env.PYTHON ?? join(repo, '.venv/bin/python');
const work = mkdtempSync(join(tmpdir(), 'zr-js-stream-'));
after(() => rmSync(work, { recursive: true, force: true }));

const MODES = ['sequential', 'iid', 'shuffle'];
let zr;
let fx;

before(async () => {
  assert.ok(existsSync(python), `no Python at ${python}: make setup makes .venv (or set PYTHON)`);
  const out = execFileSync(python, [join(here, 'stream_fixture.py'), work], { encoding: 'utf8' });
  fx = JSON.parse(out.match(/^stream-fixture: (.*)$/m)[1]);
  zr = await load({ preopens: { '/work': work } });
});

/** The options a loader of the fixture ran with. */
function optionsOf(run) {
  return { mode: MODES[run.mode], seed: BigInt(run.seed), globalBatch: run.batch };
}

/** A saved state as a JavaScript program keeps it: parsed, and written back. */
function roundTrip(text) {
  return JSON.parse(JSON.stringify(JSON.parse(text)));
}

const indices = (batch) => Array.from(batch, Number);

function refused(f, pattern) {
  assert.throws(f, (e) => {
    assert.ok(e instanceof ZrecordError, `${e}`);
    assert.equal(e.kind, 'invalid-argument');
    assert.match(e.message, pattern);
    return true;
  });
}

test("the dataset's identity is the one the Python loader's state names", () => {
  const ds = zr.Dataset.open('/work/ds');
  const [saved] = JSON.parse(fx.shuffle.state).datasets;
  // Every store zrecord creates has a nonce, so the generation is past 2^53: a string.
  assert.equal(typeof saved.generation, 'string');
  assert.deepEqual(ds.id(), { length: 100n, generation: BigInt(saved.generation) });
  assert.deepEqual(ds.grownFrom(), []);
  const twin = zr.Dataset.open('/work/twin');
  assert.equal(twin.id().length, 100n);
  assert.notEqual(twin.id().generation, ds.id().generation, 'a dataset written again is another dataset');
  ds.close();
  twin.close();
});

for (const name of ['shuffle', 'iid']) {
  test(`the state of ${name === 'iid' ? 'an' : 'a'} ${name} loader saved in Python resumes after a JSON round trip, batch for batch`, () => {
    const run = fx[name];
    const ds = zr.Dataset.open('/work/ds');
    const stream = zr.Stream.create(ds, optionsOf(run));
    const state = roundTrip(run.state);
    const { stream: resumed, step } = stream.resume(state);
    assert.equal(step, JSON.parse(run.state).step);
    run.after.forEach((want, i) => assert.deepEqual(indices(resumed.batch(step + i)), want, `batch ${step + i}`));
    // Another split of the same global batch: two ranks of half as many.
    if (run.batch % 2 === 0) {
      const half = run.batch / 2;
      run.after.forEach((want, i) => {
        assert.deepEqual(indices(resumed.batch(step + i, 0, 2)), want.slice(0, half));
        assert.deepEqual(indices(resumed.batch(step + i, 1, 2)), want.slice(half));
      });
    }
    // The state saved here is the one Python saved: the same object, and the same after
    // a JSON round trip, at the same step.
    assert.deepEqual(resumed.state(step), JSON.parse(run.state));
    assert.deepEqual(roundTrip(JSON.stringify(resumed.state(step))), JSON.parse(run.state));
    // The text as saved resumes too, without a parse.
    assert.equal(stream.resume(run.state).step, step);
    assert.equal(resumed.mode, name);
    assert.equal(resumed.seed, BigInt(run.seed));
    assert.equal(resumed.globalBatch, run.batch);
    resumed.close();
    stream.close();
    ds.close();
  });
}

test('a state written with generations as JSON numbers loses them in JSON.parse, and is refused', () => {
  // What zrecord wrote before such numbers became strings: the text itself still resumes,
  // a parse rounds the generation to the nearest double and the resume is refused.
  const numeric = fx.shuffle.state.replace(/"generation": "(\d+)"/, '"generation": $1');
  assert.notEqual(numeric, fx.shuffle.state);
  const stream = zr.Stream.create(zr.Dataset.open('/work/ds'), optionsOf(fx.shuffle));
  assert.equal(stream.resume(numeric).step, 5);
  refused(() => stream.resume(roundTrip(numeric)), /cannot resume: dataset 0 is at generation \d+ but the state was saved at generation \d+/);
});

test('a state of another dataset, seed, mode or global batch is refused, saying what differs', () => {
  const run = fx.shuffle;
  const state = roundTrip(run.state);
  const open = (path, opts) => zr.Stream.create(zr.Dataset.open(path), { ...optionsOf(run), ...opts });
  refused(() => open('/work/twin').resume(state), /cannot resume: dataset 0 is at generation .* another dataset of the same length/);
  refused(() => open('/work/ds', { seed: 8 }).resume(state), /cannot resume: the state was saved with seed 7, this loader uses seed 8/);
  refused(() => open('/work/ds', { mode: 'iid' }).resume(state), /saved in mode 2 \(SHUFFLE\), this loader uses mode 1 \(IID\)/);
  refused(() => open('/work/ds', { globalBatch: 16 }).resume(state), /global batch of 8 samples .* this loader's is 16/);
  refused(() => open('/work/grow').resume(state), /dataset 0 has 90 samples but the state was saved when it had 100/);
  refused(() => open('/work/ds').resume('{"version": 1}'), /cannot resume: not a zrecord stream state/);
  refused(() => open('/work/ds').resume({ ...state, version: 9 }), /stream state version 9 is not supported/);
});

test('a state saved before an append resumes on the grown dataset: its epoch ends, then all rows', () => {
  const run = fx.grown;
  const saved = JSON.parse(run.state);
  const ds = zr.Dataset.open('/work/grow');
  assert.deepEqual(ds.grownFrom(), [{ length: 60n, generation: BigInt(saved.datasets[0].generation) }]);
  const stream = zr.Stream.create(ds, optionsOf(run));
  const { stream: resumed, step } = stream.resume(roundTrip(run.state));
  assert.equal(step, 3);
  run.after.forEach((want, i) => assert.deepEqual(indices(resumed.batch(step + i)), want, `batch ${step + i}`));
  // The saved epoch (7 steps of 60) reads old rows only; the appended ones join after it.
  assert.ok(run.after.slice(0, 4).flat().every((i) => i < 60));
  assert.ok(run.after.slice(4).flat().some((i) => i >= 60));
  // The grown stream's state lists its eras, and resumes again (here, and in Python).
  const again = resumed.state(step + 5);
  assert.equal(again.version, 2);
  assert.ok(Array.isArray(again.eras) && again.eras.length === 2);
  const { stream: third, step: at } = stream.resume(roundTrip(JSON.stringify(again)));
  assert.deepEqual(indices(third.batch(at)), run.after[5]);
  // By its identity alone, without the manifest's record of the append, it is refused.
  const bare = zr.Stream.create(ds.id(), optionsOf(run));
  refused(() => bare.resume(roundTrip(run.state)), /dataset 0 has 90 samples but the state was saved when it had 60/);
  ds.close();
});

test('a state saved before a field was added resumes after it: the identity is the rows\'', () => {
  const run = fx.columns;
  const ds = zr.Dataset.open('/work/cols');
  assert.ok(ds.describe().rows !== undefined, 'the manifest keeps the rows\' identity');
  assert.equal(ds.id().generation, BigInt(JSON.parse(run.state).datasets[0].generation));
  const { stream, step } = zr.Stream.create(ds, optionsOf(run)).resume(roundTrip(run.state));
  run.after.forEach((want, i) => assert.deepEqual(indices(stream.batch(step + i)), want, `batch ${step + i}`));
  ds.close();
});

test('a stream over an identity: its own rules and errors, and use after close', () => {
  const s = zr.Stream.create({ length: 10, generation: 2n ** 63n }, { mode: 'shuffle', seed: 0, globalBatch: 4 });
  assert.equal(s.stepsPerEpoch, 2);
  assert.deepEqual(s.dataset, { length: 10n, generation: 2n ** 63n });
  const state = s.state(3);
  assert.equal(state.datasets[0].generation, String(2n ** 63n));
  assert.equal(zr.Stream.create({ length: 10, generation: 1 }, { mode: 'iid', seed: 0, globalBatch: 4 }).stepsPerEpoch, null);
  // The epoch's order, every sample once but the dropped N mod G.
  const epoch = [...indices(s.batch(0)), ...indices(s.batch(1))];
  assert.equal(new Set(epoch).size, 8);
  assert.ok(epoch.every((i) => i < 10));
  refused(() => s.batch(0, 0, 3), /world_size 3 does not divide the global batch of 4 samples/);
  refused(() => s.batch(0, 2, 2), /rank 2 is not in 0..2/);
  refused(() => zr.Stream.create({ length: 3, generation: 0 }, { mode: 'shuffle', seed: 0, globalBatch: 4 }),
    /a SHUFFLE epoch of 3 samples holds no global batch of 4/);
  refused(() => zr.Stream.create({ length: 0, generation: 0 }, { mode: 'iid', seed: 0, globalBatch: 4 }), /dataset is empty/);
  refused(() => zr.Stream.create({ length: 10, generation: 0 }, { mode: 'random', seed: 0, globalBatch: 4 }), /mode must be one of/);
  refused(() => zr.Stream.create({ length: 10, generation: 0 }, { mode: 'iid', globalBatch: 4 }), /seed must be an integer/);
  refused(() => zr.Stream.create({ length: 10 }, { mode: 'iid', seed: 0, globalBatch: 4 }), /dataset.generation must be an integer/);
  refused(() => s.resume(42), /state must be a state object or its JSON text/);
  // A bigint in a state object is written as the state's portable numbers are.
  assert.equal(s.resume({ ...state, step: 3n, datasets: [{ length: 10n, generation: 2n ** 63n }] }).step, 3);
  s.close();
  assert.ok(s.closed);
  assert.throws(() => s.batch(0), (e) => e instanceof ZrecordError && e.code === -9 && /stream is closed/.test(e.message));
});
