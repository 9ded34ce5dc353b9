# The two commands: `make up` runs the whole service, `make test` runs the whole suite.
# Both install what is missing first (idempotent; downloads are cached in git-ignored folders).

SHELL := /bin/bash
PYTHON_BOOTSTRAP ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

# Cassandra: one node (1, the default) or a local ring of 2..3 nodes on 127.0.0.1..N (infra/
# services/cassandra.sh). For a ring the service and its tools reach every node and create
# keyspaces with one replica per node, unless TRIGGER_CASSANDRA_HOSTS / _REPLICATION_FACTOR
# are set already.
CASSANDRA_NODES ?= 1
export CASSANDRA_NODES
ifneq ($(CASSANDRA_NODES),1)
TRIGGER_CASSANDRA_HOSTS ?= $(shell seq -s, -f '127.0.0.%g' 1 $(CASSANDRA_NODES))
TRIGGER_CASSANDRA_REPLICATION_FACTOR ?= $(CASSANDRA_NODES)
export TRIGGER_CASSANDRA_HOSTS TRIGGER_CASSANDRA_REPLICATION_FACTOR
endif

.PHONY: help install up down status test unit migrate receiver bench bench-peers bench-profile bench-scale \
	bench-wheel chaos chaos-short fuzz check docs clean-data image test-deploy

help:
	@echo "make up       install what is missing, start Cassandra, SQS, Redis, the service and a sample receiver"
	@echo "make test     install what is missing, start the dependencies, run every test"
	@echo "make unit     the unit tests alone (no services, seconds)"
	@echo "make down     stop everything 'make up' or 'make test' started"
	@echo "make migrate  apply pending Cassandra schema files (make up does it)"
	@echo "make receiver run the sample receiver in the foreground (port 9000, logs each callback)"
	@echo "make bench    run the benchmarks against 'make up' (results in bench/results/)"
	@echo "make bench-peers  spread + burst + long-delay duplicates, ours vs Celery ETA tasks (bench/results/peers.*)"
	@echo "make bench-profile  py-spy flame graphs of the API and the dispatcher during a burst (bench/results/profiles/)"
	@echo "make bench-scale  before/after storing 1,000,000 pending reminders: registration, lag, idle CPU, list pages (bench/results/scale.json)"
	@echo "make chaos    faults during load: 3,000 triggers, a fault every 5 s (bench/results/chaos-*.json)"
	@echo "make chaos-short  the same, short: 500 triggers, each fault once (run by make test)"
	@echo "make fuzz     schemathesis against make up's API and its OpenAPI contract (var/fuzz/)"
	@echo "make check    ruff + mypy --strict (packages, bench/chaos, tests and the Python SDK) + make docs"
	@echo "make docs     build the docs site (mkdocs-material, --strict) into var/site/"
	@echo "make image    build the container image localhost/trigger-service:<version> and :latest (podman)"
	@echo "make test-deploy  build the image, run its processes against make up's stores, deliver a trigger (tests/deploy/)"
	@echo
	@echo "CASSANDRA_NODES=3 (with up, test, migrate, status) runs a local 3-node Cassandra ring on"
	@echo "127.0.0.1-3 instead of the single node, replication factor 3 (docs/operations/storage.md: 'A 3-node ring')."
	@echo "Stop one node: CASSANDRA_NODES=3 CASSANDRA_NODE=2 infra/down.sh cassandra;"
	@echo "start it again: make up CASSANDRA_NODES=3 (or infra/up.sh cassandra). make down stops all."

# The project's own virtualenv, re-installed when pyproject.toml changes; the Python SDK and
# triggerctl (clients/python, its own package) installed editable beside the service.
$(STAMP): pyproject.toml clients/python/pyproject.toml
	@test -x $(PY) || $(PYTHON_BOOTSTRAP) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@$(PY) -m pip install -q -e './clients/python[redis]'
	@touch $(STAMP)

install: $(STAMP)
	@infra/install.sh all

up: install
	@infra/up.sh
	@infra/app.sh up
	@echo
	@echo "API:       http://$${TRIGGER_API_HOST:-127.0.0.1}:$${TRIGGER_API_PORT:-8080}"
	@echo "dev token: dev-token   (caller 'dev' in config/callers.dev.toml)"
	@echo "try:       curl -s -X POST http://127.0.0.1:$${TRIGGER_API_PORT:-8080}/v1/triggers \\"
	@echo "             -H 'Authorization: Bearer dev-token' -H 'Content-Type: application/json' \\"
	@echo "             -d '{\"callbackUrl\": \"http://127.0.0.1:9000/hook\", \"payload\": {\"hi\": 1}, \"delaySeconds\": 5}'"
	@echo "then:      tail -f var/log/receiver.log   (the sample receiver on :9000 logs each callback)"
	@echo "logs:      var/log/   stop: make down"

down:
	@if [ -x infra/app.sh ]; then infra/app.sh down; fi
	@infra/down.sh

status:
	@infra/status.sh
	@infra/app.sh status

# The whole suite: unit tests, then integration tests against the real services; the ops
# console's browser test needs Debian's chromium, the alert rules' tests Debian's prometheus
# (its promtool), both installed here when missing, not by `make up`.
# Line and branch coverage of the packages is reported at the end (var/coverage/coverage.xml)
# and the run fails under the floor in pyproject.toml's [tool.coverage.report].
test: install
	@infra/install.sh chromium
	@infra/install.sh prometheus
	@infra/up.sh
	@$(PY) -m trigger_service.platform.keys add --if-missing
	@mkdir -p var/coverage
	@$(PY) -m pytest -p no:cacheprovider --cov --cov-report=term:skip-covered \
		--cov-report=xml:var/coverage/coverage.xml $(PYTEST_ARGS)

# No services and no TRIGGER_* variables: the unit tests run on the in-memory fakes.
unit: $(STAMP)
	@env $$(env | sed -n 's/^\(TRIGGER_[A-Z0-9_]*\)=.*/-u \1/p') \
		$(PY) -m pytest -p no:cacheprovider tests/unit $(PYTEST_ARGS)

migrate: install
	@infra/up.sh cassandra
	@$(PY) -m trigger_service.migrate

receiver: $(STAMP)
	@$(PY) infra/sample_receiver.py

bench: up
	@$(PY) bench/run.py
	@$(PY) bench/wheel_bench.py
	@$(PY) bench/preview_bench.py
	@$(PY) bench/step_bench.py
	@$(PY) bench/channels_bench.py

# The `bench` extra (Celery, matplotlib, py-spy): only the peer comparison and the profiles
# need it, so `make install` does not bring it.
$(VENV)/.bench-installed: pyproject.toml $(STAMP)
	@$(PY) -m pip install -q -e '.[dev,bench]'
	@touch $@

# Ours vs Celery ETA tasks on the same Redis (db 5), same loads, same receiver; starts and stops
# its own Celery worker (prefork, concurrency 2). bench/results/peers.{json,md,png}.
bench-peers: up $(VENV)/.bench-installed
	@$(PY) -m bench.peers

# Does what is stored change what anything costs? Before/after storing 1,000,000 pending
# reminders (bench/results/scale.json; ~25 minutes; run it on a fresh store).
bench-scale: up
	@$(PY) bench/scale.py

# py-spy flame graphs of the dispatcher and the API during a burst (bench/results/profiles/).
bench-profile: up $(VENV)/.bench-installed
	@bench/profile.sh

# Several thousand generated requests (FUZZ_EXAMPLES per operation and phase; default 100).
fuzz: up
	@infra/fuzz.sh

bench-wheel: $(STAMP)
	@$(PY) bench/wheel_bench.py

# Faults while triggers are registered and delivered (bench/chaos/): the dependencies of
# `make up`, the service's processes restarted with the run's own settings and stopped at the
# end (`make up` restores them). Exit status 1 when a target is missed.
chaos: install
	@$(PY) -m bench.chaos

chaos-short: install
	@$(PY) -m bench.chaos --short

check: $(STAMP) docs
	@$(PY) -m ruff check .
	@$(PY) -m mypy --strict trigger_service dispatcher sweeper reconciler bench/chaos tests \
		clients/python/trigger_client

# The docs site (docs/, mkdocs.yml) into var/site/; --strict: a broken link, a missing page or
# an unknown anchor fails. Open var/site/index.html.
docs: $(STAMP)
	@NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# The container image (docs/operations/container.md): a Debian root filesystem with python3,
# the service's wheel and its dependencies, FROM scratch with podman; cached under var/image/.
image: $(STAMP)
	@PYTHON=$(abspath $(PY)) infra/image/build.sh

# The image's tests (tests/deploy/, skipped by `make test`): they build it, run its API, a
# dispatcher and a sweeper (and compose.yaml) against the stores of `make up`, and deliver.
test-deploy: install
	@infra/install.sh containers
	@infra/up.sh
	@PYTHON=$(abspath $(PY)) infra/image/build.sh
	@DEPLOY_TESTS=1 DEPLOY_BUILD_PYTHON=$(abspath $(PY)) $(PY) -m pytest -p no:cacheprovider \
		tests/deploy $(PYTEST_ARGS)

clean-data: down
	@infra/reset-data.sh
