#!/usr/bin/env bash
# THE test command of segmirror (README and CI call it): installs the test dependencies (Kafka jars, kcat, Python
# clients), then runs every test of the workspace, including the ones that start real Kafka brokers.
# The harness finds the other Kafka versions (tests/kafka/kafka-compat.versions) next to SEGMIRROR_KAFKA_HOME.
# Extra arguments go to `cargo test`, e.g. `scripts/test-all.sh -p segmirror-tests --test kafka_harness`.
#
# Debug profile: the workspace compiles much faster than with --release on a 2-core machine and the tests are
# dominated by JVM start-up, not by our code's speed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash "$ROOT/scripts/install-test-deps.sh"

KAFKA_VERSION="$(tr -d '[:space:]' < "$ROOT/tests/kafka/kafka.version")"
export SEGMIRROR_KAFKA_HOME="$ROOT/.cache/kafka/$KAFKA_VERSION"

if [ "$#" -eq 0 ]; then
    set -- --workspace
fi
exec cargo test --no-fail-fast "$@"
