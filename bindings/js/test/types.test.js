// index.d.ts, the package's TypeScript types: a typed use of every export compiles under
// `tsc --noEmit --strict` (and its misuses do not), the string unions are the WIT enums'
// cases, and the report interfaces name only fields the component really returns.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { ERROR_CODES, load } from '../src/index.js';
import { pkg, witEnum } from './wit.js';

const dts = readFileSync(join(pkg, 'index.d.ts'), 'utf8');

/** The string literals of `export type name = 'a' | 'b' ...;`. */
function union(name) {
  const m = dts.match(new RegExp(`export type ${name} =([^;]*);`));
  assert.ok(m, `index.d.ts has no \`export type ${name}\``);
  return [...m[1].matchAll(/'([^']*)'/g)].map((c) => c[1]);
}

/** The member names of `export interface name { ... }` (its top-level fields and methods). */
function members(name) {
  const m = dts.match(new RegExp(`export interface ${name} \\{\\n([^]*?)\\n\\}`));
  assert.ok(m, `index.d.ts has no \`export interface ${name}\``);
  return [...m[1].matchAll(/^ {2}(?:readonly )?(\w+)\??[:(]/gm)].map((f) => f[1]);
}

test('a typed use of the API compiles with tsc --noEmit, and its misuses fail', () => {
  const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', join(pkg, 'test/typed/tsconfig.json')], { cwd: pkg, encoding: 'utf8' });
  } catch (e) {
    assert.fail(`tsc --noEmit over test/typed/usage.ts:\n${e.stdout}${e.stderr}`);
  }
});

test("the types' string unions are the WIT enums' cases", () => {
  assert.deepEqual(union('ErrorKind'), witEnum('error-code').map(([c]) => c));
  assert.deepEqual(union('ErrorKind'), Object.keys(ERROR_CODES));
  for (const [type, wit] of [['Mode', 'mode'], ['Codec', 'codec'], ['Verify', 'verify']]) {
    assert.deepEqual(union(type), witEnum(wit).map(([c]) => c), `${type} against WIT enum ${wit}`);
  }
});

test('the typed reports name fields the component returns', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'zr-js-types-'));
  try {
    const zr = await load({ preopens: { '/data': dir } });
    const s = zr.Store.open('/data/s.zr', { create: true });
    s.append([Uint8Array.of(1, 2, 3)]);
    const got = {
      Stats: s.stats(),
      Gathered: s.gather([0]),
      InspectReport: zr.inspect('/data/s.zr'),
      ChunkReport: zr.inspect('/data/s.zr').chunks[0],
      Verification: zr.verify('/data/s.zr'),
    };
    s.close();
    for (const [name, value] of Object.entries(got)) {
      for (const field of members(name)) assert.ok(field in value, `${name}.${field} is typed but not returned`);
    }
    for (const field of members('Store')) assert.ok(field in s, `Store.${field} is typed but missing`);
    for (const field of members('Sampler')) assert.ok(field in zr.Sampler.create(4, 2), `Sampler.${field}`);
    const stream = zr.Stream.create({ length: 4, generation: 1 }, { mode: 'shuffle', seed: 0, globalBatch: 2 });
    for (const field of members('Stream')) assert.ok(field in stream, `Stream.${field}`);
    for (const field of members('DatasetId')) assert.ok(field in stream.dataset, `DatasetId.${field}`);
    for (const field of members('StreamState').filter((f) => f !== 'eras')) {
      assert.ok(field in stream.state(1), `StreamState.${field}`);
    }
    for (const field of members('Zrecord')) assert.ok(field in zr, `Zrecord.${field}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
