# make app   set up (first time) and start the playground
# make lint  set up (first time) and run ruff (pyproject.toml's [tool.ruff])
# make test  set up (first time), lint, then run the whole test suite (what CI runs)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup app demo lint test test-fast
setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt scripts/setup.sh scripts/install_llama_cpp.sh scripts/install_arctic_inference.sh scripts/install_browser.sh scripts/setup_vllm.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

app: $(STAMP)
	$(PY) app.py

demo: $(STAMP)
	$(PY) -m playground generate --preset $(or $(PRESET),tool_call) --k $(or $(K),4) --compare-plain

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Two workers: the tests run torch on one thread each (tests/conftest.py), so two use both of a 2-core machine's
# cores; then the tests that use the vLLM servers, in one process (their servers would not fit in memory beside two
# workers). WORKERS=0 runs the first part in this process too.
WORKERS ?= 2
test: lint
	$(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not vllm_servers"
	$(PY) -m pytest -m vllm_servers

test-fast: lint
	$(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not slow and not vllm_servers"
