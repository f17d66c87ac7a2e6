// ERROR_CODES against the WIT `error-code` enum it mirrors (wit/zrecord.wit): the same cases,
// in the same order, with the codes the WIT comments give them. core/tests/error_table.rs
// checks both against the core's table; this keeps the package's own copy honest when only
// the JavaScript side is tested.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ERROR_CODES, ZrecordError } from '../src/index.js';

const wit = readFileSync(resolve(dirname(fileURLToPath(import.meta.url)), '../../../wit/zrecord.wit'), 'utf8');

function witCases() {
  const body = wit.match(/enum error-code \{([^}]*)\}/);
  assert.ok(body, 'wit/zrecord.wit has no `enum error-code`');
  const cases = [];
  let code = null;
  for (const line of body[1].split('\n').map((l) => l.trim()).filter(Boolean)) {
    const doc = line.match(/^\/\/\/\s*(-\d+):/);
    if (doc) code = Number(doc[1]);
    else if (!line.startsWith('//')) cases.push([line.replace(/,$/, ''), code]);
  }
  return cases;
}

test('ERROR_CODES lists the WIT error-code cases in order with their codes', () => {
  const cases = witCases();
  assert.ok(cases.length >= 10);
  cases.forEach(([, code], i) => assert.equal(code, -(i + 1), `WIT case ${i} comment`));
  assert.deepEqual(Object.entries(ERROR_CODES), cases);
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
