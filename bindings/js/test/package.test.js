// The package as a user gets it: its source files as git has them (no gen/, which is build
// output) are packed with `npm pack`, which runs the `prepare` build, and the tarball is
// installed into a new project, which then imports '@zrecord/wasm' by name and writes and
// reads a store. Before the build script this failed with ERR_MODULE_NOT_FOUND: the packed
// package had no gen/zr.js.
//
// Nothing is fetched: the new project is installed with `npm ci --offline` from a lockfile
// that pins the package's runtime dependencies to the versions bindings/js/package-lock.json
// has, whose tarballs the `npm ci` of `make setup` left in npm's cache. (A plain
// `npm install x.tgz` would need the registry's package listings, which that cache lacks.)

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import {
  cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

import { pkg, repo } from './wit.js';

const component = process.env.ZR_WASM_COMPONENT ?? join(repo, 'target/wasm/zr.wasm');
const work = mkdtempSync(join(tmpdir(), 'zr-js-package-'));
after(() => rmSync(work, { recursive: true, force: true }));

function npm(args, cwd, env = {}) {
  return execFileSync('npm', [...args, '--offline', '--no-audit', '--no-fund'], {
    cwd, encoding: 'utf8', stdio: 'pipe', env: { ...process.env, ...env },
  });
}

/** The package's files as a fresh clone has them: what git tracks or would, minus the tests. */
function sourceFiles() {
  const listed = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '.'], { cwd: pkg, encoding: 'utf8' });
  return listed.split('\n').filter((f) => f && !f.startsWith('test/') && existsSync(join(pkg, f)));
}

/** A lockfile for a project depending on the packed package, its dependencies as locked here. */
function lockfile(dependencies) {
  const ours = JSON.parse(readFileSync(join(pkg, 'package.json'), 'utf8'));
  const locked = JSON.parse(readFileSync(join(pkg, 'package-lock.json'), 'utf8')).packages;
  const packages = {
    '': { name: 'uses-zrecord', dependencies },
    'node_modules/@zrecord/wasm': { version: ours.version, resolved: dependencies['@zrecord/wasm'], dependencies: ours.dependencies },
  };
  for (const [path, entry] of Object.entries(locked)) {
    if (path !== '' && !entry.dev && !entry.devOptional) packages[path] = entry;
  }
  return { name: 'uses-zrecord', lockfileVersion: 3, requires: true, packages };
}

test('npm pack builds the package from the source tree; the tarball installs and runs', () => {
  assert.ok(existsSync(component), `no zr.wasm at ${component}: run make wasm-build`);
  const src = join(work, 'source/bindings/js');
  for (const f of sourceFiles()) {
    mkdirSync(dirname(join(src, f)), { recursive: true });
    cpSync(join(pkg, f), join(src, f));
  }
  assert.ok(!existsSync(join(src, 'gen')), 'gen/ is build output and should not be in git');
  // The build's tools (jco) are the dev dependencies `make setup` installed.
  symlinkSync(join(pkg, 'node_modules'), join(src, 'node_modules'));

  npm(['pack', '--pack-destination', work], src, { ZR_WASM_COMPONENT: component });
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  assert.ok(tarball, 'npm pack wrote no tarball');
  const listing = execFileSync('tar', ['-tzf', join(work, tarball)], { encoding: 'utf8' });
  for (const f of ['package/gen/zr.js', 'package/gen/zr.core.wasm', 'package/src/index.js', 'package/index.d.ts']) {
    assert.ok(listing.split('\n').includes(f), `${f} is not in the tarball:\n${listing}`);
  }

  const project = join(work, 'project');
  mkdirSync(join(project, 'data/s.zr'), { recursive: true });
  const dependencies = { '@zrecord/wasm': `file:../${tarball}` };
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'uses-zrecord', private: true, type: 'module', dependencies }));
  writeFileSync(join(project, 'package-lock.json'), JSON.stringify(lockfile(dependencies)));
  npm(['ci'], project);
  writeFileSync(join(project, 'main.js'), `
    import { load, ZrecordError } from '@zrecord/wasm';
    const zr = await load({ preopens: { '/data': ${JSON.stringify(join(project, 'data'))} } });
    const s = zr.Store.open('/data/s.zr', { create: true });
    s.append([new TextEncoder().encode('hello'), Uint8Array.of(7)]);
    let code = 0;
    try { s.gather([-1]); } catch (e) { code = e instanceof ZrecordError ? e.code : 'not a ZrecordError'; }
    console.log(JSON.stringify({ text: new TextDecoder().decode(s.gather([0]).records[0]), length: s.length, code }));
    s.close();
  `);
  const out = execFileSync(process.execPath, ['main.js'], { cwd: project, encoding: 'utf8' });
  assert.deepEqual(JSON.parse(out), { text: 'hello', length: 2, code: -3 });
});
