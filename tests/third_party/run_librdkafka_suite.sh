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
#   SECURITY            plaintext (default) or sasl_ssl: librdkafka's test.conf then connects over SASL_SSL with
#                       the CA of a PKI made for the run (deploy/pki.py), as the user testuser
#   SASL_MECHANISM      the mechanism test.conf names in sasl_ssl mode: SCRAM-SHA-256 (default), SCRAM-SHA-512
#                       or PLAIN (the broker enables all three)
#   AUTHORIZER          1: the broker runs the StandardAuthorizer (0081's ACL sub-tests need it; default 1 in
#                       sasl_ssl mode, 0 in plaintext mode), with allow.everyone.if.no.acl.found=true as
#                       librdkafka's own test clusters (trivup) have it
#   SUPER_USERS         super.users with the authorizer (default User:ANONYMOUS in sasl_ssl mode, where only the
#                       broker's own PLAINTEXT and CONTROLLER listeners are anonymous; User:admin, nobody, in
#                       plaintext mode). The test user must not be one: 0081 checks the operations an ACL grants it
#   REAUTH_MS           the broker's connections.max.reauth.ms in sasl_ssl mode (default 0: no re-authentication;
#                       0142_reauthentication skips itself unless it is set, librdkafka's CI uses 10000)
#   TEST_TIMEOUT_MULTIPLIER  test.timeout.multiplier in test.conf (default: not written, librdkafka's 1; trivup
#                       writes 2, and 0081 needs it to finish its 180 s budget per client type under load)
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

# A fresh broker on free ports with the overrides the project's tests use (deploy/processes/broker.py),
# and num.partitions=4 as librdkafka's own test clusters (trivup) have it: several tests produce to
# partitions 0-3 of an auto-created topic. group.initial.rebalance.delay.ms stays at Kafka's default (3 s;
# the project's tests use 0): 0089 expects two consumers started together to form the first generation
# together, and with no delay the first one forms it alone and reads before the second joins.
SECURITY="${SECURITY:-plaintext}"
case "$SECURITY" in
    plaintext) AUTHORIZER="${AUTHORIZER:-0}"; SUPER_USERS="${SUPER_USERS:-User:admin}" ;;
    sasl_ssl) AUTHORIZER="${AUTHORIZER:-1}"; SUPER_USERS="${SUPER_USERS:-User:ANONYMOUS}" ;;
    *) echo "SECURITY must be plaintext or sasl_ssl, not $SECURITY" >&2; exit 2 ;;
esac
SASL_MECHANISM="${SASL_MECHANISM:-SCRAM-SHA-256}"
free_port() { (cd "$ROOT" && "$PY" -c 'from contracts.ports import free_port; print(free_port())'); }
PORT="$(free_port)"
CONTROLLER_PORT="$(free_port)"
DATA="$WORKDIR/broker-data"
rm -rf "$DATA"
PROPERTIES="$WORKDIR/server.properties"
# The broker's settings, one per line (written to server.properties in sasl_ssl mode, passed as --override
# otherwise, as before).
settings=(
    "controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT"
    "log.dirs=$DATA"
    "group.initial.rebalance.delay.ms=${GROUP_INITIAL_REBALANCE_DELAY_MS:-3000}"
    "offsets.topic.replication.factor=1"
    "transaction.state.log.replication.factor=1"
    "transaction.state.log.min.isr=1"
    "num.partitions=4"
)
if [ "$AUTHORIZER" = 1 ]; then
    # As trivup's brokers (librdkafka's test clusters): the StandardAuthorizer, open to everyone on resources no ACL
    # names (allow.everyone.if.no.acl.found=true), super users other than the test user.
    settings+=(
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        "allow.everyone.if.no.acl.found=true"
        "super.users=$SUPER_USERS"
    )
fi

if [ "$SECURITY" = sasl_ssl ]; then
    # Clients (librdkafka) on SASL_SSL only; the PLAINTEXT listener (inter-broker, as in
    # tests/support/secure_broker.py) and CONTROLLER are the broker's own, on 127.0.0.1, never in test.conf.
    SASL_PORT="$(free_port)"
    PKI="$WORKDIR/pki"
    rm -rf "$PKI"
    mkdir -p "$PKI"
    (cd "$ROOT" && "$PY" -c '
import sys
from pathlib import Path
from cryptography.x509.oid import NameOID
from deploy.pki import Authority, name
pki = Path(sys.argv[1])
ca = Authority.create("librdkafka-suite CA")
ca.write_certificate(pki / "ca.pem")
ca.issue(name((NameOID.COMMON_NAME, "broker")), server=True).write_keystore(pki / "broker.pem")
' "$PKI")
    SCRAM_JAAS="org.apache.kafka.common.security.scram.ScramLoginModule required;"
    # The test user's password: made for this run, never kept in the repository.
    SASL_PASSWORD="$(head -c 18 /dev/urandom | base64 | tr -d '/+=')"
    settings=(
        "listeners=PLAINTEXT://127.0.0.1:$PORT,SASL_SSL://127.0.0.1:$SASL_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT"
        "${settings[@]}"
        "ssl.keystore.type=PEM"
        "ssl.keystore.location=$PKI/broker.pem"
        "ssl.truststore.type=PEM"
        "ssl.truststore.location=$PKI/ca.pem"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_testuser=\"$SASL_PASSWORD\";"
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$SCRAM_JAAS"
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$SCRAM_JAAS"
        "connections.max.reauth.ms=${REAUTH_MS:-0}"
    )
    # The file holds PLAIN's password: readable by its owner only. SCRAM's users are made before the first start
    # as an operator makes them (kafka-storage format --add-scram).
    (umask 077 && printf '%s\n' "${settings[@]}" > "$PROPERTIES")
    "$ROOT/.venv/bin/bus" storage format --config "$PROPERTIES" \
        --cluster-id "$("$ROOT/.venv/bin/bus" storage random-uuid)" \
        --add-scram "SCRAM-SHA-256=[name=testuser,password=$SASL_PASSWORD]" \
        --add-scram "SCRAM-SHA-512=[name=testuser,password=$SASL_PASSWORD]" > "$WORKDIR/format.log" 2>&1 \
        || { cat "$WORKDIR/format.log" >&2; exit 1; }
    "$ROOT/.venv/bin/bus" broker "$PROPERTIES" > "$WORKDIR/broker.log" 2>&1 &
    CLIENT_PORT="$SASL_PORT"
else
    overrides=(--override "listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT")
    for setting in "${settings[@]}"; do
        overrides+=(--override "$setting")
    done
    "$ROOT/.venv/bin/bus" broker "${overrides[@]}" > "$WORKDIR/broker.log" 2>&1 &
    CLIENT_PORT="$PORT"
fi
BROKER_PID=$!
trap 'kill "$BROKER_PID" 2>/dev/null; wait "$BROKER_PID" 2>/dev/null || true' EXIT
(cd "$ROOT" && "$PY" -c "from contracts.ports import wait_for_port; wait_for_port($CLIENT_PORT, 30)")
echo "broker pid $BROKER_PID on 127.0.0.1:$CLIENT_PORT ($SECURITY, authorizer $AUTHORIZER; log: $WORKDIR/broker.log)"

cd "$SRC/tests"
# librdkafka's test.conf (tests/test.conf.example); in sasl_ssl mode the keys trivup's LibrdkafkaTestApp writes
# for a SASL_SSL cluster, without the client certificate (the broker does not ask for one).
{
    echo "bootstrap.servers=127.0.0.1:$CLIENT_PORT"
    if [ "$SECURITY" = sasl_ssl ]; then
        echo "security.protocol=SASL_SSL"
        echo "sasl.mechanisms=$SASL_MECHANISM"
        echo "sasl.username=testuser"
        echo "sasl.password=$SASL_PASSWORD"
        echo "ssl.ca.location=$PKI/ca.pem"
    fi
    if [ -n "${TEST_TIMEOUT_MULTIPLIER:-}" ]; then
        echo "test.timeout.multiplier=$TEST_TIMEOUT_MULTIPLIER"
    fi
} > test.conf
rm -f test_report_*.json
set +e
# shellcheck disable=SC2086  # RUNNER_ARGS is a list of options
TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-4.0.0}" LD_LIBRARY_PATH="../src:../src-cpp" \
    ./test-runner ${RUNNER_ARGS:--L -E} -p"${PARALLEL:-1}" -r 2>&1 | tee "$WORKDIR/suite.log"
status=${PIPESTATUS[0]}
set -e
echo "full output: $WORKDIR/suite.log; per-test report: $(ls "$SRC"/tests/test_report_*.json 2>/dev/null || true)"
exit "$status"
