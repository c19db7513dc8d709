# Two commands do all set-up on a fresh machine: `make demo` and `make test`; `make check` is the fast lane.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Tests and notebooks run at smoke size (same code paths, smaller); the demo at full size.
# Either can be overridden: PODRACER_SIZE=full make test.

.PHONY: demo test check lab docs site course bench rllib-venv install clean

# The install re-runs only when the dependency files change (the stamp is newer otherwise). uv (pinned, installed into
# the venv by pip) installs the same versions as pip from the same constraints, downloading and unpacking in parallel:
# 40-50% of pip's time on a fresh clone (87 s against 175-278 s on the loaded 2-core machine, 2026-12-08). It gets
# pip's local wheel directories (PIP_FIND_LINKS, pip's find-links setting: where a CPU torch lies on disk); should uv
# fail, pip does the install as before. Both byte-compile what they install: keep it so (without it, where
# PYTHONDONTWRITEBYTECODE is set, every process compiles torch from source again: a test run 3x slower).
EXTRAS := all,dev,warp,teach,docs
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	links="$${PIP_FIND_LINKS:-$$($(BIN)/python -m pip config get global.find-links 2>/dev/null)}"; \
	{ $(BIN)/python -m pip install --quiet -c constraints.txt uv && \
	  $(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -c constraints.txt \
	    $$(for l in $$links; do printf -- '--find-links %s ' "$$l"; done) -e ".[$(EXTRAS)]"; } || \
	{ echo "uv could not install; pip installs instead"; \
	  $(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"; }
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PODRACER_SIZE=$(or $(PODRACER_SIZE),full) $(BIN)/python -m finance.demo

# Two test lanes, both starting with the import contracts (import-linter, [tool.importlinter] in pyproject.toml).
# `make test` is the full lane, the README's and CI's (.ci/run): every test and every lesson, in one pytest run.
# Each lesson runs once, through its solution notebook (conftest.py says why), whose first cell runs the whole
# lesson: the per-cell timeout is a whole lesson's. Budget: 15 minutes on a fresh clone on 2 cores, install included.
# Both lanes run on pytest-xdist workers. Every test is single-threaded and seeded, so results do not depend on which
# worker runs it. Tests that start process trees or servers that could collide run one at a time in one of three scopes
# (conftest.py): RAY (Ray clusters and their kill tests), RAY_LESSON (lesson 12 and the docs blocks that start a Ray of
# their own) and LOCAL (tournaments of local pods, the lessons that start them, the browser), so no two of them race for
# ports, for CPUs a Ray reserves or for a kill test's timing; the scopes run side by side, every other test spreads over
# the workers, the longest work handed out first (tests/durations.json). `make check` runs one worker per core of the
# 2-core CI machine; `make test` two more (TEST_WORKERS): the RAY and LOCAL scopes hold a worker each for most of the run
# while mostly waiting on the processes they start, and two more keep both cores busy with the CPU-bound tests meanwhile.
WORKERS ?= 2
TEST_WORKERS ?= 4
test: $(STAMP)
	$(BIN)/lint-imports
	PODRACER_SIZE=$(or $(PODRACER_SIZE),smoke) $(BIN)/python -m pytest tests notebooks --nbmake --nbmake-timeout=1800 -p no:cacheprovider --durations=15 -n $(TEST_WORKERS)

# `make check` is the fast lane while you work: the unit tests, without those marked `slow` (learning runs,
# Ray clusters, README blocks, notebooks, the browser, the demo; see pyproject.toml). Under 3 minutes on 2 cores.
check: $(STAMP)
	$(BIN)/lint-imports
	PODRACER_SIZE=$(or $(PODRACER_SIZE),smoke) $(BIN)/python -m pytest tests -m "not slow" -p no:cacheprovider --durations=10 -n $(WORKERS)

# The notebooks open at the learning size ("full": agents visibly learn in a few minutes on a CPU).
lab: $(STAMP)
	PODRACER_SIZE=$(or $(PODRACER_SIZE),full) $(BIN)/jupyter lab notebooks/

# The course as HTML with its figures, for readers who only browse: every lesson executed at the
# learning size (about 22 min on 2 cores), rendered to build/docs/ (not committed). One at a time,
# so a failure names its notebook; the glossary is copied beside them (the notebooks link it).
DOCS := build/docs
docs: $(STAMP)
	mkdir -p $(DOCS)
	for nb in notebooks/[0-9][0-9]_*.ipynb; do echo "== $$nb"; \
	  PODRACER_SIZE=$(or $(PODRACER_SIZE),full) OMP_NUM_THREADS=$(or $(OMP_NUM_THREADS),1) \
	  $(BIN)/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=1800 \
	    --output-dir $(DOCS) "$$nb" || exit 1; done
	cp notebooks/GLOSSARY.md $(DOCS)/
	@echo "open $(DOCS)/02_first_agent.html"

# The documentation site (mkdocs.yml; docs/site.md says what it is built from): build/site/, offline and strict
# (a broken link or anchor, an unknown API name, a public name without a docstring, a page left out of the nav
# fails it). Open build/site/index.html, or serve it: python -m http.server -d build/site. The lessons are shown
# as stored, without outputs; EXECUTE=1 runs them first (at PODRACER_SIZE, default smoke) so figures appear.
# tests/test_site.py runs the same build and reads it in Chromium.
site: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true SITE_EXECUTE=$(if $(EXECUTE),true,false) \
	  PODRACER_SIZE=$(or $(PODRACER_SIZE),smoke) OMP_NUM_THREADS=$(or $(OMP_NUM_THREADS),1) $(BIN)/mkdocs build --strict
	@echo "open build/site/index.html"

# A term's releases from the lessons' sources (notebooks/source/, docs/syllabus.md): build/course/student (the
# notebooks students get), build/course/autograder/NN_name.zip (otter-grader autograders with the hidden tests) and
# build/course/ta (solutions, RUBRIC.md), build/course/bundle (the wheel a Colab cell can install). It also writes the student notebooks over notebooks/NN_name.ipynb, so a
# source edited and released is committed with its student notebook (a test checks the two agree).
course: $(STAMP)
	$(BIN)/python -m podracer.course release --out build/course --update-lessons --bundle

# reveal.js slides of the lessons (docs/slides.md), one HTML file each in build/slides/ (not committed):
# `## ` headings start slides unless a cell's slideshow tag says otherwise. LESSONS=notebooks/03_inside_ppo.ipynb
# for one; EXECUTE=1 runs each lesson first (at PODRACER_SIZE, default smoke) so figures appear.
# The slides present without a network: reveal.js, require.js and jQuery come from build/slides-assets/, fetched
# once from the npm registry (`make slides-assets`, the one step that needs a network; the first `make slides` does
# it), MathJax from the jupyter-server-mathjax package; all are copied into build/slides/_static/.
SLIDES := build/slides
SLIDE_ASSETS := build/slides-assets
.PHONY: slides slides-assets
$(SLIDE_ASSETS)/VERSIONS: | $(STAMP)
	$(BIN)/python -m podracer.course slides-assets --out $(SLIDE_ASSETS)
slides-assets: $(SLIDE_ASSETS)/VERSIONS
slides: $(STAMP) $(SLIDE_ASSETS)/VERSIONS
	PODRACER_SIZE=$(or $(PODRACER_SIZE),smoke) $(BIN)/python -m podracer.course slides --out $(SLIDES) \
	  --assets $(SLIDE_ASSETS) $(if $(EXECUTE),--execute) $(or $(LESSONS),notebooks/[0-9][0-9]_*.ipynb)
	cp notebooks/GLOSSARY.md $(SLIDES)/  # the files above are what to open

# FinRL's env file for benchmarks/stock_env.py: the package without its heavy dependencies,
# in a folder of its own (never imported as a package, loaded by path).
FINRL_DIR := $(VENV)/finrl-src
$(FINRL_DIR): | $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps --target $(FINRL_DIR) finrl==0.3.7

# RLlib for benchmarks/vs_rllib.py: ray[rllib] 2.60 pins gymnasium 1.2.2 (ours: 1.4), so it gets a
# virtual environment of its own, inside .venv (ignored by git, removed by `make clean`). Same torch
# CPU build, numpy and pandas as ours (constraints.txt less its gymnasium pin); the repo itself is not
# installed there: benchmarks/_rllib_side.py puts the checkout on sys.path for `finance`.
RLLIB_VENV := $(VENV)/rllib
RLLIB_PYTHON := $(RLLIB_VENV)/bin/python
RLLIB_STAMP := $(RLLIB_VENV)/.installed
$(RLLIB_STAMP): constraints.txt
	test -x $(RLLIB_PYTHON) || $(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_PYTHON) -m pip install --quiet --upgrade pip
	grep -v '^gymnasium' constraints.txt > $(RLLIB_VENV)/constraints.txt
	$(RLLIB_PYTHON) -m pip install --quiet -c $(RLLIB_VENV)/constraints.txt torch==2.13.0 "ray[rllib]==2.60.0" \
	  numpy pandas pyarrow scipy tqdm pyyaml matplotlib platformdirs
	$(RLLIB_PYTHON) -c "import ray.rllib, torch, gymnasium; assert '+cpu' in torch.__version__, torch.__version__"
	touch $(RLLIB_STAMP)

rllib-venv: $(RLLIB_STAMP)

# Every benchmark at its default size; vs_rllib.py runs RLlib in $(RLLIB_VENV) (RLLIB_PYTHON).
bench: $(STAMP) $(FINRL_DIR) $(RLLIB_STAMP)
	for f in benchmarks/[!_]*.py; do echo "== $$f"; \
	  FINRL_ENV_FILE=$(FINRL_DIR)/finrl/meta/env_stock_trading/env_stocktrading.py OMP_WAIT_POLICY=PASSIVE \
	  RLLIB_PYTHON=$(RLLIB_PYTHON) $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs *.egg-info
