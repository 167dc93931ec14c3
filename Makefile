# The front door. Every target installs what it needs (scripts/setup.sh is idempotent and quick when done).
SHELL := /bin/bash
PY    := .venv/bin/python
ENV   ?=
ENV_FLAG := $(if $(ENV),--env $(ENV))

.DEFAULT_GOAL := help
.PHONY: help up down setup setup-base render check-rendered diff validate schemas bump-image lint train tune bench-train bench-tune test-training image setup-image chart-schemas values test test-fast bench-render clean e2e e2e-build e2e-up e2e-down setup-e2e bootstrap status fleet logs diagnose audit retry watch bench-cluster scan

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 18

setup: ## .venv with every pinned dependency (render, tests, training) and helm in .tools/bin
	@scripts/setup.sh all

setup-base: ## .venv with what rendering needs, and helm
	@scripts/setup.sh base

render: setup-base ## render environments into apps/ (ENV=eks for one; default all)
	@$(PY) -m generator render $(ENV_FLAG)

check-rendered: setup-base ## fail (with the diff) when apps/ differs from a fresh render
	@$(PY) -m generator check-rendered $(ENV_FLAG)

diff: setup-base ## the rendered diff between BASE (default origin/main) and the working tree (FORMAT=markdown|text, MAX_CHARS=N)
	@$(PY) -m generator diff --base $(or $(BASE),origin/main) $(if $(FORMAT),--format $(FORMAT)) $(if $(MAX_CHARS),--max-chars $(MAX_CHARS))

validate: setup-base ## helm lint, schema validation (SCHEMAS=dir of CRDs, or dir1:dir2 searched in order; Kueue's also from Go's module cache) and policy checks of every environment
	@$(PY) -m validation validate $(ENV_FLAG) $(if $(SCHEMAS),--schema-location $(SCHEMAS))

schemas: setup-base ## download the pinned upstream CRDs into .cache/schemas (needs network)
	@$(PY) -m validation fetch-schemas

bump-image: setup-base ## set the training image tag (TAG=0.2.0 keeps -cpu/-gpu/-efa) in every environment file (ENV= one, DIGEST=sha256:... with it), re-render
	@test -n "$(TAG)" || { echo "usage: make bump-image TAG=0.2.0"; exit 2; }
	@$(PY) -m generator bump-image --tag $(TAG) $(ENV_FLAG) $(if $(DIGEST),--digest $(DIGEST))

lint: setup-base ## helm lint --strict every chart with every environment's values
	@$(PY) -m validation lint $(ENV_FLAG)

chart-schemas: setup-base ## compose each chart's values.schema.json from charts/training-lib/cluster.schema.yaml, and write each chart's README.md
	@$(PY) -m generator chart-schemas

values: setup-base ## print an environment's composed values (ENV=..., APP=... for one app's chart values)
	@$(PY) -m generator values --env $(or $(ENV),minikube) $(if $(APP),--app $(APP))

test: setup ## ruff check (pyproject.toml's rules), then the whole test suite
	@$(PY) -m ruff check .
	@$(PY) -m pytest

# The fast lane's scratch files (each test's copy of the repository, its renders, git repositories) go to memory when
# TMPDIR is not set and /dev/shm has 1 GiB free: on this machine's disk a copy of the inputs took 150 ms, in memory
# 10 ms. A passing test's folder is removed when it ends (pyproject.toml: tmp_path_retention_policy).
FAST_TMPDIR := $(or $(TMPDIR),$(shell df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 && $$4 >= 1048576 {print "/dev/shm"}'))

test-fast: setup ## the tests that start no Ray and build nothing from Go (the lanes: tests/conftest.py), for a quick loop, one process per core (pytest-xdist), scratch files in memory
	@$(PY) -m ruff check .
	@$(if $(FAST_TMPDIR),TMPDIR=$(FAST_TMPDIR)) $(PY) -m pytest -q -n auto -m "not e2e and not ray and not go"

train: setup ## run a training job spec, locally or against RAY_ADDRESS (SPEC=..., OUTPUT=..., NAME=...)
	@$(PY) -m training run $(or $(SPEC),training/examples/digits-torch.yaml) $(if $(OUTPUT),--output $(OUTPUT)) $(if $(NAME),--name $(NAME))

tune: setup ## hyperparameter search (SPEC=training/examples/tune-digits-asha.yaml, RESUME=1 to resume, SAMPLES=N)
	@$(PY) -m training run $(or $(SPEC),training/examples/tune-digits-asha.yaml) $(if $(RESUME),--resume) $(if $(SAMPLES),--num-samples $(SAMPLES))

bench-train: setup ## plain PyTorch/TensorFlow vs Ray Train 1 and 2 workers, cold and warm Ray: JSON, table, plot in results/bench-train
	@$(PY) -m training.bench.train $(BENCH_ARGS)

bench-tune: setup ## ASHA vs FIFO at the same numSamples: JSON, table, plot in results/bench-tune
	@$(PY) -m training.bench.tune $(BENCH_ARGS)

test-training: setup ## only the training package tests (real Ray training, about 3 min on 2 cores)
	@$(PY) -m pytest tests/training -q

IMAGE_FLAGS = $(if $(ENV),--env $(ENV)) $(if $(VARIANT),--variant $(VARIANT)) $(if $(IMAGE),--image $(IMAGE)) $(if $(TAG),--tag $(TAG)) $(if $(BUILDER),--builder $(BUILDER))

image: setup-base setup-image ## build the training image as ENV (default minikube) names it: Docker if there is an engine, else buildah on a Debian base (VARIANT=cpu|gpu|efa, IMAGE=, TAG=); checks it and prints its size
	@$(PY) -m images build $(IMAGE_FLAGS)

setup-image: ## what make image needs without Docker: Debian's buildah and mmdebstrap
	@scripts/setup.sh image

setup-e2e: ## what the e2e cluster needs besides .venv: Go, Debian's redis-server, unshare
	@scripts/setup.sh e2e

e2e-build: setup-e2e ## build the e2e cluster's components from their Go modules at pinned versions (cached)
	@$(PY) -m e2e build

e2e-up: setup-e2e image ## start the e2e cluster in the background (idempotent) and print its kubeconfig
	@$(PY) -m e2e up

up: setup setup-e2e image ## this machine as a cluster: a real node (kubelet, containerd), Argo CD bootstrapped from this repository, minikube running for real; prints where to look
	@$(PY) -m e2e try

down: e2e-down ## stop what make up started (every process, the node's containers, links and rules)

e2e-down: ## stop the e2e cluster (idempotent; nothing left running)
	@if [ -x $(PY) ]; then $(PY) -m e2e down; fi

e2e: setup-base setup-e2e image ## the e2e scenarios on a fresh e2e cluster, torn down after (E2E_KEEP=1 keeps it; ARGS=-k ...)
	@$(PY) -m e2e run -- $(ARGS)

# Day two (python -m ops): against the clusters the environments name (target.context; KUBECONFIG as kubectl reads it).
OPS := $(PY) -m ops
NEED_JOB = @test -n "$(JOB)" || { echo "usage: make $@ JOB=<job> [ENV=<environment>]"; exit 2; }

bootstrap: setup-base ## first deploy of ENV: check Argo CD, apply argocd/root.yaml, wait until Synced and Healthy
	@$(OPS) bootstrap $(ENV_FLAG) $(if $(TIMEOUT),--timeout $(TIMEOUT))

status: setup-base ## apps, Ray clusters, jobs, checkpoint claim per environment (ENV=, JOB=, JSON=1)
	@$(OPS) status $(ENV_FLAG) $(if $(JOB),--job $(JOB)) $(if $(JSON),--json)

fleet: setup-base ## every cluster of ENV (default all) side by side, and the drift between them with each fix (JSON=1)
	@$(OPS) fleet $(ENV_FLAG) $(if $(JSON),--json)

logs: setup-base ## a job's output by pod (JOB=..., ENV=..., FOLLOW=1 to follow to the end, TAIL=N)
	$(NEED_JOB)
	@$(OPS) logs $(ENV_FLAG) --job $(JOB) $(if $(FOLLOW),--follow) $(if $(TAIL),--tail $(TAIL))

diagnose: setup-base ## classify a failed or stuck job: evidence line and the value that fixes it (JOB=..., JSON=1)
	$(NEED_JOB)
	@$(OPS) diagnose $(ENV_FLAG) --job $(JOB) $(if $(JSON),--json)

audit: setup-base ## who changed JOB and what it did: its commits, Argo CD's syncs (who, revision, when), its runs and pods (ENV=; AUDIT_LOG="the API server's audit log files")
	$(NEED_JOB)
	@$(OPS) audit $(ENV_FLAG) --job $(JOB) $(foreach f,$(AUDIT_LOG),--audit-log $(f))

retry: setup-base ## new run of JOB through git: bump its run counter, render, commit (PUSH=1 pushes; REASON=...)
	$(NEED_JOB)
	@$(OPS) retry $(ENV_FLAG) --job $(JOB) $(if $(PUSH),--push) $(if $(REASON),--reason "$(REASON)")

watch: setup-base ## follow JOB to its end; AUTO_RETRY=N retries retryable failures through git (at most N)
	$(NEED_JOB)
	@$(OPS) watch $(ENV_FLAG) --job $(JOB) $(if $(AUTO_RETRY),--auto-retry $(AUTO_RETRY))

bench-cluster: setup-base ## seed 002 on ENV's cluster: baseline and Ray Train as jobs through git; report in results/bench-cluster (BENCH_ARGS=--tiny ...)
	@$(OPS) bench-cluster --env $(or $(ENV),minikube) $(BENCH_ARGS)

scan: ## checkov on the pods running in ENV's namespace (all environments by default): scan: P passed, F failed, A accepted
	@scripts/setup.sh scan
	@$(OPS) scan $(ENV_FLAG)

bench-render: setup-base ## time rendering: helm vs generator overhead, and 200 jobs x 4 environments
	@$(PY) -m generator.bench

clean: ## remove .venv, .tools and caches
	rm -rf .venv .tools .pytest_cache .cache
