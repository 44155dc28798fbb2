# suanli: `make run` runs the platform demo (server, agents, CLI logged in), `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TRACES ?= ../shared/traces
ALIBABA := $(TRACES)/alibaba-gpu-2023
ITP := $(TRACES)/microsoft-itp-elasticflow

.PHONY: run test bench lint clean

$(BIN)/suanli: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(BIN)/suanli

run: $(BIN)/suanli
	$(BIN)/suanli demo

lint: $(BIN)/suanli
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

bench: $(BIN)/suanli
	mkdir -p bench-results
	$(BIN)/suanli sim packing --nodes $(ALIBABA)/openb_node_list_gpu_node.csv \
	  --pods $(ALIBABA)/openb_pod_list_default.csv --policy all --seeds 42-51 \
	  --json bench-results/packing.json
	$(BIN)/python -m suanli.sim.throughput --json bench-results/throughput.json
	$(BIN)/python -m suanli.sim.queue_bench --jobs 100000 --gpus 10000 --json bench-results/queue.json
	$(BIN)/suanli sim itp-check --traces $(ITP) --json bench-results/itp.json
	$(BIN)/python -m suanli.api.bench --json bench-results/server.json
	$(BIN)/python -m suanli.api.meter_bench --rentals 100000 --json bench-results/meter.json
	$(BIN)/python -m suanli.api.log_bench --json bench-results/logs.json
	$(BIN)/python -m suanli.api.payouts_bench --json bench-results/payouts.json

clean:
	rm -rf $(VENV) bench-results .pytest_cache .ruff_cache
