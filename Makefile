# One entry point for set-up, the demo and the tests, so README, CI and people agree.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint clean engine images host-tools

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -e ".[dev]"
	touch $@

# The quickstart: a small family on the real local Triton (dynamic batching off/on, 1 vs 2
# instances) behind the direct, wifi and lte links; prints the table, writes the report.
demo: install
	$(BIN)/servebench scenario run scenarios/quickstart.yaml

# Two workers: the suite is mostly waiting on servers it starts (Triton, containers, Locust),
# so two files at a time use a 2-core machine; each file's tests stay on one worker, in order,
# with their module fixtures. TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= 2

test: install
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile

# Containers (docker/README.md): a Docker Engine API (Docker, else rootful podman provisioned
# by engine.sh), servebench's images built locally (the Triton image takes the venv's
# versions), and the overhead probes' native tools on the host.
engine:
	docker/engine.sh up

images: install engine
	docker/images.sh

host-tools:
	docker/host-tools.sh

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV)
