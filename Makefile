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

# Two tiers at once, each test in exactly one (a marker expression and its negation): the
# real agents, the browser and the notebooks (mostly waiting on other programs) beside the
# rest; one after the other they took 41.5 min on 2 cores (2026-12-02). The first tier's
# output is printed when both have ended; the target fails if either did. Ctrl-C ends both
# (the first tier by its SIGINT, which tests/conftest.py makes Python answer again).
SLOW_TIER := real_agents or browser or notebooks
pytest: $(STAMP) system-deps
	@log=$$(mktemp "$${TMPDIR:-/tmp}/madohub-pytest-tier.XXXXXX"); \
	echo "== tier 1 ($(SLOW_TIER)) runs beside tier 2, its output follows tier 2's"; \
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "$(SLOW_TIER)" > "$$log" 2>&1 & tier1=$$!; \
	trap 'kill -INT $$tier1 2>/dev/null; wait $$tier1; cat "$$log"; rm -f "$$log"; exit 130' INT TERM; \
	echo "== tier 2 (the rest)"; \
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not ($(SLOW_TIER))"; rest=$$?; \
	wait $$tier1; slow=$$?; \
	echo "== tier 1 ($(SLOW_TIER))"; cat "$$log"; rm -f "$$log"; \
	echo "== tier 1 exit $$slow, tier 2 exit $$rest"; \
	test $$slow = 0 && test $$rest = 0

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
