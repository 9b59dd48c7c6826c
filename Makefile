# The course's two commands:
#   make lab    create .venv if missing, install requirements.txt, start JupyterLab
#               on 127.0.0.1 with token authentication (open the URL it prints)
#   make test   the same set-up plus requirements-dev.txt, then every test
#               (make test-fast: all but the tests marked slow, for while you work)
# Other targets: make figures (regenerate figures/), make labs (student labs from
# labs/solutions/), make bench-cpu / bench-gpu (benchmarks), make site (the course
# website in _build/site/), make site-check (check it in a browser), make class-hub (a class
# on JupyterHub on this machine, 127.0.0.1 only), make clean.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# The interpreter that will run the course: the venv's once it exists, else $(PYTHON).
RUN_PYTHON = $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

.PHONY: lab test test-fast figures labs bench-cpu bench-gpu lint clean setup setup-dev site site-check \
	check-python port-free class-hub

# Python 3.10+ (a plain exit, not `assert`, which PYTHONOPTIMIZE removes); checked on
# every run, also when .venv already exists (it may have been made by an older Python).
check-python:
	@$(RUN_PYTHON) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 10) else "Python 3.10 or newer is needed, found %d.%d (%s). Remove $(VENV) if an older Python made it, then run: make PYTHON=python3.12 ..." % (v[0], v[1], sys.executable))'

# `make lab` must serve on the port it prints: fail clearly when that port is taken
# (JupyterLab itself is also told not to move to another one: port_retries=0).
port-free:
	@$(PYTHON) tools/port_free.py $(PORT)

$(BIN)/python: | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: requirements.txt pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements-dev.txt requirements-site.txt $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	touch $@

setup: check-python $(VENV)/.installed
setup-dev: check-python $(VENV)/.installed-dev

# Binds to the loopback interface only; Jupyter's token authentication stays on
# (a fresh random token is printed in the URL, or set JUPYTER_TOKEN yourself).
lab: check-python port-free setup
	$(BIN)/jupyter lab --no-browser --ip=127.0.0.1 --port=$(PORT) $(ROOT_FLAG) \
		--ServerApp.port_retries=0 --ServerApp.root_dir="$(CURDIR)" \
		--LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb

# Three workers on two cores: a third of the 2 cores' time stood idle with two (browser
# pages, servers and subprocesses waiting); measured on a fresh clone, 2026-12-07: 722 s of
# pytest with -n 2, 657 s with -n 3. --durations: the slowest tests, printed at the end.
test: setup-dev
	$(BIN)/python -m pytest -n 3 --dist loadgroup --durations=15

# Everything except the tests marked slow (notebook and browser tests are slow too): a
# few minutes on 2 cores, for while you work. `make test` (and CI) still run everything.
test-fast: setup-dev
	$(BIN)/python -m pytest -n 2 --dist loadgroup -m "not slow"

figures: setup
	$(BIN)/python -m flashcourse.plots.readme figures

labs: setup
	$(BIN)/python tools/make_labs.py

bench-cpu: setup
	$(BIN)/python benchmarks/cpu_forward.py

# On a machine with an NVIDIA GPU (after requirements-gpu.txt): check every kernel
# against the float64 reference, time them beside PyTorch if installed, and run
# compute-sanitizer's memcheck and racecheck on small ragged shapes.
bench-gpu: setup
	$(BIN)/python benchmarks/gpu_forward.py --check --variants --bench
	compute-sanitizer --tool memcheck --report-api-errors no $(BIN)/python benchmarks/gpu_forward.py --sanitize-small
	compute-sanitizer --tool racecheck $(BIN)/python benchmarks/gpu_forward.py --sanitize-small
	$(BIN)/python benchmarks/gpu_decode.py --check --variants --bench
	compute-sanitizer --tool memcheck --report-api-errors no $(BIN)/python benchmarks/gpu_decode.py --sanitize-small
	compute-sanitizer --tool racecheck $(BIN)/python benchmarks/gpu_decode.py --sanitize-small
	$(BIN)/python benchmarks/gpu_tensor_core.py --check --variants --bench
	compute-sanitizer --tool memcheck --report-api-errors no $(BIN)/python benchmarks/gpu_tensor_core.py --sanitize-small
	compute-sanitizer --tool racecheck $(BIN)/python benchmarks/gpu_tensor_core.py --sanitize-small
	$(BIN)/python benchmarks/gpu_fp8.py --check --bench

# The course website: every notebook executed on the CPU (a few minutes), the labs as the
# learner receives them; nothing is downloaded. View it with
#   .venv/bin/python -m http.server --bind 127.0.0.1 --directory _build/site 8000
site: setup-dev
	$(BIN)/python tools/build_site.py

# Opens every page of _build/site in headless chromium: no broken links, images, maths,
# console errors or tracebacks, executed outputs on every notebook page, and in each cell
# every figure its executed notebook (_build/site-src/) made.
site-check: setup-dev
	$(BIN)/python tools/site_check.py --executed _build/site

# A class on this machine: JupyterHub on 127.0.0.1:8000 with the learners' shared password
# (tools/class_hub/jupyterhub_config.py says what it sets up; CLASS_HUB_LEARNERS names them),
# its proxy from npm (pinned, installed once into .venv). tests/test_class_hub.py runs the
# same command with three learners. Stop it with Ctrl-C: it stops every server it started.
class-hub: check-python setup-dev
	@test -n "$$CLASS_HUB_PASSWORD" || { echo "Set CLASS_HUB_PASSWORD (8+ characters) in the environment first"; exit 1; }
	$(BIN)/python tools/class_hub/install_proxy.py
	$(BIN)/jupyterhub -f tools/class_hub/jupyterhub_config.py

lint: setup-dev
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis test-artifacts _build
