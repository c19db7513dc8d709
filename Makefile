# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Tests and notebooks run at smoke size (same code paths, smaller); the demo at full size.
# Either can be overridden: PODRACER_SIZE=full make test.

.PHONY: demo test lab bench install clean

# The install re-runs only when the dependency files change (the stamp is newer otherwise).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[all,dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PODRACER_SIZE=$(or $(PODRACER_SIZE),full) $(BIN)/python -m finance.demo

test: $(STAMP)
	PODRACER_SIZE=$(or $(PODRACER_SIZE),smoke) $(BIN)/python -m pytest tests notebooks --nbmake --nbmake-timeout=900 -p no:cacheprovider

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# FinRL's env file for benchmarks/stock_env.py: the package without its heavy dependencies,
# in a folder of its own (never imported as a package, loaded by path).
FINRL_DIR := $(VENV)/finrl-src
$(FINRL_DIR): | $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps --target $(FINRL_DIR) finrl==0.3.7

bench: $(STAMP) $(FINRL_DIR)
	for f in benchmarks/*.py; do echo "== $$f"; \
	  FINRL_ENV_FILE=$(FINRL_DIR)/finrl/meta/env_stock_trading/env_stocktrading.py OMP_WAIT_POLICY=PASSIVE \
	  $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs *.egg-info
