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
# workers). WORKERS=0 runs the first part in this process too. The second part collects only the files that use
# the servers (VLLM_TESTS; tests/test_packaging.py holds the list to the files that take the fixture): collecting
# the whole suite to deselect all but 13 took 19 s.
WORKERS ?= 2
VLLM_TESTS := tests/test_vllm.py tests/test_ui_vllm.py tests/test_vllm_suffix.py tests/test_vllm_structured.py
test: lint
	$(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not vllm_servers"
	$(PY) -m pytest -m vllm_servers $(VLLM_TESTS)

test-fast: lint
	$(PY) -m pytest -n $(WORKERS) --dist loadfile -m "not slow and not vllm_servers"
