// The browser example (examples/browser), bundled with esbuild as the README says and run
// in headless Chromium: it fetches a store from a server on 127.0.0.1 (a free port, started
// and stopped here), reads a sampled batch and posts it back, and it must equal what Node
// reads from the same store with the same sampler. Chromium is told to resolve no host name
// (only 127.0.0.1 passes) and to leave its background networking off.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, createReadStream, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { extname, join, normalize } from 'node:path';

import { build } from 'esbuild';

import { load } from '../src/index.js';
import { pkg } from './wit.js';

const work = mkdtempSync(join(tmpdir(), 'zr-js-browser-'));
after(() => rmSync(work, { recursive: true, force: true }));

function chromium() {
  const named = process.env.CHROMIUM;
  if (named) return named;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim();
    } catch {
      // not this one
    }
  }
  return assert.fail('no chromium on PATH (or $CHROMIUM): `make setup` installs Debian\'s chromium');
}

/** A static server of `root` on 127.0.0.1 that resolves `result` with the first POST body. */
function serve(root, served) {
  let resolve;
  const result = new Promise((r) => { resolve = r; });
  const types = { '.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm' };
  const server = createServer((req, res) => {
    if (req.method === 'POST') {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', () => { res.end(); resolve(JSON.parse(body)); });
      return;
    }
    served.push(req.url);
    const path = normalize(join(root, decodeURIComponent(new URL(req.url, 'http://x').pathname)));
    if (!path.startsWith(root) || !existsSync(path) || !statSync(path).isFile()) {
      res.statusCode = 404;
      res.end();
      return;
    }
    res.setHeader('content-type', types[extname(path)] ?? 'application/octet-stream');
    res.setHeader('content-length', statSync(path).size);
    createReadStream(path).pipe(res);
  });
  return new Promise((ready) => server.listen(0, '127.0.0.1', () => ready({ server, result })));
}

/** Kills the process group `child` leads and waits until no process is left in it. */
async function stopGroup(child) {
  const exited = child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise((r) => child.once('exit', r));
  const alive = () => {
    try {
      process.kill(-child.pid, 0);
      return true;
    } catch (e) {
      if (e.code === 'ESRCH') return false;
      throw e;
    }
  };
  if (alive()) process.kill(-child.pid, 'SIGKILL');
  await exited;
  const deadline = Date.now() + 30_000;
  while (alive()) {
    assert.ok(Date.now() < deadline, 'Chromium\'s processes outlived SIGKILL by 30 s');
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('the browser example reads a store in headless Chromium as Node does', async () => {
  const browser = chromium();
  const site = join(work, 'site');
  const records = Array.from({ length: 40 }, (_, i) => Uint8Array.from({ length: 10 + i * 37 }, (_, j) => (i * 31 + j) & 0xff));

  // The store, written here, then published as the README says: its files, each chunk cut
  // to the bytes its records use.
  mkdirSync(join(work, 'store.zr'));
  const zr = await load({ preopens: { '/work': work } });
  const s = zr.Store.open('/work/store.zr', { create: true });
  s.append(records.slice(0, 20), 'flate');
  s.append(records.slice(20), 'raw');
  s.close();
  mkdirSync(site);
  execFileSync('cp', ['-r', '--sparse=always', join(work, 'store.zr'), join(site, 'train.zr')]);
  for (const chunk of zr.inspect('/work/store.zr').chunks) truncateSync(join(site, `train.zr/${chunk.id}.zr`), chunk.used_bytes);

  const expected = zr.Store.open('/work/store.zr');
  const indices = Array.from(zr.Sampler.create(expected.length, 4, 'shuffle', 1234).next(), Number);
  const want = { length: records.length, indices, records: expected.gather(indices).records.map((r) => Array.from(r)) };
  expected.close();

  await build({
    entryPoints: [join(pkg, 'test/browser/harness.js'), join(pkg, 'examples/browser/page.js')],
    bundle: true, format: 'esm', platform: 'browser', external: ['node:*'], outdir: site, entryNames: '[name].bundle',
    logLevel: 'error',
  });
  copyFileSync(join(pkg, 'gen/zr.core.wasm'), join(site, 'zr.core.wasm'));
  writeFileSync(join(site, 'index.html'), '<!doctype html><script type="module" src="./harness.bundle.js"></script>');

  const served = [];
  const { server, result } = await serve(site, served);
  const url = `http://127.0.0.1:${server.address().port}/index.html`;
  const chrome = spawn(browser, [
    '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run', '--no-default-browser-check',
    `--user-data-dir=${join(work, 'profile')}`, '--disable-background-networking', '--disable-component-update',
    '--disable-sync', '--disable-default-apps',
    '--disable-crash-reporter', '--disable-breakpad',
    '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1', url,
  ], { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  let log = '';
  chrome.stderr.on('data', (d) => { log = (log + d).slice(-4000); });
  let timer;
  try {
    const got = await Promise.race([
      result,
      new Promise((_, fail) => { timer = setTimeout(() => fail(new Error(`no result in 60 s; served ${served.join(' ')}; chromium said:\n${log}`)), 60_000); }),
    ]);
    assert.equal(got.error, undefined, got.error);
    const { refused, ...batch } = got.ok;
    assert.deepEqual(batch, want);
    assert.equal(refused.kind, 'index-out-of-range');
    assert.equal(refused.code, -3);
  } finally {
    clearTimeout(timer);
    // Its profile directory is removed after the test: wait until no Chromium process
    // writes there. The main process exiting is not enough (a CI run failed removing the
    // profile, ENOTEMPTY, while a helper of it still wrote): Chromium runs in a process
    // group of its own, which is killed whole and waited for until it is empty.
    await stopGroup(chrome);
    server.closeAllConnections();
    server.close();
  }
});
