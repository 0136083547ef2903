# Two entry points for a fresh machine: `make demo` and `make test`. Both create .venv and install
# the project with the exact versions in constraints.txt, and every extra: the suite tests the job
# (spark), the controller (controller, on PostgreSQL: postgres) and the simulators (sim).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit clean clean-kernels

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,spark,controller,postgres,sim]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/repart demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP) clean-kernels
	$(BIN)/pytest -q

test: lint typecheck unit

# numba keys a kernel's on-disk cache by its own file only, not by the files of the jitted functions it
# calls (splitting/hashes.py, spacesaving.py, minload.py, …): the suite starts from fresh caches.
clean-kernels:
	find src -name '*.nbi' -delete -o -name '*.nbc' -delete

clean: clean-kernels
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
