# zrecord: one entry point for set-up, the demo and the tests.
#   make setup  - rustup targets, a Python venv in .venv, npm packages (idempotent)
#   make test   - set up and run every test (lint, Rust, no-std, Python, interop, wasm, JS)
#   make demo   - set up, build, write a dataset of images, captions, tokens and labels, train
#                 on it with the loader, resume once, inspect it

SHELL := /bin/bash
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
COMPILE_VENV = $(VENV)/bin/python -m compileall -q -j 0 "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
CARGO ?= cargo
NODE ?= node
ZR := $(CURDIR)/target/release/zr
export CARGO_TERM_COLOR ?= never
# Every test that could not run here writes a line to this file (full_disk.rs, the root
# conftest.py); `make test` lists them in its final summary so a skip never looks passed.
export ZRECORD_SKIP_LOG := $(CURDIR)/target/skipped-tests.txt

.PHONY: help check lint bench-codecs setup setup-rust setup-python setup-tools build python test test-py test-start test-rust test-nostd test-python demo bench bench-smoke bench-doc clean

# The targets, one line each.
help:
	@echo "make setup   rustup targets, the Python venv in .venv, npm packages (make test does it too)"
	@echo "make check   quick loop (about a minute warm): fmt, clippy, the core's tests, the no_std build"
	@echo "make lint    ruff over every Python file, node --check over the JavaScript (a few seconds)"
	@echo "make test-py the Python tests without torch and JAX (installs neither)"
	@echo "make test    every test, with set-up (Rust, no_std, Python + loaderx/torch/JAX, wasm, JS)"
	@echo "make demo    set up, build, then the main job: write images, captions, tokens, labels; train; resume"
	@echo "             (VIEW=1: then serve the dataset viewer on it, its URL printed, until Ctrl-C)"
	@echo "make view    the dataset viewer's page for zr view (target/view)"
	@echo "make bench   benchmarks against peers, in bench/.venv (about 20 minutes)"
	@echo "make bench-doc   docs/benchmarks.md from the newest full run in bench/results/ (a second)"
	@echo "make wasm-build / wasm-test   zr.wasm, zr-wasm and the JS bindings / their tests"

# The quick loop while editing: no Python, no wasm, no stress runs.
check: setup-rust setup-tools
	$(CARGO) fmt --all --check
	$(CARGO) clippy -q --all-targets -p zrecord-core -p zrecord-app -p zrecord -p zrecord-cli -- -D warnings
	$(CARGO) test -q -p zrecord-core -p zrecord-app
	$(CARGO) build -q -p zrecord-core --no-default-features --target wasm32-unknown-unknown
	$(CARGO) build -q -p zrecord-app --no-default-features --features cli --target wasm32-unknown-unknown

setup: setup-rust setup-python setup-tools $(if $(wildcard host-wasm/wasm.mk),wasm-setup,)

# Command-line tools the tests run as a user would: rsync (a dataset copied with rsync -a
# must write only its bytes); and what the native host's JPEG decoder, libjpeg-turbo, is
# built with from its vendored source: cmake and NASM. From Debian's packages when missing.
setup-tools:
	@if command -v rsync >/dev/null && command -v cmake >/dev/null && command -v nasm >/dev/null; then exit 0; fi; \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq --no-install-recommends rsync cmake nasm

setup-rust:
	rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

# Two steps: what every Python test needs, then torch and JAX (only `make test-py` stops
# after the first).
$(VENV)/.stamp-core: tests/requirements.txt
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# --no-compile, then compileall on every core: pip byte-compiles module by module in one
	# process (torch, jax and ray hold tens of thousands); left to import time, every process
	# of a multi-process test compiled them again. Some vendored files do not compile
	# (pip skips them too): compileall's status is not a failure.
	$(PIP) install -q --no-compile -r tests/requirements.txt
	$(COMPILE_VENV)
	touch $@

$(VENV)/.stamp: $(VENV)/.stamp-core tests/requirements-ml.txt
	# torch and JAX for the multi-process tests (about 5 GB: PyPI's Linux torch brings CUDA wheels).
	$(PIP) install -q --no-compile -r tests/requirements-ml.txt
	$(COMPILE_VENV)
	touch $@

setup-python: $(VENV)/.stamp

build:
	$(CARGO) build --release -p zrecord-cli --bin zr

# The Python extension, built from source by maturin through pip. The wheel carries the
# viewer's page for `zr view` when `make view` has built it (`make test` builds it first):
# copied into the package, where the wheel's `zr` finds it (a pip user has no source tree).
VIEWER_IN_PACKAGE := bindings/python/python/zrecord/_viewer
python: $(VENV)/.stamp-core
	@rm -rf $(VIEWER_IN_PACKAGE)
	@if [ -f target/view/index.html ]; then cp -r target/view $(VIEWER_IN_PACKAGE); fi
	@if [ -f bindings/python/pyproject.toml ]; then \
	  $(PIP) install -q ./bindings/python; \
	fi

test-rust: test-start
	$(CARGO) fmt --all --check
	$(CARGO) test
	# The core alone, without the native host's features: the pure-Rust inflater path; then
	# with the wasm guest's inflater (zlib-rs), checked against it.
	$(CARGO) test -p zrecord-core --lib
	$(CARGO) test -p zrecord-core --lib --features zlib-rs
	$(CARGO) clippy --all-targets -p zrecord-core -p zrecord-app -p zrecord -p zrecord-cli -p zrecord-python -- -D warnings
	# The native lock, concurrency and CLI tests, 20 runs, two suites at a time.
	tests/reliability/stress-locks.sh 20

# The linters for the languages pytest and cargo do not check: ruff (rules and their reasons
# in ruff.toml) over every Python file of the tree, and node's syntax check over the
# JavaScript bindings (index.d.ts is checked by tsc in their tests).
JS_FILES := $(wildcard bindings/js/src/*.js bindings/js/scripts/*.js bindings/js/test/*.js bindings/js/test/*/*.js \
	bindings/js/examples/*/*.js bindings/js/viewer/*.js)
lint: setup-python
	$(PY) -m ruff check --no-cache conftest.py bench bindings/python bindings/js/test host-wasm/python tests
	@for f in $(JS_FILES); do $(NODE) --check $$f || exit 1; done
	@echo "lint: clean"

# Forgets the skips of an earlier run.
test-start:
	@mkdir -p target && rm -f $(ZRECORD_SKIP_LOG)

# The core and the app crate (its command line included) must build without std on a
# target that has none.
test-nostd: setup-rust
	$(CARGO) build -p zrecord-core --no-default-features --target wasm32-unknown-unknown
	$(CARGO) build -p zrecord-app --no-default-features --features cli --target wasm32-unknown-unknown

# Every Python test. Interop with the real loaderx wheel must run: a missing loaderx is an
# error, not a skip.
PYTEST_ALL = ZRECORD_REQUIRE_INTEROP=1 ZR=$(ZR) $(PY) -m pytest -q -rs tests/python $(wildcard bindings/python/tests)

test-python: setup-python build python
	$(PYTEST_ALL)

# The Python tests without torch and JAX (neither installed nor run: their modules say so in
# the skip summary); interop with loaderx still required. The quick loop for Python work.
test-py: test-start $(VENV)/.stamp-core build python
	ZRECORD_NO_ML=1 $(PYTEST_ALL)

-include host-wasm/wasm.mk

test: test-start setup lint $(if $(wildcard host-wasm/wasm.mk),view,) test-rust test-nostd test-python bench-smoke $(if $(wildcard host-wasm/wasm.mk),wasm-test,)
	@if [ -s $(ZRECORD_SKIP_LOG) ]; then \
	  echo "NOT RUN here ($$(wc -l < $(ZRECORD_SKIP_LOG)) tests; each says why):"; sed 's/^/  /' $(ZRECORD_SKIP_LOG); \
	else echo "every test ran: nothing was skipped"; fi
	@echo "all test suites passed"

# Benchmarks against peers, in their own venv (h5py, lmdb, array-record, torch when it
# installs). Not part of `make test`; `bench-smoke` runs a tiny version there so the script
# cannot rot.
BENCH_VENV := $(CURDIR)/bench/.venv

$(BENCH_VENV)/.stamp: bench/requirements.txt bench/requirements-torch.txt bench/requirements-streaming.txt bench/requirements-ffcv.txt
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements.txt
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements-torch.txt || echo "torch did not install: the loader table will skip it"
	$(BENCH_VENV)/bin/pip install -q -r bench/requirements-streaming.txt || echo "MosaicML Streaming did not install: the remote tables will say so"
	# FFCV (the vision table's peer) builds against Debian's libjpeg-turbo and OpenCV.
	sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  ($$sudo apt-get update -qq && $$sudo apt-get install -y -qq --no-install-recommends libturbojpeg0-dev libopencv-dev pkg-config \
	   && $(BENCH_VENV)/bin/pip install -q -r bench/requirements-ffcv.txt \
	   && $(BENCH_VENV)/bin/pip install -q --no-deps ffcv) || echo "FFCV did not install: the vision table will say so"
	touch $@

bench: $(BENCH_VENV)/.stamp
	$(BENCH_VENV)/bin/pip install -q ./bindings/python
	$(BENCH_VENV)/bin/python -W ignore bench/bench.py all

bench-smoke: python
	$(PY) bench/bench.py sampler --quick
	$(PY) bench/bench.py headline --quick
	$(PY) bench/bench.py store --quick --only zrecord,loaderx,npy --sets structured
	$(PY) bench/bench.py policy --quick --sets structured
	$(PY) bench/bench.py checksums --quick
	$(PY) bench/bench.py living --quick
	$(PY) bench/bench.py appends --quick
	$(PY) bench/bench.py fields --quick
	$(PY) bench/bench.py stream --quick
	$(PY) bench/bench.py packing --quick

# docs/benchmarks.md from the newest run of `bench.py all` kept in bench/results/ (and any
# newer partial runs); standard library only, so no venv.
bench-doc:
	python3 bench/report.py

# DEFLATE against zstd and LZ4, one core, on the data sets a bench run cached (docs/decisions/zstd.md).
bench-codecs: $(BENCH_VENV)/.stamp
	$(BENCH_VENV)/bin/python -W ignore bench/bench.py policy --quick > /dev/null
	cargo run --release --manifest-path bench/codecs/Cargo.toml -- bench/.data/*.npy

# VIEW=1: then serve the dataset viewer on it (its URL printed) until Ctrl-C.
demo: setup build python $(if $(VIEW),view,)
	$(PY) tests/demo.py --zr $(ZR) $(if $(VIEW),--view,)

clean:
	$(CARGO) clean
	rm -rf $(VENV)

# Long reliability runs (docs/reliability.md); the fast versions are part of `make test`.
.PHONY: reliability-long fuzz-long tsan
reliability-long:
	tests/reliability/long.sh

fuzz-long:
	tests/reliability/fuzz-long.sh

tsan:
	tests/reliability/tsan.sh
