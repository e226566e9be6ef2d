# nngauge set-up. `make demo` and `make test` are the README's two commands.
# A fresh virtual environment is made in $(VENV) unless one is active (VIRTUAL_ENV), which is
# then used as it is. torch==2.13.0 is installed only when torch is absent: a torch the user
# already has is never replaced.
PYTHON ?= python3
VENV ?= $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV),.venv)
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
# test processes: one per core, at most 4 (each holds torch and the suite's fixtures in memory)
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: demo test torch install install-test browser bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch is installed first, only when absent (a torch the user has is never replaced).
torch: $(PY)
	@$(PY) -c "import torch" 2>/dev/null || { \
	  echo "==> installing torch==$(TORCH_VERSION) (CPU wheel, about 200 MB)"; \
	  $(PY) -m pip install --progress-bar on "torch==$(TORCH_VERSION)"; }

install: torch
	@echo "==> installing nngauge with the report's dependencies"
	$(PY) -m pip install --quiet -e ".[report]"

install-test: torch browser
	@echo "==> installing nngauge with the test dependencies"
	$(PY) -m pip install --quiet -e ".[test]"

# The report's browser test needs a headless Chromium: Debian's package, installed when absent,
# as a step of its own that says what it does (about 130 packages; sudo when not root).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "==> installing Chromium for the report's browser test (Debian's chromium package;"; \
	  echo "    run 'make browser' alone to do only this; the test says how to get it when missing)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y chromium; }

demo: install
	$(VENV)/bin/nngauge report mlp:depth=10,width=100,activation=relu,norm=batch --data waveform --out nngauge-report.html

test: install-test
	@echo "==> running the test suite in $(TEST_WORKERS) processes (about 11 minutes on 2 cores)"
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# every benchmark, one table in benchmarks/RESULTS.md (peers: see benchmarks/README.md)
bench: install-test
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
