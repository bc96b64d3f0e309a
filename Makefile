# make app   set up (first time) and start the playground
# make test  set up (first time) and run the whole test suite (what CI runs)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup app demo test test-fast
setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt scripts/setup.sh scripts/install_llama_cpp.sh scripts/install_browser.sh
	VENV=$(VENV) bash scripts/setup.sh
	touch $@

app: $(STAMP)
	$(PY) app.py

demo: $(STAMP)
	$(PY) -m playground generate --preset $(or $(PRESET),tool_call) --k $(or $(K),4) --compare-plain

test: $(STAMP)
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"
