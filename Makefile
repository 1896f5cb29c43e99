# The two commands a user needs are `make demo` and `make test`; everything else is a step of those.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.deps-stamp
WHEEL_STAMP := dist/.installed-stamp
RUST_SOURCES := $(shell find rust -name '*.rs') Cargo.toml Cargo.lock
PY_SOURCES := $(shell find python -type f -not -path '*/__pycache__/*') pyproject.toml

.PHONY: test demo wheel install bench fuzz stateful lint fmt cargo-test pytest wheel-smoke clean

# The virtual environment with what the tests, the benchmarks and the linters need.
$(STAMP): pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet "maturin>=1.7,<2" numpy
	$(VPY) -c 'import tomllib; p=tomllib.load(open("pyproject.toml","rb"))["project"]; d=p["optional-dependencies"]; print("\n".join(sorted(set(p["dependencies"]+d["postgres"]+d["mcp"]+d["repomap"]+d["examples"]+d["test"]+d["bench"]+d["dev"]))))' > $(VENV)/requirements.txt
	$(VPY) -m pip install --quiet -r $(VENV)/requirements.txt
	touch $@

# Release, abi3: one wheel for every CPython >= 3.9, linked through zig against glibc 2.17
# (manylinux2014), so it installs on every current Linux: Debian 11, Ubuntu 20.04, RHEL 8,
# Amazon Linux 2 and AWS Lambda among them. maturin finds zig through `python -m ziglang`.
# The sdist beside it builds anywhere Rust does.
wheel: $(STAMP)
	rm -f dist/memstrata-*.whl dist/memstrata-*.tar.gz
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/maturin build --release --quiet --zig \
		--compatibility manylinux2014 --out dist
	$(VENV)/bin/maturin sdist --out dist

$(WHEEL_STAMP): $(STAMP) $(RUST_SOURCES) $(PY_SOURCES)
	$(MAKE) wheel
	$(VPY) -m pip install --quiet --force-reinstall --no-deps dist/memstrata-*.whl
	touch $@

install: $(WHEEL_STAMP)

# The property tests draw their cases from a fixed seed, so `make test` (and CI) gives the same
# answer every run; cases that failed once are replayed from rust/tests/*.proptest-regressions.
# To explore new cases: make cargo-test PROPTEST_RNG_SEED=$$RANDOM
PROPTEST_RNG_SEED ?= 20261124
cargo-test:
	PROPTEST_RNG_SEED=$(PROPTEST_RNG_SEED) cargo test --quiet

# Runs against the installed wheel: the source package lives in python/, which is never on
# sys.path, and tests/test_package.py checks that the imported module is the installed one.
pytest: install
	$(VPY) -m pytest -q --benchmark-disable tests

lint: $(STAMP)
	cargo fmt --check
	cargo clippy --quiet --all-targets --features python -- -D warnings
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/mypy

fmt: $(STAMP)
	cargo fmt
	$(VENV)/bin/ruff format --quiet .
	$(VENV)/bin/ruff check --quiet --fix .

# The wheel as a user gets it: a brand-new virtual environment, `pip install` of the file alone.
wheel-smoke: install
	rm -rf target/wheel-smoke
	$(PYTHON) -m venv target/wheel-smoke
	ls dist/memstrata-*-abi3-manylinux2014_*.whl dist/memstrata-*.tar.gz  # glibc 2.17 tag; sdist
	target/wheel-smoke/bin/python -m pip install --quiet dist/memstrata-*.whl
	cd target && wheel-smoke/bin/python -c 'import memstrata; assert "site-packages" in memstrata.__file__; print("wheel imports:", memstrata.__version__, memstrata.deep_merge({"a": {"b": 1}}, {"a": {"c": 2}}))'

test: install cargo-test pytest wheel-smoke lint

demo: install
	$(VENV)/bin/memstrata demo

# Appends to target/bench-results.jsonl, then draws docs/bench.png from it (the README's chart;
# `tools/bench_table.py` prints its table).
bench: install
	rm -f target/bench-results.jsonl  # the table and the chart come from this run alone
	$(VPY) -m pytest -q -s --benchmark-only --benchmark-columns=min,median,mean,ops benches
	$(VPY) tools/bench_chart.py target/bench-results.jsonl docs/bench.png

# Every tool through call_tool with generated garbage, 100k calls (a 150-call sample runs in
# make test).
fuzz: install
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-100000} $(VPY) -m pytest -q --benchmark-disable \
		tests/test_fuzz_tools.py -k any_call

# The model-based tests of the memory (tests/test_stateful_*.py) with far more and longer
# sequences than make test runs, each time new ones; a failure prints how to replay it.
stateful: install
	STATEFUL_EXAMPLES=$${STATEFUL_EXAMPLES:-2000} $(VPY) -m pytest -q --benchmark-disable \
		tests/test_stateful_working_memory.py tests/test_stateful_shared_mind.py

clean:
	rm -rf target dist $(VENV)
