# The two set-up commands of README.md: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: demo test lint types pytest bench lab system-deps clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

# tmux (and, for the browser test, Debian's chromium) when missing.
system-deps:
	@command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux; }
	@bash tests/browser/install.sh

demo: $(STAMP)
	@command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux; }
	$(PY) -m madohub_nb.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check madohub_nb tests benchmarks
	$(VENV)/bin/ruff format --check madohub_nb tests benchmarks

types: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) system-deps
	$(VENV)/bin/pytest -q -p no:cacheprovider

test: $(STAMP) system-deps lint types pytest

bench: $(STAMP)
	@for f in benchmarks/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

lab: $(STAMP)
	$(PIP) install -q -e '.[lab]'
	$(VENV)/bin/jupyter lab notebooks/quickstart.ipynb

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
