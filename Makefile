# The commands of the README. Each sets everything up first (idempotent).
PY := .venv/bin/python

.PHONY: demo lab test test-all template-check setup lint test-asan

# Train the example LM on openreg, traced: prints the top fallbacks and writes report.html.
demo: setup
	$(PY) -m openreg_lab run --stack --html report.html -m openreg_lab.examples.train_lm --steps 8

# JupyterLab on the tutorials (notebooks/), in the project's environment.
lab: setup
	$(PY) -m jupyter lab --ServerApp.root_dir=notebooks

# The suite, and beside it make template-check at the lowest priority (scripts/run_tests.sh).
test: setup lint
	bash scripts/run_tests.sh $(PY)

# The template (csrc/runtime, aten, distributed, python/device and the device module) built and tested
# alone, without the lab, in build/template/ (docs/porting.md).
template-check: setup
	$(PY) scripts/template_check.py

# The slow tier too (long sweeps, the full Binder build): not in CI.
test-all: setup lint
	bash scripts/run_tests.sh $(PY) -m ''

setup:
	bash scripts/setup.sh

PYSRC := openreg_lab tests setup.py _openreg_lab_autoload.py scripts/dev_install.py scripts/template_check.py \
	scripts/template_setup.py $(wildcard benchmarks)

lint:
	$(PY) -m ruff check $(PYSRC)
	$(PY) -m ruff format --check $(PYSRC)
	.venv/bin/clang-format --dry-run -Werror $$(find csrc -name '*.cpp' -o -name '*.h')

# The test suite against an AddressSanitizer + UBSan build of the extension (slower; not in CI).
test-asan:
	bash scripts/test_asan.sh
