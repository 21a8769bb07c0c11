#!/usr/bin/env bash
# Run librdkafka's own integration test suite (its tests/ directory) against our broker.
#
# Usage: tests/third_party/run_librdkafka_suite.sh [SOURCE] [WORKDIR]
#   SOURCE   git URL or local git directory of librdkafka
#            (default https://github.com/confluentinc/librdkafka.git)
#   WORKDIR  where librdkafka is cloned and built, outside this project (default /tmp/librdkafka-suite)
# Environment:
#   LIBRDKAFKA_REF      commit, tag or branch to check out (default: the source's default branch)
#   TESTS               librdkafka's own test filter, e.g. TESTS=0011 (default: every test)
#   TEST_KAFKA_VERSION  the Kafka version the tests assume of the broker (default 4.0.0, the protocol
#                       generation this broker serves: no message format v0/v1, no message.format.version)
#   PARALLEL            tests run at once by test-runner (default 1)
#   RUNNER_ARGS         extra test-runner arguments (default "-L -E": broker tests only, no sockem)
#   GROUP_INITIAL_REBALANCE_DELAY_MS  the broker's group.initial.rebalance.delay.ms (default 3000, Kafka's)
#
# Not part of `make test`: it needs the network (or a local clone) and builds C code for minutes.
# See tests/third_party/librdkafka/README.md for what passes and what does not.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
SOURCE="${1:-https://github.com/confluentinc/librdkafka.git}"
WORKDIR="${2:-/tmp/librdkafka-suite}"
SRC="$WORKDIR/librdkafka"
PY="$ROOT/.venv/bin/python"

mkdir -p "$WORKDIR"
if [ ! -d "$SRC/.git" ]; then
    git clone --quiet "$SOURCE" "$SRC"
fi
if [ -n "${LIBRDKAFKA_REF:-}" ]; then
    git -C "$SRC" checkout --quiet "$LIBRDKAFKA_REF"
fi
echo "librdkafka $(git -C "$SRC" describe --tags --always)"

if [ ! -x "$SRC/tests/test-runner" ]; then
    (
        cd "$SRC"
        # No optional dependencies that would be downloaded; zlib and OpenSSL come from the system.
        nice ./configure --disable-gssapi --disable-zstd --disable-lz4-ext > "$WORKDIR/configure.log"
        nice make -j"$(nproc)" -C src > "$WORKDIR/build.log"
        nice make -j"$(nproc)" -C src-cpp >> "$WORKDIR/build.log"
        nice make -j"$(nproc)" -C tests build >> "$WORKDIR/build.log"
    )
fi

# A fresh broker on free ports with the overrides the project's tests use (tests/support/broker_process.py),
# and num.partitions=4 as librdkafka's own test clusters (trivup) have it: several tests produce to
# partitions 0-3 of an auto-created topic. group.initial.rebalance.delay.ms stays at Kafka's default (3 s;
# the project's tests use 0): 0089 expects two consumers started together to form the first generation
# together, and with no delay the first one forms it alone and reads before the second joins.
PORT="$(cd "$ROOT" && "$PY" -c 'from tests.support.ports import free_port; print(free_port())')"
CONTROLLER_PORT="$(cd "$ROOT" && "$PY" -c 'from tests.support.ports import free_port; print(free_port())')"
DATA="$WORKDIR/broker-data"
rm -rf "$DATA"
"$ROOT/.venv/bin/bus" broker \
    --override "listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT" \
    --override "controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT" \
    --override "log.dirs=$DATA" \
    --override "group.initial.rebalance.delay.ms=${GROUP_INITIAL_REBALANCE_DELAY_MS:-3000}" \
    --override "offsets.topic.replication.factor=1" \
    --override "transaction.state.log.replication.factor=1" \
    --override "transaction.state.log.min.isr=1" \
    --override "num.partitions=4" \
    > "$WORKDIR/broker.log" 2>&1 &
BROKER_PID=$!
trap 'kill "$BROKER_PID" 2>/dev/null; wait "$BROKER_PID" 2>/dev/null || true' EXIT
(cd "$ROOT" && "$PY" -c "from tests.support.ports import wait_for_port; wait_for_port($PORT, 30)")
echo "broker pid $BROKER_PID on 127.0.0.1:$PORT (log: $WORKDIR/broker.log)"

cd "$SRC/tests"
cat > test.conf <<EOF
bootstrap.servers=127.0.0.1:$PORT
EOF
rm -f test_report_*.json
set +e
# shellcheck disable=SC2086  # RUNNER_ARGS is a list of options
TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-4.0.0}" LD_LIBRARY_PATH="../src:../src-cpp" \
    ./test-runner ${RUNNER_ARGS:--L -E} -p"${PARALLEL:-1}" -r 2>&1 | tee "$WORKDIR/suite.log"
status=${PIPESTATUS[0]}
set -e
echo "full output: $WORKDIR/suite.log; per-test report: $(ls "$SRC"/tests/test_report_*.json 2>/dev/null || true)"
exit "$status"
