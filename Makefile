# nngauge set-up. `make demo` and `make test` are the README's two commands.
# A fresh virtual environment is made in $(VENV) unless one is active (VIRTUAL_ENV), which is
# then used as it is. torch==2.13.0 is installed only when torch is absent: a torch the user
# already has is never replaced.
PYTHON ?= python3
VENV ?= $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV),.venv)
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: demo test install install-test browser bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet -e ".[report]"

install-test: $(PY) browser
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet -e ".[test]"

# The report's browser test needs a headless Chromium: Debian's package, installed when absent.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

demo: install
	$(VENV)/bin/nngauge report mlp:depth=10,width=100,activation=relu,norm=batch --data waveform --out nngauge-report.html

test: install-test
	$(PY) -m pytest -q

bench: install-test
	$(PY) benchmarks/bench_kernels.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
