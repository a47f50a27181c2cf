# One entry point for set-up, the demo and the tests, so README, CI and people agree.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint clean

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

test: install
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV)
