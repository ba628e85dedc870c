# tierproxy: every target bootstraps .venv from pyproject.toml first, and the
# targets that run servers fetch Apache Kafka's pinned jars from Maven Central
# (proxy/embedded/maven/pom.xml) once, so a fresh clone needs nothing but
# python3 (>= 3.11), make, a JDK 17 and Maven (installed with apt when root).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: help demo test lint fmt bench fuzz compose-check compose-test apt-tools kafka-jars emulators clean

help:
	@echo "make demo    set up .venv and run the end-to-end demo on embedded servers"
	@echo "make test    set up .venv and run lint plus the whole test suite"
	@echo "make compose-test  build the docker-compose stack with Podman and run it for real"
	@echo "make lint    ruff + mypy + import-linter contracts"
	@echo "make bench   run the benchmarks and write bench/results/REPORT.md"
	@echo "make fuzz    fuzz the frame decoder, headers and shape check (FUZZ_SECONDS each, 60)"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "tierproxy needs Python >= 3.11")'
	@echo "==> creating $(VENV) and installing tierproxy with its test tools (pip; a few minutes on a fresh machine)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --progress-bar off -e '.[dev]' 2>&1 \
	  | { grep -E '^(Collecting|Successfully installed|ERROR)' || true; }; exit $${PIPESTATUS[0]}
	@touch $@

# Command-line tools the tests use (kcat as a real client, docker-compose to
# validate the compose file, a JDK for Kafka, Spark and the Java test clients,
# Maven for Kafka's jars, Prometheus and promtool for the monitoring files; for the
# compose test: Podman as the container engine, debootstrap for its base image).
# Installed with apt when we are root and they are missing; otherwise reported
# (CI fails the tests that need them).
APT_TOOLS := kcat:kcat docker-compose:docker-compose javac:openjdk-17-jdk-headless mvn:maven \
  promtool:prometheus podman:podman debootstrap:debootstrap
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

# Apache Kafka's jars (the pinned 4.x and 3.9.x) into .kafka/<version>/libs, once.
kafka-jars: $(STAMP) apt-tools
	@echo "==> Apache Kafka's jars from Maven Central (once; then cached in .kafka/)"
	$(BIN)/python -m proxy.embedded

# The object-store emulators of the GCS and Azure tests (proxy/embedded/emulators.py pins
# them): Azurite from npm (Node.js 20+), fake-gcs-server built with go from the Go module
# proxy; once, into ~/.cache/tierproxy/emulators (or $$TIERPROXY_EMULATORS).
emulators: $(STAMP)
	@echo "==> object-store emulators (once; then cached in ~/.cache/tierproxy/emulators)"
	$(BIN)/python -m proxy.embedded emulators

demo: $(STAMP) apt-tools kafka-jars
	$(BIN)/tierproxy demo

# The docker-compose stack run for real (tests/compose, part of `make test` too): Podman
# serves the Docker API, the images build on a local Debian base made with debootstrap
# (cached with Podman's storage in ~/.cache/tierproxy/compose), the integration profile's
# stack check runs inside the stack. Needs root.
compose-test: $(STAMP) apt-tools kafka-jars
	$(BIN)/pytest tests/compose $(PYTEST_ARGS)

compose-check: apt-tools
	@if command -v docker-compose >/dev/null 2>&1; then \
	  docker-compose -f docker-compose.yml config -q && echo "docker-compose.yml: valid"; \
	else echo "note: docker-compose not installed; compose file not validated"; fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: $(STAMP) apt-tools kafka-jars emulators compose-check lint
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP) apt-tools kafka-jars emulators
	$(BIN)/python -m bench.report

# Coverage-guided fuzzing with atheris (the optional `fuzz` extra), FUZZ_SECONDS per target;
# the corpus grows in .fuzz/ across runs. CI runs the same targets under hypothesis instead.
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[fuzz]'
	$(BIN)/python -m tests.fuzz --seconds $(FUZZ_SECONDS)

clean:
	rm -rf $(VENV) .fuzz .kafka .mypy_cache .ruff_cache .pytest_cache .hypothesis
