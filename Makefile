# Set-up, the example job and the tests, in a virtual environment (.venv).
#
# torch: a CPU-only machine must not pull the multi-GB CUDA build that an unpinned `torch` resolves to.
# The set-up installs TORCH_SPEC first unless the venv already has a torch (which it then keeps); the
# project's own requirement (torch>=2.13.0) is then already satisfied.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
# verl's sources, read (never imported) by tests/test_compat_verl.py, which pins our signatures to verl's.
VERL_VERSION ?= 0.9.1
VERL_SRC ?= $(VENV)/verl_src

.PHONY: setup tools verl-src run quickstart test test-tensordict-range conformance lint clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

run: setup
	$(BIN)/supervisor start examples/rlhf/rlhf.toml

quickstart: setup
	$(BIN)/python examples/quickstart.py

# Prometheus and promtool (Debian's package) for the observability tests. policy-rc.d keeps the package
# from starting a system service: the tests run their own Prometheus on 127.0.0.1 and stop it.
tools:
	@command -v promtool >/dev/null || { \
		created=0; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created=1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; status=$$?; \
		[ $$created = 1 ] && rm -f /usr/sbin/policy-rc.d; exit $$status; }

verl-src: $(VERL_SRC)/verl/protocol.py

$(VERL_SRC)/verl/protocol.py: | setup
	rm -rf $(VERL_SRC) && mkdir -p $(VERL_SRC)
	$(BIN)/python -m pip download --quiet "verl==$(VERL_VERSION)" --no-deps --no-binary :all: -d $(VERL_SRC)
	tar xzf $(VERL_SRC)/verl-$(VERL_VERSION).tar.gz -C $(VERL_SRC) --strip-components=1

test: setup tools verl-src
	VERL_SRC=$(abspath $(VERL_SRC)) $(BIN)/python -m pytest -q
	$(MAKE) test-tensordict-range
	$(MAKE) conformance

# The protocol and the verl compat layer also hold with the oldest tensordict pyproject.toml allows and
# with the newest verl 0.9 allows (it pins tensordict<=0.10.0). Each version is installed into a
# directory of its own and put in front of the venv's on PYTHONPATH (Ray's workers inherit it), and
# EXPECT_TENSORDICT makes the run check that it is the one imported.
TENSORDICT_RANGE ?= 0.8.0 0.10.0
test-tensordict-range: setup verl-src
	@for v in $(TENSORDICT_RANGE); do \
		dir=$(abspath $(VENV))/tensordict-$$v; \
		test -d $$dir/tensordict || $(BIN)/python -m pip install --quiet --no-deps --target $$dir "tensordict==$$v" "pyvers<0.2" || exit 1; \
		echo "tensordict $$v:"; \
		PYTHONPATH=$$dir EXPECT_TENSORDICT=$$v VERL_SRC=$(abspath $(VERL_SRC)) $(BIN)/python -m pytest -q -p no:cacheprovider \
			tests/test_protocol.py tests/test_compat_verl.py tests/test_exports.py || exit 1; \
	done

# verl 0.9's own CPU tests, read unmodified from VERL_SRC, against supervisor.compat.verl: an import hook
# (tests/conformance/) aliases `verl` in the driver and, through PYTHONPATH, in Ray's workers. They run
# with the newest tensordict verl 0.9 allows (CONFORMANCE_TENSORDICT, installed like the range above;
# empty: the venv's own): three of verl's protocol-v2 tests fail with tensordict 0.15 even with verl itself.
CONFORMANCE_TENSORDICT ?= 0.10.0
VERL_CONFORMANCE_TESTS ?= tests/single_controller/*_on_cpu.py tests/single_controller/test_get_set_dispatch_collect_cpu.py \
	tests/test_protocol_on_cpu.py tests/test_protocol_v2_on_cpu.py
conformance: setup verl-src
	@td=; if [ -n "$(CONFORMANCE_TENSORDICT)" ]; then \
		td=$(abspath $(VENV))/tensordict-$(CONFORMANCE_TENSORDICT); \
		test -d $$td/tensordict || $(BIN)/python -m pip install --quiet --no-deps --target $$td \
			"tensordict==$(CONFORMANCE_TENSORDICT)" "pyvers<0.2" || exit 1; \
	fi; \
	cd $(VERL_SRC) && VERL_SRC=$(abspath $(VERL_SRC)) EXPECT_TENSORDICT=$(CONFORMANCE_TENSORDICT) \
		PYTHONPATH=$(CURDIR)/tests/conformance:$(CURDIR)$${td:+:$$td}$${PYTHONPATH:+:$$PYTHONPATH} \
		$(abspath $(BIN))/python -m pytest -q -c $(CURDIR)/tests/conformance/pytest.ini --rootdir=. $(VERL_CONFORMANCE_TESTS)

lint: setup
	$(BIN)/python -m ruff check supervisor tests examples dashboards chaos bench

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .hypothesis
