# The two set-up commands of README.md: `make demo` and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: demo test lint types pytest bench docs docs-shots lab system-deps clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test,docs]'
	touch $(STAMP)

# tmux, OpenSSH's server (the remote-host tests start a private one on 127.0.0.1), Node.js
# with npm (the real-agent tier installs the agent CLIs with it) and, for the browser test,
# Debian's chromium, when missing.
system-deps:
	@command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux; }
	@{ test -x /usr/sbin/sshd && command -v ssh-keygen; } >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server; }
	@{ command -v node && command -v npm; } >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq nodejs npm; }
	@bash tests/browser/install.sh

demo: $(STAMP)
	@command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux; }
	$(PY) -m madohub_nb.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check madohub_nb tests benchmarks docs/hooks
	$(VENV)/bin/ruff format --check madohub_nb tests benchmarks docs/hooks

types: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) system-deps
	$(VENV)/bin/pytest -q -p no:cacheprovider

test: $(STAMP) system-deps lint types docs pytest

# Every benchmark runs; the target fails if one missed a target (exit 1) or could not measure (2).
bench: $(STAMP)
	@failed=""; for f in benchmarks/bench_*.py; do echo "== $$f"; \
		$(PY) $$f || failed="$$failed $$f"; done; \
	if [ -n "$$failed" ]; then echo "make bench: missed or could not measure:$$failed"; exit 1; fi

# The documentation site (mkdocs.yml), built into the git-ignored site/. --strict makes every
# warning an error: a broken link, or a public object of the API reference without a docstring
# (docs/hooks/api_docstrings.py warns for each). No --quiet: it hides the warnings strict counts.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# Refresh the pictures under docs/ (the browser test writes the dashboard's there only when asked).
docs-shots: $(STAMP) system-deps
	MADOHUB_DASHBOARD_PNG=$(CURDIR)/docs/dashboard.png MADOHUB_DOCS_SHOTS=$(CURDIR)/docs $(VENV)/bin/pytest -q -p no:cacheprovider tests/test_browser.py

# JupyterLab refuses to start as root (containers, CI) unless told: say so only for root.
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(PIP) install -q -e '.[lab]'
	$(VENV)/bin/jupyter lab $(LAB_ROOT) notebooks/quickstart.ipynb

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache site
