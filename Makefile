# Two commands: `make up` and `make test`. Everything installs into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The console's front-end packages (npm ci once; its postinstall copies their dist files to web/static/vendor).
NPM_STAMP := web/static/vendor/.installed
DATA ?= data
# apt-get install as root, else through sudo.
APT_INSTALL = if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1); \
  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1); fi

.PHONY: up down test install system-deps java-runtime lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

$(NPM_STAMP): web/frontend/package.json web/frontend/package-lock.json
	npm ci --prefix web/frontend --no-audit --no-fund
	touch $(NPM_STAMP)

install: $(STAMP) $(NPM_STAMP)

# Debian packages the tests use: kcat is one of the broker's judges; chromium runs the console's browser
# tests (Playwright drives /usr/bin/chromium) and fonts-noto-cjk lets it draw the Chinese pages;
# prometheus-alertmanager (/usr/bin/prometheus-alertmanager, /usr/bin/amtool) is the real Alertmanager the
# monitor's alertmanager receiver is tested against (the tests start their own on free ports; the package's
# service, if its postinst started one, is stopped so it does not hold 9093); prometheus and promtool check the
# rules of deploy/prometheus/ and run under `make up PROMETHEUS=1` (its packaged service stopped likewise); faketime's
# libfaketime puts a broker host's clock off in the chaos runs (python -m deploy.chaos).
system-deps: java-runtime
	@command -v kcat >/dev/null 2>&1 || { $(call APT_INSTALL,kcat); }
	@command -v prometheus-alertmanager >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1 || { \
	  $(call APT_INSTALL,prometheus-alertmanager); \
	  { systemctl stop prometheus-alertmanager || service prometheus-alertmanager stop; } >/dev/null 2>&1 || true; }
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  $(call APT_INSTALL,--no-install-recommends prometheus); \
	  { systemctl stop prometheus || service prometheus stop; } >/dev/null 2>&1 || true; }
	@test -x /usr/bin/chromium && fc-list | grep -q "Noto Sans CJK" || { $(call APT_INSTALL,chromium fonts-noto-cjk); }
	@ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || { $(call APT_INSTALL,faketime); }

# Spark (pyspark, spark-submit) needs a Java 17+ runtime.
java-runtime:
	@command -v java >/dev/null 2>&1 || { $(call APT_INSTALL,openjdk-17-jre-headless); }

# `make up CLUSTER=3` (1, 3 or 5): the bus as that many combined broker+controller nodes (deploy/cluster.py)
# instead of the single broker, and the whole solution on it. `make up PROMETHEUS=1`: also Debian's prometheus
# scraping every process (deploy/prometheus/).
up: install java-runtime
	@mkdir -p $(DATA)
	$(BIN)/python -m deploy.up --data-dir $(DATA)$(if $(CLUSTER), --cluster $(CLUSTER))$(if $(PROMETHEUS), --prometheus)$(if $(SPARK), --spark-workers $(SPARK))

# Stop what `make up` started (from another terminal); Ctrl-C in make up's terminal does the same.
down:
	@test -x $(BIN)/python || { echo "nothing installed, nothing running"; exit 0; }
	$(BIN)/python -m deploy.up --data-dir $(DATA) --down

# Three workers on two cores: with two, the processors sat idle a fifth of the run (vmstat every 10 s over a
# whole run: 19 % idle), the tests waiting on their servers, Spark's triggers and the browser.
test: install system-deps
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 3 --dist loadgroup --durations=25

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: install
	$(BIN)/python benchmarks/broker_throughput.py
	$(BIN)/python benchmarks/client_throughput.py

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .ruff_cache web/frontend/node_modules web/static/vendor
