# Set-up, the example job and the tests, in a virtual environment (.venv).
#
# torch: a CPU-only machine must not pull the multi-GB CUDA build that an unpinned `torch` resolves to.
# The set-up installs TORCH_SPEC first unless the venv already has a torch (which it then keeps); the
# project's own requirement (torch>=2.7.0) is then already satisfied.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# verl's sources, read (never imported) by tests/test_compat_verl.py, which pins our signatures to verl's.
VERL_VERSION ?= 0.9.1
VERL_SRC ?= $(VENV)/verl_src

.PHONY: setup tools docs docs-serve verl-src verl-env run quickstart test test-verl conformance test-tensordict-range tensordict-range-deps lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[test,docs]"
	touch $@

run: setup
	$(BIN)/supervisor start examples/rlhf/rlhf.toml

quickstart: setup
	$(BIN)/python examples/quickstart.py

# Prometheus and promtool (Debian's package) for the observability tests, and Redis for the GCS
# fault-tolerance tests (Ray's GCS keeps its tables there and restarts from them), and Chromium, in which
# tests/test_docs.py opens the built docs site. policy-rc.d keeps the
# packages from starting system services: the tests run their own, on 127.0.0.1, and stop them.
tools:
	@{ command -v promtool && command -v redis-server && command -v chromium; } >/dev/null || { \
		created=0; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created=1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus redis-server chromium >/dev/null; status=$$?; \
		[ $$created = 1 ] && rm -f /usr/sbin/policy-rc.d; exit $$status; }

# The documentation site, strict (a broken link, a page missing from the nav, a missing include or a
# reference that does not generate fails it), into build/docs/site. tests/test_docs.py builds it too,
# and opens it in Chromium (screenshots in build/docs/screenshots).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

verl-src: $(VERL_SRC)/verl/protocol.py

$(VERL_SRC)/verl/protocol.py: | setup
	rm -rf $(VERL_SRC) && mkdir -p $(VERL_SRC)
	$(BIN)/python -m pip download --quiet "verl==$(VERL_VERSION)" --no-deps --no-binary :all: -d $(VERL_SRC)
	tar xzf $(VERL_SRC)/verl-$(VERL_VERSION).tar.gz -C $(VERL_SRC) --strip-components=1

# Tests marked `verl` need the installed verl: they run in the second environment (test-verl), not here.
# The second environment and the older tensordict are installed while the first suite runs (pip mostly
# waits on the disk; CI has a time limit); their output follows the suite's, and either failing fails.
# TEST_WORKERS pytest-xdist workers run the suite, a whole module to a worker (a module owns its cluster;
# tests/conftest.py hands out the modules, longest first); TEST_WORKERS=0 (the default) runs it in one
# process. Two workers took 39.2 min against 43.2 in one process (2026-12-07): the chaos quick profile,
# one test, is the critical path and ran twice as slowly beside the other worker (29.5 min against 14),
# and a timing comparison of test_standby.py failed under the load; docs/development/tests.md has the
# figures. A module that passes alone but fails beside the other worker has a defect to fix.
# The slowest tests are listed at the end (--durations) as before.
TEST_WORKERS ?= 0
test: setup tools verl-src
	@{ $(MAKE) --no-print-directory verl-env tensordict-range-deps > $(VENV)/side-setup.log 2>&1; echo $$? > $(VENV)/side-setup.rc; } & \
	VERL_SRC=$(abspath $(VERL_SRC)) $(BIN)/python -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadfile -m "not verl"; status=$$?; \
	wait; echo "-- installed beside the suite (verl-env, tensordict-range-deps):"; cat $(VENV)/side-setup.log; \
	test $$status = 0 && test "$$(cat $(VENV)/side-setup.rc)" = 0
	$(MAKE) test-tensordict-range
	$(MAKE) test-verl

# The second environment: what a verl 0.9 user has. torch 2.13.0 (the CPU wheel), verl 0.9.1 without
# its heavy dependencies (--no-deps) plus the light ones its single controller and protocol import, at
# versions verl's pins allow, and every dependency ray-supervisor shares with verl at the floor in
# pyproject.toml, so the floors are tested. Then ray-supervisor is installed the ordinary way (with its
# dependencies): .ci/check_beside_verl.py fails if that changed any package installed before it, or if
# `pip check` finds a conflict (verl's heavy dependencies, deliberately absent, are the only thing it
# may report).
VERL_VENV ?= .venv-verl
VBIN := $(VERL_VENV)/bin
# The floor of every runtime dependency, read from pyproject.toml (.ci/floors.py says which two are
# tested otherwise, and why).
DEPENDENCY_FLOORS ?= $(shell $(PYTHON) .ci/floors.py | sed 's/.*/"&"/')
# verl 0.9.1's pins for what its single controller and protocol import (tensordict: its newest).
VERL_LIGHT_DEPS ?= "tensordict==0.10.0" "omegaconf" "transformers>=5.5.3,!=5.6.0,<5.11"

verl-env: $(VERL_VENV)/.installed

# Built from scratch each time: the check below means something only in a venv ray-supervisor was
# never installed into.
$(VERL_VENV)/.installed: pyproject.toml
	@test -n '$(DEPENDENCY_FLOORS)' || { echo "no dependency floors from .ci/floors.py" >&2; exit 1; }
	rm -rf $(VERL_VENV) && $(PYTHON) -m venv $(VERL_VENV)
	$(VBIN)/python -m pip install --quiet --upgrade pip
	$(VBIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(VBIN)/python -m pip install --quiet --no-deps "verl==$(VERL_VERSION)"
	$(VBIN)/python -m pip install --quiet $(DEPENDENCY_FLOORS) $(VERL_LIGHT_DEPS)
	$(VBIN)/python -m pip freeze --exclude-editable > $(VERL_VENV)/before.txt
	$(VBIN)/python -m pip install --quiet -e ".[test]"
	$(VBIN)/python .ci/check_beside_verl.py $(VERL_VENV)/before.txt
	touch $@

# In the second environment: verl's own CPU tests against the compat layer (the conformance suite),
# the supervised verl groups and `supervisor run` with the installed verl (the `verl`-marked tests), and,
# at the dependency floors, the protocol, the compat layer, the import checks, authentication (the
# token's sources and checks), the owner fence, the CLI, and the exporter (serving, forgetting series,
# the probe routes). To keep CI under its limit, two run in the first environment only: the real
# Prometheus scraping a daemon through a node loss, and tests/test_security.py (listeners in a private
# network namespace, a refused driver: 95 s here).
VERL_ENV_TESTS ?= tests/test_integration_verl.py tests/test_run_verl.py tests/test_protocol.py tests/test_compat_verl.py tests/test_exports.py tests/test_auth.py tests/test_retrying.py \
	tests/test_fence.py tests/test_cli.py tests/test_probes.py \
	tests/test_observability.py::test_a_trainer_without_the_daemon_serves_the_same_metrics_in_one_call \
	tests/test_observability.py::test_a_removed_group_or_pool_leaves_no_series_and_the_others_keep_theirs
test-verl: verl-env verl-src tools conformance
	EXPECT_TENSORDICT=0.10.0 VERL_SRC=$(abspath $(VERL_SRC)) $(VBIN)/python -m pytest -q --durations=15 -p no:cacheprovider $(VERL_ENV_TESTS)

# The protocol and the verl compat layer also hold with the oldest tensordict pyproject.toml allows (the
# newest verl 0.9 allows, 0.10.0, is the second environment's: see test-verl). Each version is installed
# into a directory of its own and put in front of the venv's on PYTHONPATH (Ray's workers inherit it),
# and EXPECT_TENSORDICT makes the run check that it is the one imported.
TENSORDICT_RANGE ?= 0.8.0
# Placement and colocation, the same with any tensordict (the main suite runs them): 35 s of CI's time.
TENSORDICT_RANGE_DESELECT ?= --deselect tests/test_compat_verl.py::test_split_resource_pool_into_worker_groups \
	--deselect tests/test_compat_verl.py::test_colocated_workers_the_verl_way
tensordict-range-deps: setup
	@for v in $(TENSORDICT_RANGE); do \
		dir=$(abspath $(VENV))/tensordict-$$v; \
		test -d $$dir/tensordict || $(BIN)/python -m pip install --quiet --no-deps --target $$dir "tensordict==$$v" "pyvers<0.2" || exit 1; \
	done

test-tensordict-range: setup verl-src tensordict-range-deps
	@for v in $(TENSORDICT_RANGE); do \
		dir=$(abspath $(VENV))/tensordict-$$v; \
		echo "tensordict $$v:"; \
		PYTHONPATH=$$dir EXPECT_TENSORDICT=$$v VERL_SRC=$(abspath $(VERL_SRC)) $(BIN)/python -m pytest -q -p no:cacheprovider \
			tests/test_protocol.py tests/test_compat_verl.py tests/test_exports.py $(TENSORDICT_RANGE_DESELECT) || exit 1; \
	done

# verl 0.9's own CPU tests, read unmodified from VERL_SRC, against supervisor.compat.verl: an import hook
# (tests/conformance/) aliases `verl` in the driver and, through PYTHONPATH, in Ray's workers. They run in
# the second environment, so the alias must win over the real verl installed there, and with the newest
# tensordict verl 0.9 allows (three of verl's protocol-v2 tests fail with tensordict 0.15 even for verl).
VERL_CONFORMANCE_TESTS ?= tests/single_controller/*_on_cpu.py tests/single_controller/test_get_set_dispatch_collect_cpu.py \
	tests/test_protocol_on_cpu.py tests/test_protocol_v2_on_cpu.py
conformance: verl-env verl-src
	cd $(VERL_SRC) && VERL_SRC=$(abspath $(VERL_SRC)) EXPECT_TENSORDICT=0.10.0 \
		PYTHONPATH=$(CURDIR)/tests/conformance:$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} \
		$(abspath $(VBIN))/python -m pytest -q -p no:cacheprovider -c $(CURDIR)/tests/conformance/pytest.ini --rootdir=. $(VERL_CONFORMANCE_TESTS)

lint: setup
	$(BIN)/python -m ruff check supervisor tests examples dashboards chaos bench ops docs/hooks

clean:
	rm -rf $(VENV) $(VERL_VENV) *.egg-info .pytest_cache .hypothesis
