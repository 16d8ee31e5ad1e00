# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The CPU build lies on this machine's disk; a GPU user passes a CUDA build, e.g.
#   make demo TORCH_SPEC="torch==2.13.0 --index-url <CUDA wheel index from pytorch.org>"
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: the CPU build; an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e ".[all,test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/rolling-calib demo

# The suite on up to 4 cores (pytest-xdist; a test file stays on one worker, so its fixtures are built once);
# the 30 slowest tests are listed at the end (CI must stay well under 30 min).
test: $(STAMP)
	$(PY) -m pytest -q --numprocesses=auto --maxprocesses=4 --dist=loadfile --durations=30

clean:
	rm -rf $(VENV) demo_out site .pytest_cache .hypothesis
