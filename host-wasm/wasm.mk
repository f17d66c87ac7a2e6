# host-wasm/wasm.mk: the WebAssembly part of the build, included by the root Makefile.
#
#   make wasm-setup   toolchain target, npm packages, Python packages (into $(VENV)), and
#                     Debian's chromium for the JS browser test
#   make wasm-build   zr.wasm (size-tuned), zr-wasm (release, with zr.wasm embedded),
#                     and the JavaScript bindings transpiled from zr.wasm
#   make view         the dataset viewer's page (`zr view`) into target/view
#   make wasm-test    the runner's Rust tests, the Python tests (CLI, sandbox, native ==
#                     wasm, loaderx interop, wasmtime-py embedding) and the Node suite
#
# The guest is built with -p for wasm32-wasip2 only; nothing here passes --target to the
# whole workspace. The runner is built once, in release, and reused by every test.

VENV ?= .venv
CARGO ?= cargo
NPM ?= npm
NODE ?= node

WASM_TARGET := wasm32-wasip2
ZR_WASM := target/wasm/zr.wasm
ZR_WASM_BUILT := target/$(WASM_TARGET)/wasm-release/zr-guest.wasm
ZR_WASM_RUNNER := target/release/zr-wasm

JS_DIR := bindings/js
HAVE_JS := $(wildcard $(JS_DIR)/package.json)

.PHONY: wasm-setup wasm-build wasm-test wasm-guest wasm-runner wasm-js wasm-size js-chromium view

# Idempotent and cheap when done: each step is skipped once its stamp or target exists.
wasm-setup: $(VENV)/.wasm-stamp $(if $(HAVE_JS),$(JS_DIR)/node_modules/.package-lock.json js-chromium)
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

$(VENV)/.wasm-stamp: host-wasm/python/requirements.txt
	@test -x $(VENV)/bin/pip || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -r host-wasm/python/requirements.txt
	touch $@

# Without scripts: the package's own `prepare` would build zr.wasm before the toolchain is
# set up (wasm-js builds it), and esbuild's only checks the binary npm already installed.
$(JS_DIR)/node_modules/.package-lock.json: $(JS_DIR)/package.json $(wildcard $(JS_DIR)/package-lock.json)
	cd $(JS_DIR) && $(NPM) ci --ignore-scripts --no-audit --no-fund

# The JS browser test runs its example in headless Chromium: $(CHROMIUM) if set, else
# Debian's chromium package, installed here when missing.
CHROMIUM ?=
js-chromium:
	@if [ -n "$(CHROMIUM)" ] || command -v chromium >/dev/null; then exit 0; fi; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq --no-install-recommends chromium

# cargo decides whether anything changed; the copy only happens when the bytes differ, so
# the runner's build script (which embeds target/wasm/zr.wasm) does not relink needlessly.
wasm-guest: wasm-setup
	$(CARGO) build -p zr-wasm-guest --target $(WASM_TARGET) --config host-wasm/guest/profile.toml --profile wasm-release
	@mkdir -p target/wasm
	@cmp -s $(ZR_WASM_BUILT) $(ZR_WASM) || cp $(ZR_WASM_BUILT) $(ZR_WASM)
	@echo "zr.wasm: $$(wc -c < $(ZR_WASM)) bytes"

wasm-runner: wasm-guest
	$(CARGO) build --release -p zr-wasm

wasm-js: wasm-guest
	$(if $(HAVE_JS),cd $(JS_DIR) && $(NPM) run --silent build,@echo "no $(JS_DIR) yet")

wasm-build: wasm-guest wasm-runner wasm-js

# `zr view`'s page (bindings/js/viewer, bundled, with zr.wasm's core modules) into
# target/view, where `zr view` finds it.
view: wasm-js
	cd $(JS_DIR) && $(NPM) run --silent build:viewer

# The native `zr` (root Makefile's `build`, $(ZR)) is needed for the native == wasm test;
# when this fragment is used on its own without it, that test is skipped, not faked.
wasm-test: wasm-build $(if $(ZR),build)
	# Lints for the guest on its own target and for the runner (release: reuses its build).
	$(CARGO) clippy -p zr-wasm-guest --target $(WASM_TARGET) --all-targets -- -D warnings
	$(CARGO) clippy --release -p zr-wasm --all-targets -- -D warnings
	$(CARGO) test --release -p zr-wasm
	ZR_WASM=$(abspath $(ZR_WASM_RUNNER)) ZR_WASM_COMPONENT=$(abspath $(ZR_WASM)) $(if $(ZR),ZR_NATIVE=$(ZR)) \
		$(VENV)/bin/python -m pytest -q -rs host-wasm/python/tests
	$(if $(HAVE_JS),cd $(JS_DIR) && ZR_WASM=$(abspath $(ZR_WASM_RUNNER)) ZR_WASM_COMPONENT=$(abspath $(ZR_WASM)) \
		$(if $(CHROMIUM),CHROMIUM=$(CHROMIUM)) $(NODE) --test test/*.test.js)

wasm-size: wasm-guest
	@wc -c $(ZR_WASM)
