# Two entry points for people: `make run` and `make test`. Everything they need is installed here.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvplan-installed
MODEL ?= Qwen/Qwen2-0.5B-Instruct

.PHONY: setup run test lint bench bench-million docs goldens clean

setup: $(STAMP)

$(STAMP): pyproject.toml scripts/install.sh
	bash scripts/install.sh $(VENV)
	touch $(STAMP)

run: setup
	$(VENV)/bin/kvplan profile --model $(MODEL)

lint: setup
	$(VENV)/bin/ruff check kvplan tests benchmarks scripts tools
	$(VENV)/bin/mypy

test: lint
	bash scripts/install_browser.sh
	$(VENV)/bin/python -m pytest
	$(VENV)/bin/kvplan check examples/checks/l4-chat.toml
	$(VENV)/bin/kvplan check examples/checks/fail-tight-kv-cache.toml; test $$? -eq 1

docs: setup
	$(PY) scripts/gen_cli_docs.py

bench: setup
	$(PY) benchmarks/run.py

# the speed targets with one day of simulated traffic (1,000,000 requests) as well: minutes
bench-million: setup
	$(PY) benchmarks/run.py --targets --million

# Rebuild golden records from vLLM's own classes (tools/goldens/README.md); needs the package index
# the first time (the release's CPU venv, ~3.5 GB, is built under $(GOLDENS_VENVS)). Never part of `test`.
VLLM ?=
SET ?= all
GOLDENS_VENVS ?= $(HOME)/.cache/kvplan-goldens
goldens:
	@test -n "$(VLLM)" || { echo "make goldens VLLM=0.17.1|0.33.0|0.34.0 [SET=all|public|stress|hybrid|checkpoint]"; exit 2; }
	GOLDENS_VENVS=$(GOLDENS_VENVS) python3 tools/goldens/regen.py --vllm $(VLLM) --set $(SET)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
