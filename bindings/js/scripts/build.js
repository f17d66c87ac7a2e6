// Builds gen/ (the ES module jco transpiles from zr.wasm). It is npm's `prepare` script, so
// `npm install ./bindings/js` from the repository root, `npm pack` and `npm run build` all
// leave a package that imports: gen/ is build output, not in git.
//
// zr.wasm is $ZR_WASM_COMPONENT, else target/wasm/zr.wasm of the source tree; when neither
// exists and this package sits in the source tree, cargo builds it with the command
// host-wasm/wasm.mk's `wasm-guest` runs (the size-tuned profile in host-wasm/guest).

import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(pkg, '../..');
const component = process.env.ZR_WASM_COMPONENT ?? join(repo, 'target/wasm/zr.wasm');

function fail(message) {
  console.error(`@zrecord/wasm build: ${message}`);
  process.exit(1);
}

function buildComponent() {
  if (!existsSync(join(repo, 'host-wasm/guest/Cargo.toml'))) {
    fail(`no zr.wasm at ${component}, and no zrecord source tree at ${repo} to build it from; ` +
      'set ZR_WASM_COMPONENT to a built zr.wasm');
  }
  console.error(`@zrecord/wasm build: no ${component}; building it with cargo (wasm32-wasip2)`);
  try {
    execFileSync('cargo', [
      'build', '-p', 'zr-wasm-guest', '--target', 'wasm32-wasip2',
      '--config', 'host-wasm/guest/profile.toml', '--profile', 'wasm-release',
    ], { cwd: repo, stdio: 'inherit' });
  } catch {
    fail('cargo could not build zr.wasm; it needs Rust and `rustup target add wasm32-wasip2` ' +
      '(`make wasm-build` at the repository root sets both up)');
  }
  // Where cargo put it: target/ unless CARGO_TARGET_DIR or a cargo config says otherwise.
  const meta = JSON.parse(execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: repo, encoding: 'utf8' }));
  mkdirSync(dirname(component), { recursive: true });
  copyFileSync(join(meta.target_directory, 'wasm32-wasip2/wasm-release/zr-guest.wasm'), component);
}

function jcoCli() {
  try {
    // The package's entry point is dist/api.js; its command line sits beside it.
    return join(dirname(fileURLToPath(import.meta.resolve('@bytecodealliance/jco'))), 'jco.js');
  } catch {
    return fail(`jco is not installed where ${pkg} can import it: run \`npm ci\` there first ` +
      '(`make wasm-setup` does), or install with `npm install ./bindings/js` from the repository root');
  }
}

if (!existsSync(component)) buildComponent();
execFileSync(process.execPath, [
  jcoCli(), 'transpile', component, '--out-dir', join(pkg, 'gen'), '--name', 'zr',
  '--no-namespaced-exports', '--quiet',
], { stdio: 'inherit' });
