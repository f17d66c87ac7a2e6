// Reads wit/zrecord.wit, the one source of the component's interface, for the tests that
// hold this package's copies (ERROR_CODES, the README's code table, index.d.ts's unions,
// the argument checks) to it.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const pkg = resolve(repo, 'bindings/js');

const wit = readFileSync(resolve(repo, 'wit/zrecord.wit'), 'utf8');

/** The cases of WIT enum `name`, in order, each as `[case, its doc comment]`. */
export function witEnum(name) {
  const body = wit.match(new RegExp(`enum ${name} \\{([^}]*)\\}`));
  assert.ok(body, `wit/zrecord.wit has no \`enum ${name}\``);
  const cases = [];
  let doc = [];
  for (const line of body[1].split('\n').map((l) => l.trim()).filter(Boolean)) {
    if (line.startsWith('///')) doc.push(line.slice(3).trim());
    else if (!line.startsWith('//')) {
      cases.push([line.replace(/,$/, ''), doc.join(' ')]);
      doc = [];
    }
  }
  return cases;
}

/** The error-code cases as `[kind, code, meaning]`, the code read from the `/// -N: meaning` comment. */
export function witErrorCodes() {
  return witEnum('error-code').map(([kind, doc]) => {
    const m = doc.match(/^(-\d+):\s*(.*)$/);
    assert.ok(m, `WIT error-code case ${kind} has no \`/// -N: meaning\` comment`);
    return [kind, Number(m[1]), m[2]];
  });
}
