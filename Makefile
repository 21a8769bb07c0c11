# Two commands: `make up` and `make test`. Everything installs into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= data

.PHONY: up down test install system-deps java-runtime lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests use (kcat is one of the broker's judges).
system-deps: java-runtime
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; fi; }

# Spark (pyspark, spark-submit) needs a Java 17+ runtime.
java-runtime:
	@command -v java >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; fi; }

up: install java-runtime
	@mkdir -p $(DATA)
	$(BIN)/python -m deploy.up --data-dir $(DATA)

# Stop what `make up` started (from another terminal); Ctrl-C in make up's terminal does the same.
down:
	@test -x $(BIN)/python || { echo "nothing installed, nothing running"; exit 0; }
	$(BIN)/python -m deploy.up --data-dir $(DATA) --down

test: install system-deps
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadgroup

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/broker_throughput.py
	$(BIN)/python benchmarks/client_throughput.py

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .ruff_cache
