// `zr view` in headless Chromium (Debian's, driven by playwright-core): the page built by
// scripts/build-viewer.js, served by the native `zr view` on 127.0.0.1, reading datasets
// that test/view_fixture.py writes (with the Python package) and pushes to moto's S3
// server, which it starts on 127.0.0.1 and stops when this file is done. Checks what a
// user sees: the card, the fields, a sample's caption, the label histogram's counts,
// thumbnails that are not blank in a screenshot, a page 10^5 samples into a 10^6-sample
// dataset fetching under 1% of it, the same page over the dataset's URL on the S3 server,
// verify, and a damaged record named by field and record.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateSync } from 'node:zlib';
import { createInterface } from 'node:readline';

import { chromium } from 'playwright-core';

import { flipByte } from './damage.js';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(pkg, '../..');
const python = process.env.PYTHON ?? join(repo, '.venv/bin/python');
const zr = process.env.ZR_NATIVE ?? join(repo, 'target/release/zr');

const work = mkdtempSync(join(tmpdir(), 'zr-view-'));
const site = join(work, 'site');
const children = [];
let data;
let browser;

function browserPath() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim();
    } catch {
      // not this one
    }
  }
  return assert.fail('no chromium on PATH (or $CHROMIUM): `make setup` installs Debian\'s chromium');
}

/** The first line `child` prints on stdout that starts with `prefix`, without it (its
 * stderr kept for the failure message). */
function firstLine(child, what, prefix = '') {
  let err = '';
  child.stderr.on('data', (d) => {
    err = (err + d).slice(-4000);
  });
  return new Promise((ok, fail) => {
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      if (line.startsWith(prefix)) ok(line.slice(prefix.length));
    });
    child.once('exit', (code) => fail(new Error(`${what} exited (${code}) before printing: ${err}`)));
  });
}

before(async () => {
  assert.ok(existsSync(zr), `no native zr at ${zr}: build it (make build) or set ZR_NATIVE`);
  assert.ok(existsSync(python), `no Python at ${python}: make setup makes .venv (or set PYTHON)`);
  execFileSync(process.execPath, [join(pkg, 'scripts/build-viewer.js'), site], { stdio: 'inherit' });
  const fixture = spawn(python, [join(pkg, 'test/view_fixture.py'), work], { stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(fixture);
  data = JSON.parse(await firstLine(fixture, 'view_fixture.py', 'view-fixture: '));
  browser = await chromium.launch({
    executablePath: browserPath(),
    // As root in a container, without the background traffic a closed network refuses.
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1'],
  });
});

after(async () => {
  await browser?.close();
  for (const child of children) {
    child.stdin?.end();
    child.kill('SIGINT');
  }
  await Promise.all(children.map((c) => (c.exitCode === null && c.signalCode === null
    ? new Promise((r) => c.once('exit', r)) : null)));
  rmSync(work, { recursive: true, force: true });
});

/** `zr view target` started; resolves to the page URL it printed. */
async function serve(target, ...options) {
  const child = spawn(zr, ['view', target, '--site', site, ...options], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const line = await firstLine(child, 'zr view');
  const url = /http:\/\/127\.0\.0\.1:\d+\/\S*/.exec(line)?.[0];
  assert.ok(url, `zr view printed no URL: ${line}`);
  return url;
}

/** A page at `url`, once it has finished what it was doing (`data-ready`). */
async function settled(page) {
  await page.waitForFunction(() => document.body.dataset.ready && document.body.dataset.ready !== 'busy',
    null, { timeout: 60_000 });
  const ready = await page.evaluate(() => document.body.dataset.ready);
  assert.equal(ready, 'yes', `the page failed: ${await page.textContent('#status')}`);
}

async function open(url) {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(url);
  await settled(page);
  assert.deepEqual(errors, []);
  return page;
}

/** The text of the cell of `field` in the row of sample `index`. */
function cellText(page, index, field) {
  return page.textContent(`#samples tr[data-index="${index}"] td[data-field="${field}"]`);
}

/** Rows of the histogram titled `title`: [[label, count], ...]. */
async function histogram(page, title) {
  return page.evaluate((t) => {
    const box = [...document.querySelectorAll('#hists h3')].find((h) => h.textContent === t)?.parentElement;
    if (!box) return null;
    return [...box.querySelectorAll('tr')].map((tr) => [tr.cells[0].textContent, Number(tr.cells[1].textContent)]);
  }, title);
}

/** RGB(A) pixels of an 8-bit, non-interlaced PNG (what Chromium's screenshots are). */
function pngPixels(png) {
  let at = 8;
  let width = 0;
  let height = 0;
  let channels = 0;
  const idat = [];
  while (at < png.length) {
    const len = png.readUInt32BE(at);
    const type = png.toString('latin1', at + 4, at + 8);
    const body = png.subarray(at + 8, at + 8 + len);
    if (type === 'IHDR') {
      width = body.readUInt32BE(0);
      height = body.readUInt32BE(4);
      assert.equal(body[8], 8, 'an 8-bit PNG');
      channels = { 2: 3, 6: 4 }[body[9]];
      assert.ok(channels, `PNG colour type ${body[9]}`);
    } else if (type === 'IDAT') {
      idat.push(body);
    }
    at += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y += 1) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x += 1) {
      const a = x >= channels ? out[y * stride + x - channels] : 0;
      const b = y > 0 ? out[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? out[(y - 1) * stride + x - channels] : 0;
      const p = a + b - c;
      const pa = Math.abs(p - a);
      const pb = Math.abs(p - b);
      const pc = Math.abs(p - c);
      const predictor = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][filter];
      out[y * stride + x] = (line[x] + predictor) & 0xff;
    }
  }
  return { width, height, channels, pixels: out };
}

/** The share of a screenshot's pixels near `rgb`. */
function shareNear(png, rgb) {
  const { width, height, channels, pixels } = pngPixels(png);
  let near = 0;
  for (let k = 0; k < width * height; k += 1) {
    const d = [0, 1, 2].reduce((s, i) => s + Math.abs(pixels[k * channels + i] - rgb[i]), 0);
    if (d < 60) near += 1;
  }
  return near / (width * height);
}

const COLOURS = [[220, 30, 30], [30, 180, 30], [30, 30, 220]];
const caption = (i) => `sample ${i}: a ${['red', 'green', 'blue'][i % 3]} square`;
const text = (i) => `${caption(i)} — naïve café №${i}`;

test('zr view shows the card, fields, samples, thumbnails and the label histogram', async () => {
  const page = await open(await serve(data.small, '--tokenizer', data.tokenizer));
  const fields = await page.textContent('#fields');
  for (const f of ['image', 'caption', 'tokens', 'label', 'encoded', 'pixels', 'ragged', 'string']) assert.match(fields, new RegExp(f));
  assert.match(await page.textContent('#card'), /the viewer test's small dataset/);
  assert.match(await page.textContent('#summary'), /^240 samples, 7 fields, 1 shards/);
  // Token ids decoded in the page with the tokenizer zr view was given (byte-level BPE,
  // non-ASCII text included), the ids below.
  for (const index of [0, 13]) {
    const shown = await page.textContent(`#samples tr[data-index="${index}"] td[data-field="encoded"] > span`);
    assert.equal(shown, text(index));
  }
  assert.equal(await cellText(page, 0, 'caption'), caption(0));
  assert.equal(await cellText(page, 7, 'caption'), caption(7));
  assert.equal(await cellText(page, 5, 'label'), '2');
  // Sample 4's tokens: 5 ids from 4 (with a tokenizer given, every ragged integer field
  // also shows as text, above its ids).
  assert.equal(await page.textContent('#samples tr[data-index="4"] td[data-field="tokens"] .ids'), '5 ids: 4 5 6 7 8');
  assert.deepEqual(await histogram(page, 'label: values'), [['0', 80], ['1', 80], ['2', 80]]);
  // Sample i holds i % 9 + 1 tokens: 1 to 6 come 27 times in 240 samples, 7 to 9 26 times.
  assert.deepEqual(await histogram(page, 'tokens: lengths (elements)'),
    [1, 2, 3, 4, 5, 6, 7, 8, 9].map((n) => [String(n), n <= 6 ? 27 : 26]));
  // A uint8 (H, W, 3) field drawn as a picture.
  const canvas = page.locator('#samples tr[data-index="0"] td[data-field="pixels"] canvas');
  assert.deepEqual(await canvas.evaluate((el) => [el.width, el.height]), [24, 16]);
  assert.ok(shareNear(await canvas.screenshot(), COLOURS[1]) > 0.9);
  // Thumbnails: decoded by the browser and drawn in the colour of the sample's label.
  for (const index of [0, 1, 2]) {
    const img = page.locator(`#samples tr[data-index="${index}"] td[data-field="image"] img`);
    assert.equal(await img.evaluate((el) => el.naturalWidth), 32);
    const share = shareNear(await img.screenshot(), COLOURS[index % 3]);
    assert.ok(share > 0.9, `sample ${index}'s thumbnail: ${share} of its pixels in its colour`);
    // A bytes field whose values are JPEGs is drawn the same way, not as hex.
    const photo = page.locator(`#samples tr[data-index="${index}"] td[data-field="photo"] img`);
    assert.equal(await photo.evaluate((el) => el.naturalWidth), 24);
    assert.ok(shareNear(await photo.screenshot(), COLOURS[index % 3]) > 0.9, `sample ${index}'s photo`);
  }
  // Paging on, and a random page drawn from a seed.
  await page.click('#next');
  await settled(page);
  assert.equal(await cellText(page, 20, 'caption'), caption(20));
  await page.fill('#seed', '3');
  await page.click('#random');
  await settled(page);
  assert.match(await page.textContent('#showing'), /random page \(seed 3\)/);
  const index = Number(await page.getAttribute('#samples tr[data-index]', 'data-index'));
  assert.equal(await cellText(page, index, 'caption'), caption(index));
  // verify, with its progress bar.
  await page.click('#verify');
  await settled(page);
  assert.match(await page.textContent('#verify-result'), /verified: 1,680 records, all good/);
  assert.equal(await page.getAttribute('#verify-progress', 'value'), '240');
  await page.close();
});

test('a page 10^5 samples into a 10^6-sample dataset fetches under 1% of it', async () => {
  const page = await open(await serve(data.big));
  assert.match(await page.textContent('#summary'), /^1,000,000 samples, 3 fields/);
  await page.fill('#goto', '100000');
  await page.click('#go');
  await settled(page);
  assert.equal(await cellText(page, 100000, 'caption'), caption(100000));
  assert.equal(await cellText(page, 100019, 'label'), String(100019 % 7));
  // Sample i holds i % 7 + 1 ids, counting on (mod 50,000) from where sample i - 1 stopped.
  let first = 0;
  for (let j = 0; j < 100000; j += 1) first += (j % 7) + 1;
  const ids = Array.from({ length: (100000 % 7) + 1 }, (_, k) => (first + k) % 50000);
  assert.equal(await cellText(page, 100000, 'tokens'), `${ids.length}: ${ids.join(' ')}`);
  const fetched = Number(await page.evaluate(() => document.body.dataset.fetchedBytes));
  assert.ok(fetched < data.big_bytes / 100, `fetched ${fetched} bytes of a ${data.big_bytes}-byte dataset`);
  console.log(`a page at 10^5 of 10^6 samples: ${fetched} bytes fetched of ${data.big_bytes} (${(100 * fetched / data.big_bytes).toFixed(3)}%)`);
  await page.close();
});

test('the dataset pushed to the S3-compatible server reads by URL, a range at a time', async () => {
  const page = await open(await serve(data.url));
  assert.match(await page.textContent('#title'), /\/view\/data\/small\/$/);
  assert.equal(await cellText(page, 11, 'caption'), caption(11));
  assert.deepEqual(await histogram(page, 'label: values'), [['0', 80], ['1', 80], ['2', 80]]);
  const img = page.locator('#samples tr[data-index="1"] td[data-field="image"] img');
  assert.ok(shareNear(await img.screenshot(), COLOURS[1]) > 0.9);
  await page.close();
});

test('a damaged record is named by its field and record, on the page and by verify', async () => {
  // The caption chunk is dense: its last byte is the last sample's record.
  const chunk = join(data.small, 'shard-000000/caption/0.zr');
  flipByte(chunk);
  const page = await open(await serve(data.small));
  await page.fill('#goto', '239');
  await page.click('#go');
  await settled(page);
  const shown = await page.textContent('#samples td.error');
  assert.match(shown, /field "caption"/);
  assert.match(shown, /record 239/);
  assert.match(shown, /shard-000000\/caption/);
  await page.click('#verify');
  await settled(page);
  assert.match(await page.textContent('#verify-result'), /^1 bad of 1,680 records: caption sample 239: /);
  await page.close();
});
