# tierproxy: every target bootstraps .venv from pyproject.toml first, so a
# fresh clone needs nothing but python3 (>= 3.11), make and Java 17 (for Spark).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: help demo test lint fmt bench compose-check apt-tools clean

help:
	@echo "make demo    set up .venv and run the end-to-end demo on embedded servers"
	@echo "make test    set up .venv and run lint plus the whole test suite"
	@echo "make lint    ruff + mypy"
	@echo "make bench   run the benchmarks and write bench/results/REPORT.md"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tierproxy needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# Command-line tools the tests use (kcat as a real client, docker-compose to
# validate the compose file, Java for PySpark). Installed with apt when we are
# root and they are missing; otherwise reported, and the tests that need them skip.
APT_TOOLS := kcat:kcat docker-compose:docker-compose java:openjdk-17-jre-headless
apt-tools:
	@missing=""; for pair in $(APT_TOOLS); do cmd=$${pair%%:*}; pkg=$${pair##*:}; \
	  command -v $$cmd >/dev/null 2>&1 || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing with apt:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	      || echo "warning: apt-get could not install$$missing; tests needing them will skip"; \
	  else echo "note: missing$$missing (not root or no apt); tests needing them will skip"; fi; \
	fi

demo: $(STAMP) apt-tools
	$(BIN)/tierproxy demo

compose-check: apt-tools
	@if command -v docker-compose >/dev/null 2>&1; then \
	  docker-compose -f docker-compose.yml config -q && echo "docker-compose.yml: valid"; \
	else echo "note: docker-compose not installed; compose file not validated"; fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: $(STAMP) apt-tools compose-check lint
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP) apt-tools
	$(BIN)/python -m bench.report

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
