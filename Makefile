# nngauge set-up. `make demo` and `make test` are the README's two commands.
# A fresh virtual environment is made in $(VENV) unless one is active (VIRTUAL_ENV), which is
# then used as it is. torch==2.13.0 is installed only when torch is absent: a torch the user
# already has is never replaced.
PYTHON ?= python3
VENV ?= $(if $(VIRTUAL_ENV),$(VIRTUAL_ENV),.venv)
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0

.PHONY: demo test install install-test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet -e ".[report]"

install-test: $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet -e ".[test]"

demo: install
	$(VENV)/bin/nngauge theory relu --arch layernorm --plot nngauge-theory-relu.png

test: install-test
	$(PY) -m pytest -q

bench: install-test
	$(PY) benchmarks/bench_kernels.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
