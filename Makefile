# OpenInfer-JAX: two commands on a fresh machine: `make demo` and `make test`.
# `make setup` (a prerequisite of both) is idempotent and fast when already done.

PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.setup-stamp

.PHONY: setup demo test bench lint typecheck fuzz clean references docs peers onnx-conformance

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

demo: setup
	$(PY) examples/demo.py

# CI (.ci/run) calls this: lint and type checks first (seconds), then the suite.
test: setup lint typecheck
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=20

bench: setup
	$(PY) bench/run_all.py $(BENCH_ARGS)

# build/peervenv: llama.cpp (llama-cpp-python), onnxruntime, torch for bench/bench_edge.py
# (several minutes the first time: llama.cpp is compiled for this machine). bench_edge runs
# it itself when the venv is missing.
peers:
	bash scripts/setup_peers.sh

lint: setup
	.venv/bin/ruff check openinfer_jax tests bench examples scripts
	.venv/bin/ruff format --check openinfer_jax

# mypy --strict on the packages listed in pyproject.toml [tool.mypy] files (0 errors).
typecheck: setup
	.venv/bin/mypy

# Coverage-guided fuzzers (atheris: Python reader, DSL/JSON frontends; libFuzzer+ASan+UBSan:
# the emitted C loader and the generated driver's input reader) for FUZZ_SECONDS each, the
# Python-vs-C reader differential check, and
# the hypothesis mutation fuzz with many examples. CI runs a seconds-long smoke of the same.
FUZZ_SECONDS ?= 60
fuzz: setup
	$(PY) fuzz/run.py --seconds $(FUZZ_SECONDS)
	FUZZ_EXAMPLES=20000 $(PY) -m pytest -q tests/oinf/test_fuzz.py

clean:
	rm -rf .venv build .pytest_cache

# Regenerates tests/fixtures/references/ (MiniLM embeddings, SmolLM2 greedy tokens/logits)
# with torch + transformers in a separate venv (build/refvenv, ~5 minutes the first time).
references: setup
	$(PY) scripts/make_references.py

# Runs ONNX's node tests on every backend (about half an hour on 2 cores, one process per
# core) and regenerates the results (tests/onnx/conformance.json) and the table in docs/onnx.md.
onnx-conformance: setup
	$(PY) -m tests.onnx.conformance --jobs $$(nproc) --write docs/onnx.md

# Regenerates docs/ops.md from the op registry (a test checks it is current).
docs: setup
	$(PY) -m openinfer_jax.ops.docgen > docs/ops.md
