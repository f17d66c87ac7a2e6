// `Dataset` (the WIT `dataset` resource) under Node, over a dataset the Python package
// writes: every kind of field over three shards, an empty string, and a token document
// longer than a record (a shard's `long` field, read back whole); byte lengths from the
// tables; out-of-range and unknown-field errors; verify by range; a damaged record named by
// path, field and record.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { load, ZrecordError } from '../src/index.js';
import { flipByte } from './damage.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const python = process.env.PYTHON ?? join(repo, '.venv/bin/python');
const work = mkdtempSync(join(tmpdir(), 'zr-js-dataset-'));
after(() => rmSync(work, { recursive: true, force: true }));

const LONG = 700_000; // uint16 elements: 1.4 MB, more than a record holds
let zr;

before(async () => {
  assert.ok(existsSync(python), `no Python at ${python}: make setup makes .venv (or set PYTHON)`);
  execFileSync(python, ['-c', `
import numpy as np, zrecord
n = 10
tokens = [np.arange(i + 1, dtype=np.uint16) for i in range(n)]
tokens[3] = (np.arange(${LONG}) % 65521).astype(np.uint16)
zrecord.Dataset.write(${JSON.stringify(join(work, 'ds'))}, {
    "caption": [f"caption {i}" if i != 5 else "" for i in range(n)],
    "blob": [bytes([i] * i) for i in range(n)],
    "tokens": tokens,
    "label": np.arange(n, dtype=np.int64) * 10,
}, shard_records=4, metadata={"description": "js dataset test"})
`]);
  zr = await load({ preopens: { '/work': work } });
});

test('a dataset reads every kind of field across shards, long samples whole', () => {
  const ds = zr.Dataset.open('/work/ds');
  assert.equal(ds.length, 10);
  const d = ds.describe();
  assert.equal(d.records, 10);
  assert.deepEqual(d.fields.map((f) => [f.name, f.kind]), [['caption', 'string'], ['blob', 'bytes'], ['tokens', 'ragged'], ['label', 'fixed']]);
  assert.deepEqual(d.shards.map((s) => s.records), [4, 4, 2]);
  assert.deepEqual(d.shards[0].long, ['tokens']);
  assert.equal(d.metadata.description, 'js dataset test');

  const text = new TextDecoder();
  const captions = ds.gather('caption', [9, 0, 5, 4]).records.map((r) => text.decode(r));
  assert.deepEqual(captions, ['caption 9', 'caption 0', '', 'caption 4']);
  assert.deepEqual(Array.from(ds.gather('blob', [7, 0]).records, (r) => Array.from(r)), [[7, 7, 7, 7, 7, 7, 7], []]);
  const labels = ds.gather('label', [8, 1]).records.map((r) => new DataView(r.buffer, r.byteOffset).getBigInt64(0, true));
  assert.deepEqual(labels, [80n, 10n]);

  const { records } = ds.gather('tokens', [3, 6]);
  const long = new Uint16Array(records[0].slice().buffer);
  assert.equal(long.length, LONG);
  assert.ok(long.every((v, i) => v === i % 65521), 'the long document reads back whole, in order');
  assert.deepEqual(Array.from(new Uint16Array(records[1].slice().buffer)), [0, 1, 2, 3, 4, 5, 6]);
  assert.deepEqual(ds.byteLengths('tokens', [3, 0]), [2 * LONG, 2]);
  assert.deepEqual(ds.byteLengths('caption', [5, 1]), [0, 9]);
  ds.close();
  assert.ok(ds.closed);
  assert.throws(() => ds.length, (e) => e instanceof ZrecordError && e.code === -9);
});

test('bad indices and fields are refused with what is wrong', () => {
  const ds = zr.Dataset.open('/work/ds');
  assert.throws(() => ds.gather('label', [10]), (e) => e instanceof ZrecordError && e.kind === 'index-out-of-range'
    && /index 10 out of range for a dataset of 10 samples/.test(e.message));
  assert.throws(() => ds.gather('nope', [0]), (e) => e.kind === 'invalid-argument'
    && /no field "nope"; its fields are caption, blob, tokens, label/.test(e.message));
  assert.throws(() => zr.Dataset.open('/work'), (e) => e.kind === 'io' && /dataset\.json/.test(e.message));
  ds.close();
});

test('verify by range, and a damaged record named by path, field and record', () => {
  let ds = zr.Dataset.open('/work/ds');
  assert.deepEqual(ds.verify(0, 100), { checked: 40, bad_count: 0, bad: [] });
  assert.equal(ds.verify(8, 5).checked, 8);
  ds.close();
  // The last byte of shard 1's caption chunk belongs to its last record (3: sample 7).
  const chunk = join(work, 'ds', JSON.parse(readFileSync(join(work, 'ds/dataset.json'))).shards[1].dir, 'caption/0.zr');
  flipByte(chunk, undefined, 0x55);
  ds = zr.Dataset.open('/work/ds');
  assert.throws(() => ds.gather('caption', [6, 7]), (e) => e instanceof ZrecordError && e.kind === 'checksum'
    && e.field === 'caption' && e.record === 3 && /shard-000001\/caption$/.test(e.path)
    && /field "caption"/.test(e.message) && /record 3/.test(e.message));
  const report = ds.verify(0, 10);
  assert.equal(report.bad_count, 1);
  assert.deepEqual([report.bad[0].field, report.bad[0].index, report.bad[0].record], ['caption', 7, 3]);
  ds.close();
});
