# The README's commands. `make run` and `make test` each install everything into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench
export MUJOCO_GL ?= egl

.PHONY: install run test test-slow bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: the CPU wheel; an unpinned resolve would pull CUDA packages
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@

$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $@

run: $(STAMP)
	$(BIN)/python train.py --env humanoid --agent npmp-clips --steps 60000 --video-every 20000 --eval-episodes 20

test: $(STAMP)
	# two worker processes: the suite is mostly single-threaded tests, and this machine has 2 cores
	$(BIN)/python -m pytest -q -n 2 --dist worksteal

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m slow

bench: $(BENCH_STAMP)
	$(BIN)/python benchmarks/dmc100k.py

clean:
	rm -rf $(VENV) .pytest_cache
