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
# make bench: the workload (a name in serving/workloads/ or a path) and measured runs per point (empty: the
# workload's). make capture: the workload whose requests it sends through its window, only where WORKLOAD is given
# (without it a capture only watches). make compare: the bench runs of each side (runs/<host>/<ts> or the ts, comma-separated) and the
# condition allowed to differ between them (e.g. max_num_seqs).
WORKLOAD  ?= default
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
# Exported: the recipes read them from the environment, so that quotes in them reach the CLI as typed.
HYPOTHESIS ?=
PREDICT   ?=
export HYPOTHESIS PREDICT
# make verify: the reference deploy manifest (runs/<host>/<ts>/manifest.json, its directory, or its run id).
# Exported, like HYPOTHESIS: the recipe reads it from the environment, never as part of a shell string.
REF       ?=
export REF
# make diagnose: the capture or bench to diagnose (runs/<host>/<ts>, its capture/ or bench/, or the <ts>); unset,
# HOST's newest. Exported, like REF.
RUN       ?=
export RUN
# pytest selection for `make test-unit`/`make test`, e.g. PYTEST_ARGS='-k manifest'.
PYTEST_ARGS ?=

PYTHON    ?= python3.11
VENV      := .venv
BIN       := $(VENV)/bin
STAMP     := $(VENV)/.installed
export ANSIBLE_CONFIG := $(CURDIR)/ansible/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

# Every playbook runs under serving/bridge/play.py: it names the run (the host lock's holder, the label of its
# containers) and cleans up after a run that ends early (Ctrl-C, a dropped connection). make profile and make
# validate hold the host's lock from their first play to their last (--hold).
PLAYBOOK_ANY = $(BIN)/python -m serving.bridge.play $(if $(filter profile validate,$@),--hold,) $@ -- \
               $(BIN)/ansible-playbook -i $(INVENTORY) --limit $(HOST) \
               $(if $(PROFILE),-e serving_profile=$(PROFILE),) $(ANSIBLE_ARGS)
# make profile sets the profiler per play; every other target plans the profiled engine only with PROFILER=.
PLAYBOOK = $(PLAYBOOK_ANY) $(if $(PROFILER),-e refdeploy_profiler=$(PROFILER),)
CHECK_HOST = $(BIN)/refdeploy check-host --inventory $(INVENTORY) $(HOST)
# make capture / make probe: each step at an observer's CPU weight, so that an engine under load on the same
# host does not starve the controller's work around the window (serving/standalone/observer.py). -S: it needs no
# site-packages, and starts (at the normal weight) in 0.02 s.
OBSERVE = $(BIN)/python -S -m serving.standalone.observer

##@ Serving

.PHONY: deploy
deploy: $(STAMP) ## Deploy the serving stack to HOST (default: this machine, CPU profile); a group rolls, canary first
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/deploy.yml

.PHONY: undeploy
undeploy: $(STAMP) ## Stop and remove the serving containers on HOST (images, models and runs/ stay)
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/undeploy.yml

.PHONY: status
status: $(STAMP) ## Show what runs on HOST and whether it is the plan's container (the spec digest)
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/status.yml

.PHONY: preflight
preflight: $(STAMP) ## Check HOST before a deploy, changing nothing (GPU profiles: class, NUMA plan, RAM budget)
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/preflight.yml

.PHONY: images
images: $(STAMP) ## Build the base and runtime images on HOST (cached by content)
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/images.yml

.PHONY: plan
plan: $(STAMP) ## Print the run's plan for HOST: what is built and started, each rank's CPUs, probe targets
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/plan.yml

.PHONY: verify
verify: $(STAMP) ## Does HOST (or a group) run what REF=<manifest> says? Every difference, must-match or not; reads only
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	  $(BIN)/refdeploy verify-ref --ref "$$REF" --vars-out "$$dir/vars.json" $(if $(PROFILE),,--profile-out "$$dir/profile.json") && \
	  $(CHECK_HOST) && \
	  $(PLAYBOOK) ansible/verify.yml -e "@$$dir/vars.json"

##@ Probes

.PHONY: probe-io
probe-io: $(STAMP) ## fio QD1/QD64 random reads on the data HOST serves from; results in runs/<host>/<ts>/probe-io/
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/probe-io.yml

.PHONY: probe
probe: $(STAMP) ## Run one probe beside vLLM on HOST: PROBE=io|samplers|metrics|stacks|wchan|perf|hoststate|record
	@case "$(PROBE)" in io|samplers|metrics|stacks|wchan|perf|hoststate|record) ;; \
	  "") echo "make probe: set PROBE=io, samplers, metrics, stacks, wchan, perf, hoststate or record" >&2; exit 2;; \
	  *) echo "make probe: PROBE=$(PROBE) is not a probe: choose io, samplers, metrics, stacks, wchan, perf, hoststate or record" >&2; exit 2;; esac
	@case "$(PROBE):$(SECONDS)" in io:*) ;; *:|*:*[!0-9]*|*:0*) echo "make probe: SECONDS=$(SECONDS): give SECONDS=n, the window in whole seconds, 1 or more (default 20)" >&2; exit 2;; esac
	@$(OBSERVE) $(CHECK_HOST)
	$(if $(filter io,$(PROBE)),$(PLAYBOOK) ansible/probe-io.yml,$(OBSERVE) $(PLAYBOOK) ansible/capture.yml -e capture_probe=$(PROBE) -e capture_seconds=$(SECONDS))

.PHONY: capture
capture: $(STAMP) ## One evidence bundle over SECONDS (default 20), sending WORKLOAD's requests if given; timeline.html, trace.json
	@case "$(SECONDS)" in ""|*[!0-9]*|0*) echo "make capture: SECONDS=$(SECONDS): give SECONDS=n, the window in whole seconds, 1 or more (default 20)" >&2; exit 2;; esac
	@$(OBSERVE) $(CHECK_HOST)
	$(OBSERVE) $(PLAYBOOK) ansible/capture.yml -e capture_seconds=$(SECONDS) $(if $(filter command line environment,$(origin WORKLOAD)),-e capture_workload=$(WORKLOAD),)

.PHONY: diagnose
diagnose: $(STAMP) ## The seed's method on a capture or bench: RUN=<run dir or ts> (default HOST's newest); diagnosis.txt
	@$(BIN)/refdeploy diagnose --host "$(HOST)" --run "$$RUN"

.PHONY: profile
profile: $(STAMP) ## The torch profiler on every rank: REQUESTS (default 4) of WORKLOAD (default smoke); KEEP=1 keeps it on
	@case "$(REQUESTS)" in ""|*[!0-9]*|0*) echo "make profile: REQUESTS=$(REQUESTS): give REQUESTS=n, requests under the profiler, 1 or more (default 4)" >&2; exit 2;; esac
	@$(CHECK_HOST)
	$(PLAYBOOK_ANY) ansible/profile.yml -e profiler_workload=$(if $(filter command line environment,$(origin WORKLOAD)),$(WORKLOAD),smoke) -e profiler_requests=$(REQUESTS) $(if $(KEEP),-e refdeploy_profiler_keep=true,)

##@ Benchmarks

.PHONY: bench
bench: $(STAMP) ## vllm bench serve on HOST under fixed conditions: WORKLOAD=default RUNS=n [SEARCH=rate|concurrency: the knee] [VIA=front: through the front door]; report in runs/<host>/<ts>/bench/
	@case "$(VIA)" in *[[:space:]]*) echo "make bench: VIA='$(VIA)': give VIA=front (the front door) or VIA=host:port of a proxy, without spaces" >&2; exit 2;; esac
	@case "$(SEARCH)" in ""|rate|concurrency) ;; *) echo "make bench: SEARCH=$(SEARCH): give SEARCH=rate (arrival rate, no cap) or SEARCH=concurrency" >&2; exit 2;; esac
	@case "$(RUNS)" in *[!0-9]*|0*) echo "make bench: RUNS=$(RUNS): give RUNS=n, measured runs per point, 1 or more (unset: the workload's)" >&2; exit 2;; esac
	@case "$(WORKLOAD)" in ""|*[[:space:]]*) echo "make bench: WORKLOAD='$(WORKLOAD)': give one workload name (serving/workloads/) or one path, without spaces" >&2; exit 2;; esac
	@$(CHECK_HOST)
	$(PLAYBOOK) ansible/bench.yml -e bench_workload=$(WORKLOAD) $(if $(RUNS),-e bench_runs=$(RUNS),) \
	  $(if $(SEARCH),-e bench_search=$(SEARCH),) $(if $(VIA),-e bench_via=$(VIA),)

.PHONY: compare
compare: $(STAMP) ## Compare bench runs A=run[,run] B=run[,run] that differ only in VARIABLE (bootstrap CI); 2x2: C= D= VARIABLE=v1,v2
	@test -n "$(A)" && test -n "$(B)" || { echo "make compare: set A=<run> and B=<run> (runs/<host>/<ts>, or the ts; several: comma-separated)" >&2; exit 2; }
	@case "$(DESIGN)" in ""|restarts) ;; *) echo "make compare: DESIGN=$(DESIGN): give DESIGN=restarts (each side's benches from their own deploys), or leave it unset" >&2; exit 2;; esac
	@$(BIN)/refdeploy compare --a $(A) --b $(B) $(if $(C),--c $(C),) $(if $(D),--d $(D),) \
	  $(if $(VARIABLE),--variable $(VARIABLE),) \
	  $(if $(HYPOTHESIS),--hypothesis "$$HYPOTHESIS",) $(if $(PREDICT),--predict "$$PREDICT",) \
	  $(if $(DESIGN),--design $(DESIGN),) $(if $(LEVEL),--level $(LEVEL),)

.PHONY: validate
validate: $(STAMP) ## Correctness through the server: A=<profile> B=<profile>, A vs B beside A vs A across a restart
	@test -n "$(A)" && test -n "$(B)" || { echo "make validate: set A=<profile> and B=<profile> (names in serving/profiles/ or paths); A is left deployed" >&2; exit 2; }
	@test -z "$(PROFILE)" || { echo "make validate: A and B name the profiles; leave PROFILE unset" >&2; exit 2; }
	@$(CHECK_HOST)
	@$(BIN)/refdeploy validate-check --a "$(A)" --b "$(B)"
	$(eval VALIDATE_ID := $(shell date -u +%Y%m%dT%H%M%SZ)-validate)
	$(PLAYBOOK) ansible/validate.yml -e validate_a=$(A) -e validate_b=$(B) -e validate_run_id=$(VALIDATE_ID)
	@$(BIN)/refdeploy validate-report --id $(VALIDATE_ID)

.PHONY: hypothesis
hypothesis: $(STAMP) ## Write down HYPOTHESIS='...' and PREDICT='tpot_ms down >= 5%' before the runs (for make compare)
	@$(BIN)/refdeploy hypothesis --statement "$$HYPOTHESIS" --predict "$$PREDICT"

##@ Development

.PHONY: venv
venv: $(STAMP) ## Create the project virtualenv (.venv) from requirements.lock

# --require-hashes: every file pip installs must have one of the sha256 sums the lock lists for its pinned version,
# so a changed file on the registry or a mirror stops the install instead of entering the venv. The project itself
# is installed from this checkout, without dependencies (all of them are in the lock).
$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found: apt-get install python3 (Debian 12's is 3.11), or set PYTHON=" >&2; exit 2; }
	@$(PYTHON) -I serving/standalone/prereqs.py venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $@

# uv, pinned, in a throwaway venv: it writes every file's sha256 for each pinned version (all platforms), and keeps the
# pins requirements.lock already has unless an input asks for another version (to move one: pin it in requirements.in,
# or delete its lines from the lock).
UV_VERSION := 0.13.9
.PHONY: lock
# The probe image's pins likewise (images/probes/requirements.in into requirements.txt: bookworm's Python is 3.11 too).
lock: ## Resolve requirements.in and pyproject.toml's dependencies into requirements.lock (and the probe image's), with sha256 hashes
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT \
	  && $(PYTHON) -m venv "$$tmp/venv" && "$$tmp/venv/bin/pip" install --quiet uv==$(UV_VERSION) \
	  && "$$tmp/venv/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
	     --custom-compile-command 'make lock' requirements.in pyproject.toml -o requirements.lock \
	  && cd images/probes && "$$tmp/venv/bin/uv" pip compile --quiet --generate-hashes --python-version 3.11 \
	     --custom-compile-command 'make lock' requirements.in -o requirements.txt

.PHONY: lint
lint: $(STAMP) ## ruff, mypy, yamllint, ansible-lint, hadolint
	$(BIN)/ruff check serving probes images tests ansible/action_plugins ansible/filter_plugins ansible/library ansible/module_utils
	$(BIN)/ruff format --check serving probes images tests ansible/action_plugins ansible/filter_plugins ansible/library ansible/module_utils
	$(BIN)/mypy
	$(BIN)/yamllint --strict .
	cd ansible && ../$(BIN)/ansible-lint --offline --strict
	$(BIN)/hadolint images/*/Dockerfile

.PHONY: test-unit
test-unit: $(STAMP) ## Fast tests only (no Docker, no vLLM)
	@$(BIN)/python -I serving/standalone/prereqs.py unit
	$(BIN)/pytest -m 'not integration' $(PYTEST_ARGS)

.PHONY: test
test: $(STAMP) ## Lint and unit tests (the images build meanwhile), then the integration tests: tests/schedule.py
	@$(BIN)/python -I serving/standalone/prereqs.py test
	@$(BIN)/python tests/schedule.py test

.PHONY: test-integration
test-integration: $(STAMP) ## The images, then the integration tests as make test runs them; PYTEST_ARGS=<path> runs just those
	@$(BIN)/python -I serving/standalone/prereqs.py test
	@$(if $(strip $(PYTEST_ARGS)),$(MAKE) images && $(BIN)/pytest $(PYTEST_ARGS),$(BIN)/python tests/schedule.py integration)

.PHONY: test-diagnose
test-diagnose: $(STAMP) ## make diagnose on faults induced for real on this machine's deployment (~6 min); not in make test
	@$(BIN)/python -I serving/standalone/prereqs.py test
	$(MAKE) images && $(BIN)/pytest tests/integration/test_diagnose_faults.py -s $(PYTEST_ARGS)

.PHONY: test-knee
test-knee: $(STAMP) ## The knee search end to end (~3 min); not in make test while its loads sit on this machine's edge
	@$(BIN)/python -I serving/standalone/prereqs.py test
	$(MAKE) images && $(BIN)/pytest tests/integration/test_knee.py $(PYTEST_ARGS)

.PHONY: test-pp-receive
test-pp-receive: $(STAMP) ## Seed 000 §8's experiment (docs/experiments/pp-receive.sh) on the 3090 class's stand-in (~15 min); not in make test
	@$(BIN)/python -I serving/standalone/prereqs.py test
	$(MAKE) images && REFDEPLOY_PP_RECEIVE=1 $(BIN)/pytest tests/integration/test_gpu_hosts_ssh/test_pp_receive.py -s $(PYTEST_ARGS)

.PHONY: test-cuda-image
test-cuda-image: $(STAMP) ## Build the CUDA runtime image (~4 GB, ~15 min), import vLLM in it, rewrite its record; not in make test
	REFDEPLOY_CUDA_IMAGE=1 $(BIN)/pytest -s tests/integration/test_cuda_image.py

.PHONY: clean
clean: ## Remove the virtualenv and caches (keeps runs/)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"; printf "usage: make <target> [HOST=host] [INVENTORY=dir] [PROFILE=name|path]\n"} \
	  /^##@/ {printf "\n%s\n", substr($$0, 5)} \
	  /^[a-zA-Z_-]+:.*##/ {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
