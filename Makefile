# The two commands of the README. Both set everything up first (idempotent).
PY := .venv/bin/python

.PHONY: demo test setup lint build-asan test-asan

demo: setup
	$(PY) -m openreg_lab demo

test: setup lint
	$(PY) -m pytest

setup:
	bash scripts/setup.sh

lint:
	$(PY) -m ruff check openreg_lab tests benchmarks setup.py
	$(PY) -m ruff format --check openreg_lab tests benchmarks setup.py
	.venv/bin/clang-format --dry-run -Werror $$(find csrc -name '*.cpp' -o -name '*.h')
