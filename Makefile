# layersim — the two commands of the README, and the steps they stand on.
#   make reproduce [SCALE=default|smoke|paper] [NB=<glob or substring>] [JOBS=N] [RAY_ADDRESS=addr]
#   make test
#   make compare [RUN=figures] [REF=git:HEAD]
# All create .venv and provision the offline assets on first use.

PY      ?= python3
VENV    ?= .venv
PYTHON  := $(VENV)/bin/python
SCALE   ?= default
NB      ?=
STAMP   := $(VENV)/.layersim-installed
ASSETS  := data/system/.provisioned

.PHONY: all setup venv assets browser reproduce rehearse recover test test-all test-gpu unit notebooks-smoke smoke-refs test-portable compare report site serve lock clean-runs help

help:
	@echo "make reproduce  run every notebook at SCALE=$(SCALE) (NB=pattern for a subset), writing figures/"
	@echo "make test       unit tests + every notebook at smoke scale with nbval regression checks"
	@echo "make test-all   make test, then the slower checks (runs stopped by signals at every phase; what CI runs)"
	@echo "make rehearse   every notebook at SCALE=paper, offline on fixture data and models, counts cut (NB=..., RECORD=1)"
	@echo "make recover    put back committed results that a hard-killed make reproduce left half-written"
	@echo "make smoke-refs refresh the smoke-scale nbval references under tests/notebooks/ (deliberately)"
	@echo "make test-portable  the most kernel-sensitive smoke notebooks under other CPU kernels and thread counts"
	@echo "make compare    how close a run came to the committed results (RUN=figures REF=git:HEAD)"
	@echo "make report MODEL=m DATA=d  every lens of the four papers on one model (runs/report/m__d/report.html)"
	@echo "make site       the book: every notebook rendered and the claims audit (runs/site/html/index.html)"
	@echo "make serve      serve the built book at http://127.0.0.1:8000/"
	@echo "make setup      create .venv and provision offline data and models (both commands do this)"

setup: venv assets browser

# Debian's Chromium for the book's browser test (Playwright drives it; its own browser download is not used).
# Installed when running as root with apt-get; otherwise the test is skipped unless LAYERSIM_REQUIRE_BROWSER=1.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null)) && \
	    echo "installed Debian's chromium for the browser test"; \
	  else echo "no chromium and no root apt-get: the browser test will be skipped"; fi

venv: $(STAMP)

# torch first, from its pinned version (other versions would download several GB);
# requirements-lock.txt pins everything else to the versions the committed results used.
# The library's own dependencies and the extras of the reproduction (pyproject.toml): the notebooks' stack,
# Ray for JOBS=N, the tests and the book; the offline models' packages come with `make assets`.
EXTRAS  := notebooks,ray,test,book
$(STAMP): pyproject.toml requirements-lock.txt
	@test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PYTHON) -m pip install -q -c requirements-lock.txt -e '.[$(EXTRAS)]'
	$(PYTHON) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (layersim)" >/dev/null
	@touch $@

assets: $(ASSETS)

$(ASSETS): scripts/provision.sh | $(STAMP)
	PYTHON=$(PYTHON) bash scripts/provision.sh
	@mkdir -p $(dir $@) && touch $@

# At the default scale it replaces the committed results (notebooks/ and figures/): --update-committed is the
# one switch that lets anything write there; each notebook's claims are judged over 3 seeds (SEEDS=N for
# another number; layersim.notebook.seeds), and the README's notebook table is rewritten from the runs.
# Other scales write runs/<scale>/.
# JOBS=N runs up to N notebooks at once on a local Ray instance (layersim.tools.batch); RAY_ADDRESS=auto (or
# host:port, ray://host:port) submits them to a running Ray cluster instead.
SEEDS   ?=
JOBS    ?=
RAY_ADDRESS ?=
reproduce: setup
	$(PYTHON) -m layersim.tools.runner --scale $(SCALE) --nb '$(NB)' $(if $(SEEDS),--seeds $(SEEDS)) \
	  $(if $(JOBS),--jobs $(JOBS)) $(if $(RAY_ADDRESS),--address $(RAY_ADDRESS)) \
	  $(if $(filter default,$(SCALE)),--update-committed)
	$(if $(filter default,$(SCALE)),$(PYTHON) -m layersim.tools.site readme)

# The paper scale rehearsed: every notebook at scale=paper offline, on fixture files in the real on-disk formats and
# fixture models of the published sizes (written once into the cache), only the counts cut: runs/rehearsal/.
# JOBS=N rehearses N notebooks at once, each in its own process with the cores shared out.
rehearse: setup
	$(PYTHON) -m layersim.tools.rehearse --nb '$(NB)' $(if $(JOBS),--jobs $(JOBS)) $(if $(RECORD),--record)

# One pytest run: unit tests, then every notebook's smoke-scale reference re-executed by nbval
# (cells tagged nbval-check-output compared as text without their numbers, tests/nbval_sanitize.cfg)
# and its metrics.json checked against <stem>.metrics.json within tests/notebooks/tolerances.json
# (the layersim.tools.smoke_check plugin, loaded by pyproject.toml's addopts).
# TEST_WORKERS pytest processes (pytest-xdist; each notebook's cells stay together on one), each with
# one torch/BLAS thread unless OMP_NUM_THREADS is set: two workers of one thread fill two cores without
# oversubscribing them. TEST_WORKERS=0 runs everything in one process.
# Tests marked `full` (a real runner stopped by every signal at every phase, ...) are left to make test-all.
TEST_WORKERS ?= 2
test: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PYTHON) -m pytest tests -n $(TEST_WORKERS) --dist loadfile -m "not full" \
	  --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider

# What CI runs: make test, then the slower checks marked `full` (a real runner stopped by signals, the wheel alone,
# a one-node Slurm, a rehearsal of five notebooks two at a time): times in docs/reproduce.md.
test-all: test
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PYTHON) -m pytest tests -n $(TEST_WORKERS) --dist loadfile -m full \
	  -p no:cacheprovider

# CUDA against the CPU (tests/test_gpu.py, skipped without a GPU): on a machine with one.
test-gpu: setup
	$(PYTHON) -m pytest tests -m gpu -p no:cacheprovider

unit: setup
	$(PYTHON) -m pytest tests --ignore=tests/notebooks -p no:cacheprovider

smoke-refs: setup
	$(PYTHON) -m layersim.tools.runner --refs --nb '$(NB)'

# The most kernel-sensitive smoke notebooks under torch's generic and AVX2 kernels and 1-3 threads,
# each checked like make test does (PORTABLE_ARGS="--nb a02 --settings default-1t" for a part).
test-portable: setup
	$(PYTHON) -m layersim.tools.portable $(PORTABLE_ARGS)

# A finished run against the committed results: after make reproduce, RUN=figures (the working tree)
# against REF=git:HEAD; any folder of <paper>/<stem>/metrics.json or git:<rev> on either side.
RUN ?= figures
REF ?= git:HEAD
compare: venv
	$(PYTHON) -m layersim compare '$(RUN)' '$(REF)' $(COMPARE_ARGS)

# Every lens on one model: make report MODEL=all-minilm-l6-v2 DATA=austen [REPORT_ARGS="--n 500"]
report: setup
	$(PYTHON) -m layersim report --model '$(MODEL)' --data '$(DATA)' $(REPORT_ARGS)

# Re-pin requirements-lock.txt to what is installed now (after a deliberate upgrade).
lock: venv
	$(PYTHON) -m pip freeze --exclude-editable | grep -v -E '^(torch|torchvision)==' > requirements-lock.txt

# The book: the committed notebooks rendered (nothing executed), the generated landing, paper and claims audit
# pages (layersim.tools.site); about a minute, offline.
site: setup
	$(PYTHON) -m layersim.tools.site build

PORT ?= 8000
serve: setup
	$(PYTHON) -m layersim.tools.site serve --port $(PORT)

# After a hard kill (SIGKILL, a power loss) of make reproduce: every run also does this before it starts.
recover: venv
	$(PYTHON) -m layersim.tools.runner --recover

clean-runs:
	rm -rf runs/
