# One entry point for set-up, the demo and the tests, so README, CI and people agree.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= out/demo

.PHONY: install demo test lint clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -e ".[dev]"
	touch $@

# Until the scenario runner exists: generate a small family, export it for both servers,
# check parity, then serve it on the real local Triton and answer one inference per model.
demo: install
	$(BIN)/servebench models generate --types dense,conv,attention --depths 2 --widths 32 \
		--out $(DEMO_DIR)/specs --force
	$(BIN)/servebench models list $(DEMO_DIR)/specs
	$(BIN)/servebench models export $(DEMO_DIR)/specs --to both --out $(DEMO_DIR)/export --force
	$(BIN)/servebench models serve $(DEMO_DIR)/export/triton --once

test: install
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) out
