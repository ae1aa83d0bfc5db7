# The front door. Targets are thin: they call the playbooks or the Python CLI.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

HOST      ?= localhost
INVENTORY ?= inventory/local
# Profile override (name in serving/profiles/ or a path); empty: the inventory's serving_profile.
PROFILE   ?=
# Extra arguments for ansible-playbook, e.g. ANSIBLE_ARGS='--check --diff' or '-e var=value'.
ANSIBLE_ARGS ?=
# make capture: seconds of the window. make probe: which probe (io, samplers, metrics, stacks, wchan, perf,
# hoststate, record).
SECONDS   ?= 20
PROBE     ?=
# make bench: the workload (a name in serving/workloads/ or a path; unset: default) and measured runs per point
# (empty: the workload's). make capture: the workload whose requests it sends through its window, only where
# WORKLOAD is given (without it a capture only watches). make profile: unset, smoke. make compare: the bench runs of each side (runs/<host>/<ts> or the ts, comma-separated) and the
# condition allowed to differ between them (e.g. max_num_seqs).
WORKLOAD  ?=
RUNS      ?=
# make bench SEARCH=rate|concurrency: search for the knee (the highest load at which the workload's SLOs hold).
SEARCH    ?=
# make bench VIA=front: the requests go through the deploy's front door (TLS, the key); VIA=host:port through a
# proxy of yours. A condition: make compare VARIABLE=via A=<direct> B=<through it> says what it costs.
VIA       ?=
# make profile: requests under the profiler, and KEEP=1 to leave the engine profiled afterwards. PROFILER=torch
# plans any other target against the profiled engine (a bench of it, a capture of it).
REQUESTS  ?= 4
KEEP      ?=
PROFILER  ?=
A         ?=
B         ?=
# make compare, a 2x2 design: C is A with change 2, D is A with both (VARIABLE=change1,change2).
C         ?=
D         ?=
VARIABLE  ?=
# make compare DESIGN=restarts: each side's benches must come from separate deploys (restart variation).
DESIGN    ?=
# make compare LEVEL=0.99: the confidence of all its intervals together (default 0.95); a rollback may want more.
LEVEL     ?=
# make hypothesis / make compare: what you expect and why, and the prediction ('<figure> up|down [>= n[%]] [at cN]');
# make compare takes a recorded one (HYPOTHESIS=<ts>), or both here (then it was not written before the runs).
HYPOTHESIS ?=
PREDICT   ?=
# make verify: the reference deploy manifest (runs/<host>/<ts>/manifest.json, its directory, or its run id).
REF       ?=
# make diagnose: the capture or bench to diagnose (runs/<host>/<ts>, its capture/ or bench/, or the <ts>); unset,
# HOST's newest.
RUN       ?=
# pytest selection for `make test-unit`/`make test`, e.g. PYTEST_ARGS='-k manifest'.
PYTEST_ARGS ?=
# make lock: where it finds the CPU image's torch==2.13.0+cpu, which the package registry lacks
# (serving/plan/wheelhouse.py); by default the local inventory's wheelhouse (images_wheelhouse_dir). A host that
# reaches PyTorch's CPU index can give a directory holding that version's wheel for each architecture it builds on:
# the lock then lists each one's hash (pip refuses a wheel whose hash it does not list). The CUDA build's lock never
# looks there: its pin torch==2.13.0 matches 2.13.0+cpu too (PEP 440 ignores a local label the pin does not name).
LOCK_WHEELHOUSE ?= /opt/wheels

# What the operator types never becomes a command (issue 46). Each variable above is taken as typed: a value from
# the command line or the environment is a recursive make variable, so VIA='$(shell touch x)' would run at the
# first mention of VIA; `override V := $(value V)` keeps the text and never expands it (override: a command-line
# value outranks the file). Each is exported, and the recipes read it from the environment, quoted ("$$HOST"),
# never as part of a shell string. serving/config/make_vars.py checks each against its pattern before any target
# runs (check-make-vars, the first prerequisite of every target), and serving/bridge/play.py hands those that go
# to ansible-playbook over in an extra-vars file that Ansible does not template.
MAKE_VARS := HOST INVENTORY PROFILE SECONDS PROBE WORKLOAD RUNS SEARCH VIA REQUESTS KEEP PROFILER A B C D VARIABLE \
             DESIGN LEVEL REF RUN HYPOTHESIS PREDICT PYTEST_ARGS LOCK_WHEELHOUSE ANSIBLE_ARGS
$(foreach v,$(MAKE_VARS),$(eval override $(v) := $$(value $(v))))
export $(filter-out SECONDS,$(MAKE_VARS))
# SECONDS is bash's own variable (seconds since the shell started, and counting): it goes as this name instead.
unexport SECONDS
export REFDEPLOY_SECONDS := $(SECONDS)

PYTHON    ?= python3.11
ROOT      := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
VENV      := .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.installed
export ANSIBLE_CONFIG := $(CURDIR)/ansible/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

# Every playbook runs under serving/bridge/play.py: it names the run (the host lock's holder, the label of its
# containers) and cleans up after a run that ends early (Ctrl-C, a dropped connection). make profile and make
# validate hold the host's lock from their first play to their last (--hold).
# $$(call PLAY_ANY,playbook,ansible_var=MAKE_VAR ...): each make variable's value (read from the environment; empty:
# left out) goes to ansible-playbook in play.py's extra-vars file, never on its command line, and ANSIBLE_ARGS is
# split there (shlex) and refused where it sets one of these names.
PLAY_ANY = $(BIN)/python -m serving.bridge.play $(if $(filter profile validate,$@),--hold,) \
           $(foreach p,serving_profile=PROFILE $(2),--var $(p)) --ansible-args "$$ANSIBLE_ARGS" $@ -- \
           $(BIN)/ansible-playbook -i "$$INVENTORY" --limit "$$HOST" $(1)
# make profile sets the profiler per play; every other target plans the profiled engine only with PROFILER=.
PLAY = $(call PLAY_ANY,$(1),refdeploy_profiler=PROFILER $(2))
CHECK_HOST = $(BIN)/refdeploy check-host --inventory "$$INVENTORY" "$$HOST"
# make capture / make probe: each step at an observer's CPU weight, so that an engine under load on the same
# host does not starve the controller's work around the window (serving/standalone/observer.py). -S: it needs no
# site-packages, and starts (at the normal weight) in 0.02 s.
OBSERVE = $(BIN)/python -S -m serving.standalone.observer

##@ Serving

.PHONY: deploy
deploy: check-make-vars $(STAMP) ## Deploy the serving stack to HOST (default: this machine, CPU profile); a group rolls, canary first
	@$(CHECK_HOST)
	$(call PLAY,ansible/deploy.yml)

.PHONY: undeploy
undeploy: check-make-vars $(STAMP) ## Stop and remove the serving containers on HOST (images, models and runs/ stay)
	@$(CHECK_HOST)
	$(call PLAY,ansible/undeploy.yml)

.PHONY: status
status: check-make-vars $(STAMP) ## Show what runs on HOST and whether it is the plan's container (the spec digest)
	@$(CHECK_HOST)
	$(call PLAY,ansible/status.yml)

.PHONY: preflight
preflight: check-make-vars $(STAMP) ## Check HOST before a deploy, changing nothing (GPU profiles: class, NUMA plan, RAM budget)
	@$(CHECK_HOST)
	$(call PLAY,ansible/preflight.yml)

.PHONY: images
images: check-make-vars $(STAMP) ## Build the base and runtime images on HOST (cached by content)
	@$(CHECK_HOST)
	$(call PLAY,ansible/images.yml)

.PHONY: plan
plan: check-make-vars $(STAMP) ## Print the run's plan for HOST: what is built and started, each rank's CPUs, probe targets
	@$(CHECK_HOST)
	$(call PLAY,ansible/plan.yml)

.PHONY: verify
verify: check-make-vars $(STAMP) ## Does HOST (or a group) run what REF=<manifest> says? Every difference, must-match or not; reads only
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	  $(BIN)/refdeploy verify-ref --ref "$$REF" --vars-out "$$dir/vars.yml" $(if $(PROFILE),,--profile-out "$$dir/profile.json") && \
	  $(CHECK_HOST) && \
	  $(call PLAY,ansible/verify.yml) -e "@$$dir/vars.yml"

##@ Probes

.PHONY: probe-io
probe-io: check-make-vars $(STAMP) ## fio QD1/QD64 random reads on the data HOST serves from; results in runs/<host>/<ts>/probe-io/
	@$(CHECK_HOST)
	$(call PLAY,ansible/probe-io.yml)

.PHONY: probe
probe: check-make-vars $(STAMP) ## Run one probe beside vLLM on HOST: PROBE=io|samplers|metrics|stacks|wchan|perf|hoststate|record
	@$(OBSERVE) $(CHECK_HOST)
	$(if $(filter io,$(PROBE)),$(call PLAY,ansible/probe-io.yml),$(OBSERVE) $(call PLAY,ansible/capture.yml,capture_probe=PROBE capture_seconds=REFDEPLOY_SECONDS))

.PHONY: capture
capture: check-make-vars $(STAMP) ## One evidence bundle over SECONDS (default 20), sending WORKLOAD's requests if given; timeline.html, trace.json
	@$(OBSERVE) $(CHECK_HOST)
	$(OBSERVE) $(call PLAY,ansible/capture.yml,capture_seconds=REFDEPLOY_SECONDS capture_workload=WORKLOAD)

.PHONY: diagnose
diagnose: check-make-vars $(STAMP) ## The seed's method on a capture or bench: RUN=<run dir or ts> (default HOST's newest); diagnosis.txt
	@$(BIN)/refdeploy diagnose --host "$$HOST" --run "$$RUN"

.PHONY: profile
profile: check-make-vars $(STAMP) ## The torch profiler on every rank: REQUESTS (default 4) of WORKLOAD (default smoke); KEEP=1 keeps it on
	@$(CHECK_HOST)
	$(if $(WORKLOAD),,WORKLOAD=smoke) \
	  $(call PLAY_ANY,ansible/profile.yml,profiler_workload=WORKLOAD profiler_requests=REQUESTS refdeploy_profiler_keep=KEEP)

##@ Benchmarks

.PHONY: bench
bench: check-make-vars $(STAMP) ## vllm bench serve on HOST under fixed conditions: WORKLOAD=default RUNS=n [SEARCH=rate|concurrency: the knee] [VIA=front: through the front door]; report in runs/<host>/<ts>/bench/
	@$(CHECK_HOST)
	$(if $(WORKLOAD),,WORKLOAD=default) \
	  $(call PLAY,ansible/bench.yml,bench_workload=WORKLOAD bench_runs=RUNS bench_search=SEARCH bench_via=VIA)

.PHONY: compare
compare: check-make-vars $(STAMP) ## Compare bench runs A=run[,run] B=run[,run] that differ only in VARIABLE (bootstrap CI); 2x2: C= D= VARIABLE=v1,v2
	@$(BIN)/refdeploy compare --a "$$A" --b "$$B" $(if $(C),--c "$$C",) $(if $(D),--d "$$D",) \
	  $(if $(VARIABLE),--variable "$$VARIABLE",) \
	  $(if $(HYPOTHESIS),--hypothesis "$$HYPOTHESIS",) $(if $(PREDICT),--predict "$$PREDICT",) \
	  $(if $(DESIGN),--design "$$DESIGN",) $(if $(LEVEL),--level "$$LEVEL",)

.PHONY: validate
validate: check-make-vars $(STAMP) ## Correctness through the server: A=<profile> B=<profile>, A vs B beside A vs A across a restart
	@$(CHECK_HOST)
	@$(BIN)/refdeploy validate-check --a "$$A" --b "$$B"
	$(eval VALIDATE_ID := $(shell date -u +%Y%m%dT%H%M%SZ)-validate)
	VALIDATE_ID=$(VALIDATE_ID) $(call PLAY,ansible/validate.yml,validate_a=A validate_b=B validate_run_id=VALIDATE_ID)
	@$(BIN)/refdeploy validate-report --id $(VALIDATE_ID)

.PHONY: hypothesis
hypothesis: check-make-vars $(STAMP) ## Write down HYPOTHESIS='...' and PREDICT='tpot_ms down >= 5%' before the runs (for make compare)
	@$(BIN)/refdeploy hypothesis --statement "$$HYPOTHESIS" --predict "$$PREDICT"

##@ Development

# The first prerequisite of every target (and the virtualenv's, order-only, so that it also comes first under -j):
# the operator's variables checked before anything runs, one line and exit 2 for a bad one (serving/config/make_vars.py,
# standard library only, on the system Python: it runs before the virtualenv exists).
.PHONY: check-make-vars
check-make-vars:
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found: apt-get install python3 (Debian 12's is 3.11), or set PYTHON=" >&2; exit 2; }
	@$(PYTHON) -I -S "$(ROOT)/serving/config/make_vars.py" $(or $(MAKECMDGOALS),$(.DEFAULT_GOAL))

.PHONY: venv
venv: check-make-vars $(STAMP) ## Create the project virtualenv (.venv) from requirements.lock

# --require-hashes: every file pip installs must have one of the sha256 sums the lock lists for its pinned version,
# so a changed file on the registry or a mirror stops the install instead of entering the venv. The project itself
# is installed from this checkout, without dependencies (all of them are in the lock).
$(STAMP): requirements.lock pyproject.toml | check-make-vars
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found: apt-get install python3 (Debian 12's is 3.11), or set PYTHON=" >&2; exit 2; }
	@$(PYTHON) -I serving/standalone/prereqs.py venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $@

# uv, pinned by its wheels' sha256 (lock-tools.txt), in a throwaway venv: it writes every file's sha256 for each pinned
# version (all platforms), and keeps the pins requirements.lock already has unless an input asks for another version
# (to move one: pin it in requirements.in, or delete its lines from the lock).
.PHONY: lock
# The probe image's pins likewise (images/probes/requirements.in into requirements.txt: bookworm's Python is 3.11 too).
lock: check-make-vars ## Resolve requirements.in and pyproject.toml's dependencies into requirements.lock (and the probe image's, and the vLLM image's pins), with sha256 hashes
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT \
	  && $(PYTHON) -m venv "$$tmp/venv" && "$$tmp/venv/bin/pip" install --quiet --require-hashes --only-binary :all: -r lock-tools.txt \
	  && "$$tmp/venv/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
	     --custom-compile-command 'make lock' requirements.in pyproject.toml -o requirements.lock \
	  && for c in images/vllm/constraints/*.txt; do \
	       set --; case "$$c" in *.hashes.txt) continue ;; */vllm-cpu-*) [ ! -d "$$LOCK_WHEELHOUSE" ] || set -- --find-links "$$LOCK_WHEELHOUSE" ;; esac; \
	       "$$tmp/venv/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
	         --python-platform x86_64-manylinux_2_28 "$$@" \
	         --custom-compile-command 'make lock' "$$c" -o "$${c%.txt}.hashes.txt" || exit 1; \
	     done \
	  && cd images/probes && "$$tmp/venv/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
	     --custom-compile-command 'make lock' requirements.in -o requirements.txt

.PHONY: lint
lint: check-make-vars $(STAMP) ## ruff, mypy, yamllint, ansible-lint, hadolint
	$(BIN)/ruff check serving probes images tests ansible/action_plugins ansible/filter_plugins ansible/library ansible/module_utils
	$(BIN)/ruff format --check serving probes images tests ansible/action_plugins ansible/filter_plugins ansible/library ansible/module_utils
	$(BIN)/mypy
	$(BIN)/yamllint --strict .
	cd ansible && ../$(BIN)/ansible-lint --offline --strict
	$(BIN)/hadolint images/*/Dockerfile

.PHONY: test-unit
test-unit: check-make-vars $(STAMP) ## Fast tests only (no Docker, no vLLM)
	@$(BIN)/python -I serving/standalone/prereqs.py unit
	PYTEST_ADDOPTS="$$PYTEST_ARGS" $(BIN)/pytest -m 'not integration'

.PHONY: test
test: check-make-vars $(STAMP) ## Lint and unit tests (the images build meanwhile), then the integration tests: tests/schedule.py
	@$(BIN)/python -I serving/standalone/prereqs.py test
	@$(BIN)/python tests/schedule.py test

.PHONY: test-integration
test-integration: check-make-vars $(STAMP) ## The images, then the integration tests as make test runs them; PYTEST_ARGS=<path> runs just those
	@$(BIN)/python -I serving/standalone/prereqs.py test
	@$(if $(strip $(PYTEST_ARGS)),$(MAKE) images && PYTEST_ADDOPTS="$$PYTEST_ARGS" $(BIN)/pytest,$(BIN)/python tests/schedule.py integration)

.PHONY: test-diagnose
test-diagnose: check-make-vars $(STAMP) ## make diagnose on faults induced for real on this machine's deployment (~5 min; make test runs it too)
	@$(BIN)/python -I serving/standalone/prereqs.py test
	$(MAKE) images && PYTEST_ADDOPTS="$$PYTEST_ARGS" $(BIN)/pytest tests/integration/test_diagnose_faults.py -s

.PHONY: test-knee
test-knee: check-make-vars $(STAMP) ## The knee search end to end (~3 min); not in make test while the client's rate limit on 2 CPUs fails it by chance
	@$(BIN)/python -I serving/standalone/prereqs.py test
	$(MAKE) images && PYTEST_ADDOPTS="$$PYTEST_ARGS" $(BIN)/pytest tests/integration/test_knee.py

.PHONY: test-pp-receive
test-pp-receive: check-make-vars $(STAMP) ## Seed 000 §8's experiment (docs/experiments/pp-receive.sh) on the 3090 class's stand-in (~15 min); not in make test
	@$(BIN)/python -I serving/standalone/prereqs.py test
	$(MAKE) images && REFDEPLOY_PP_RECEIVE=1 PYTEST_ADDOPTS="$$PYTEST_ARGS" $(BIN)/pytest tests/integration/test_gpu_hosts_ssh/test_pp_receive.py -s

.PHONY: test-cuda-image
test-cuda-image: check-make-vars $(STAMP) ## Build the CUDA runtime image (~4 GB, ~15 min), import vLLM in it, rewrite its record; not in make test
	REFDEPLOY_CUDA_IMAGE=1 $(BIN)/pytest -s tests/integration/test_cuda_image.py

.PHONY: clean
clean: check-make-vars ## Remove the virtualenv and caches (keeps runs/)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

.PHONY: help
help: check-make-vars ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "usage: make <target> [HOST=host] [INVENTORY=dir] [PROFILE=name|path]\n"} \
	  /^##@/ {printf "\n%s\n", substr($$0, 5)} \
	  /^[a-zA-Z_-]+:.*##/ {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
