// The error table's copies in this package, against the WIT `error-code` enum they mirror
// (wit/zrecord.wit): ERROR_CODES (core/tests/error_table.rs also holds it to the core's
// table) and the README's table of codes, which once stopped at -10 when -11 existed.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { ERROR_CODES, ZrecordError } from '../src/index.js';
import { pkg, witErrorCodes } from './wit.js';

test('ERROR_CODES lists the WIT error-code cases in order with their codes', () => {
  const cases = witErrorCodes();
  assert.ok(cases.length >= 11);
  cases.forEach(([, code], i) => assert.equal(code, -(i + 1), `WIT case ${i} comment`));
  assert.deepEqual(Object.entries(ERROR_CODES), cases.map(([kind, code]) => [kind, code]));
});

test('the README tables every error code with its WIT meaning', () => {
  const readme = readFileSync(join(pkg, 'README.md'), 'utf8');
  const rows = [...readme.matchAll(/^\| (-\d+) \| `([a-z-]+)` \| (.*) \|$/gm)].map((m) => [m[2], Number(m[1]), m[3]]);
  const expected = witErrorCodes();
  assert.deepEqual(
    rows,
    expected,
    `bindings/js/README.md's table of codes should read:\n${expected.map(([k, c, m]) => `| ${c} | \`${k}\` | ${m} |`).join('\n')}`,
  );
});

test('ZrecordError carries the kind and its code', () => {
  for (const [kind, code] of Object.entries(ERROR_CODES)) {
    const e = new ZrecordError(kind, 'why');
    assert.ok(e instanceof Error);
    assert.equal(e.name, 'ZrecordError');
    assert.equal(e.code, code);
    assert.equal(e.kind, kind);
    assert.equal(e.message, 'why');
  }
});
