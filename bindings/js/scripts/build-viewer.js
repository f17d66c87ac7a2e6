// Builds `zr view`'s page into a folder of static files (default: the repository's
// target/view, where `zr view` looks): index.html, viewer.js and worker.js bundled by
// esbuild, and the component's core modules (gen/*.wasm) beside the worker that fetches
// them. Needs gen/ (`npm run build`) first. `node scripts/build-viewer.js [OUT]`.

import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { build } from 'esbuild';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(process.argv[2] ?? join(pkg, '../../target/view'));
const gen = join(pkg, 'gen');

if (!existsSync(join(gen, 'zr.js'))) {
  console.error(`build-viewer: no ${gen}/zr.js; run \`npm run build\` (or \`make wasm-build\`) first`);
  process.exit(1);
}
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(pkg, 'viewer/viewer.js'), join(pkg, 'viewer/worker.js')],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: 'es2022',
  // gen/zr.js has a Node-only branch that never runs in a browser.
  external: ['node:*'],
  outdir: out,
  logLevel: 'warning',
});
copyFileSync(join(pkg, 'viewer/index.html'), join(out, 'index.html'));
for (const name of readdirSync(gen)) {
  if (name.endsWith('.wasm')) copyFileSync(join(gen, name), join(out, name));
}
console.error(`build-viewer: ${out}`);
