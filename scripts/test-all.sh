#!/usr/bin/env bash
# THE test command of segmirror (README and CI call it): installs the test dependencies (Kafka jars, kcat, Python
# clients), then runs every test of the workspace, including the ones that start real Kafka brokers.
# The harness finds the other Kafka versions (tests/kafka/kafka-compat.versions) next to SEGMIRROR_KAFKA_HOME.
# Extra arguments go to one plain `cargo test`, e.g. `scripts/test-all.sh -p segmirror-tests --test kafka_harness`.
#
# Debug profile: the workspace compiles much faster than with --release on a 2-core machine and the tests are
# dominated by JVM start-up, not by our code's speed.
#
# The whole suite (no arguments) is built once and then run as jobs in SEGMIRROR_TEST_JOBS lanes (default 2):
# one job per real-broker test file of tests/tests, one for every other crate of the workspace. Why: `cargo test`
# runs its test binaries one after the other, and a real-broker test spends most of its time waiting for JVMs,
# clients and settling directories (a binary of them keeps about one core busy), so one lane leaves the machine
# half idle and the suite grew past CI's budget. Jobs start longest first (SLOW_FIRST, from the timings this
# script prints at the end) so that the lanes end together. Each job's output is printed whole when it ends;
# the summary table names every job's time and result, and the exit code is 1 if any job failed.
# A job still running after SEGMIRROR_TEST_JOB_TIMEOUT seconds (default 1500; the slowest takes about 400) fails
# with 124: its cargo is stopped and the lane goes on, so a test that hangs costs that long, not the whole CI
# budget, and the other jobs still report. (`--foreground`, so that Ctrl-C still reaches the tests; the hung test
# binary itself is left to whoever ends the run.)
# Tests of different jobs run in different processes: a test that needs a port claims a free one below the
# kernel's ephemeral range (tests/src/ports.rs), never a fixed one, and keeps its files in its own temporary directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash "$ROOT/scripts/install-test-deps.sh"

KAFKA_VERSION="$(tr -d '[:space:]' < "$ROOT/tests/kafka/kafka.version")"
export SEGMIRROR_KAFKA_HOME="$ROOT/.cache/kafka/$KAFKA_VERSION"

if [ "$#" -ne 0 ]; then
    exec cargo test --no-fail-fast "$@"
fi

LANES="${SEGMIRROR_TEST_JOBS:-2}"
# The slowest jobs, slowest first: seconds of the last full run in 2 lanes (2026-12-02, 16:15 UTC, load ~5; the
# summary prints them), for orientation. `workspace` is the unit tests of every other crate.
SLOW_FIRST=(
    e2e_promote            # 359 (four promotions: epochs and handover, every shape, 3.9 -> 4.4 and 4.4 -> 3.9)
    e2e_tail_processes     # 254 (push and pull runs with compaction and process kills, in parallel)
    workspace              # 185
    e2e_tail               # 144
    e2e_promote_producers  # 140
    e2e_failover           # 53-206 (206 at load 27) (two 4.4 brokers, ship --store + apply --follow, a failover killed and rerun, the target restarted)
    e2e_promote_replicas   # 112 at load 16 (a 3-node RF3 target, promoted into three log dirs, stopped and restarted)
    e2e_store_tail         # 132 (one follower stopped for a minute)
    kafka_harness          # 128
    e2e_store_hw           # 113 (a 3-node cluster, a follower frozen in the ISR)
    e2e_failover_target    # 98 (4.4: two brokers, a dozen JVM tool runs; 3.9 alongside, lean)
    real_kafka_format      # 83
    e2e_tail_cluster       # 80 (a 3-node cluster, a target broker; 116-200 s on a loaded machine)
    e2e_tail_truncate      # 78 (a 3-node cluster, an unclean election, a target broker)
    e2e_tail_handover      # 63
    store_s3               # 55
    readme_runbook         # 54
    e2e_consumer_offsets   # 53 (Kafka 3.9 and 4.4, classic and KIP-848 groups)
    e2e_link_metadata      # 48; 130 at load 14 (one 4.4 broker, ship --store + apply --follow, groups committing)
)

jobs=()
for name in "${SLOW_FIRST[@]}"; do
    if [ "$name" = workspace ]; then
        jobs+=("--workspace --exclude segmirror-tests")
    else
        jobs+=("-p segmirror-tests --test $name")
    fi
done
for file in tests/tests/*.rs; do
    name="$(basename "$file" .rs)"
    case " ${SLOW_FIRST[*]} " in
        *" $name "*) ;;
        *) jobs+=("-p segmirror-tests --test $name") ;;
    esac
done
jobs+=("-p segmirror-tests --lib" "-p segmirror-tests --doc")
# SEGMIRROR_TEST_ONLY="e2e_links e2e_tail workspace": only these jobs (a test file's name; `workspace`, `lib`, `doc`
# for the other three), in the same order and lanes: to time a few files, or compare lane counts, the way CI runs.
if [ -n "${SEGMIRROR_TEST_ONLY:-}" ]; then
    selected=()
    for job in "${jobs[@]}"; do
        case "$job" in
            --workspace*) name=workspace ;;
            *--lib) name=lib ;;
            *--doc) name=doc ;;
            *) name="${job##* }" ;;
        esac
        case " $SEGMIRROR_TEST_ONLY " in *" $name "*) selected+=("$job") ;; esac
    done
    jobs=("${selected[@]}")
fi

# Built before the lanes start, with the jobs' own package selections: `-p segmirror-tests` alone unifies other
# dev-dependency features than `--workspace`, so a `--workspace` build would be a third variant no job runs, and the
# first job of each kind would compile its own while holding the build lock. A selection builds its jobs only.
if [ -n "${SEGMIRROR_TEST_ONLY:-}" ]; then
    for job in "${jobs[@]}"; do
        # shellcheck disable=SC2086 # the job's arguments are words
        cargo test $job --no-run
    done
else
    cargo test --workspace --exclude segmirror-tests --no-run
    cargo test -p segmirror-tests --no-run
fi

LOGS="$(mktemp -d "${TMPDIR:-/tmp}/segmirror-test-all-XXXXXX")"
export LOGS
export JOB_TIMEOUT="${SEGMIRROR_TEST_JOB_TIMEOUT:-1500}"

run_job() {
    local index="$1" args="$2" start rc cpu
    start="$(date +%s)"
    set +e
    # bash's `time` counts the CPU of every process the job reaped: the test binaries and the brokers, clients and
    # segmirror processes they started. Summed over the jobs it says how busy the lanes kept the cores.
    TIMEFORMAT='%U %S'
    # shellcheck disable=SC2086 # the job's arguments are words
    { time timeout --foreground --kill-after=30 "$JOB_TIMEOUT" \
        cargo test --no-fail-fast $args >"$LOGS/$index.log" 2>&1; } 2>"$LOGS/$index.cpu"
    rc=$?
    [ "$rc" != 124 ] || printf '\nthe job was stopped after %s s (SEGMIRROR_TEST_JOB_TIMEOUT)\n' "$JOB_TIMEOUT" \
        >>"$LOGS/$index.log"
    set -e
    cpu="$(awk 'END {printf "%.0f", $1 + $2}' "$LOGS/$index.cpu")"
    printf '%s %s %s\n' "$rc" "$(($(date +%s) - start))" "$cpu" >"$LOGS/$index.rc"
    {
        flock 9
        printf '\n===== cargo test %s (exit %s, %ss) =====\n' "$args" "$rc" "$(($(date +%s) - start))"
        cat "$LOGS/$index.log"
    } 9>"$LOGS/print.lock"
}
export -f run_job

RUN_START="$(date +%s)"
for i in "${!jobs[@]}"; do
    printf '%s\0%s\0' "$i" "${jobs[$i]}"
done | xargs -0 -n 2 -P "$LANES" bash -c 'run_job "$0" "$1"'

failed=0 wall_total=0 cpu_total=0 span=$(($(date +%s) - RUN_START))
printf '\n===== summary (%s lanes, %s s from the first job to the last) =====\n' "$LANES" "$span"
printf '%-50s %8s %8s  %s\n' "job" "seconds" "cpu-s" "result"
for i in "${!jobs[@]}"; do
    if [ -f "$LOGS/$i.rc" ]; then
        read -r rc secs cpu <"$LOGS/$i.rc"
        wall_total=$((wall_total + secs)) cpu_total=$((cpu_total + cpu))
    else
        rc="not run" secs="-" cpu="-"
    fi
    if [ "$rc" = "0" ]; then result="ok"; else result="FAILED ($rc)"; failed=1; fi
    printf '%-50s %8s %8s  %s\n' "${jobs[$i]}" "$secs" "$cpu" "$result"
done
printf 'jobs: %s s of lane time, %s CPU-s: the tests kept %s cores busy on average\n' "$wall_total" "$cpu_total" \
    "$(awk -v c="$cpu_total" -v s="$span" 'BEGIN {printf "%.2f", s ? c / s : 0}')"
# From libtest's own result lines only: a client's log line ("... 127.0.0.1:43665 failed: Connection refused") is
# not a test.
results() { cat "$LOGS"/*.log | grep '^test result: ' | grep -o "[0-9]* $1;" | awk '{s += $1} END {print s + 0}'; }
passed="$(results passed)"
failures="$(results failed)"
printf 'tests: %s passed, %s failed\n' "$passed" "$failures"
rm -rf "$LOGS"
exit "$failed"
