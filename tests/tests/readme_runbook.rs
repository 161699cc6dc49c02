//! The README's operator runbook (section "Mirroring a real cluster"), run as written against real brokers.
//!
//! Why: a runbook that drifts from the tool is worse than none. This test takes the shell blocks fenced as
//! ```` ```sh runbook=<step> ```` out of `README.md`, checks that the steps are the expected ones in the expected
//! order, and runs each with `bash -euo pipefail`, its placeholders (`$SOURCE_LOG_DIR`, `$STORE`, ...) set through
//! the environment, `segmirror` from this build and `kafka-topics.sh` a wrapper around the harness's Kafka
//! (`org.apache.kafka.tools.TopicCommand`) on `PATH`. What the README says in prose between the blocks — stop the
//! target broker, start it — the test does with the harness. A consumer on the target then has to read the source's
//! records at identical offsets, at both isolation levels.
//!
//! The source is seeded twice, as the README tells: once while it serves (a catch-up pass), then, after more
//! writes, once more after a clean stop (the cut-over pass).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use segmirror_tests::install::{kafka_support_dir, repo_root};
use segmirror_tests::segmirror_cli::segmirror_binary;
use segmirror_tests::shapes::produce_shapes;
use segmirror_tests::tools::TOPIC_COMMAND;
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

/// The runbook's steps, in the order the README gives them.
const STEPS: [&str; 4] = ["seed", "apply", "create-topics", "promote"];

/// Info-string prefix of a runbook block.
const FENCE: &str = "```sh runbook=";

/// The runbook blocks of `readme`, in order: (step, script).
fn runbook_blocks(readme: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in readme.lines() {
        match &mut current {
            None => {
                if let Some(step) = line.trim_end().strip_prefix(FENCE) {
                    current = Some((step.to_string(), String::new()));
                }
            }
            Some((_, script)) => {
                if line.trim_end() == "```" {
                    blocks.extend(current.take());
                } else {
                    script.push_str(line);
                    script.push('\n');
                }
            }
        }
    }
    assert!(current.is_none(), "README.md: an unterminated runbook block");
    blocks
}

/// Single-quotes `s` for a POSIX shell.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A directory for `PATH` with `segmirror` (this build) and `kafka-topics.sh` (Kafka's `TopicCommand` on the
/// harness's jars, as the script of a Kafka distribution would run it).
fn tool_bin(dir: &Path, install: &KafkaInstall) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(segmirror_binary().unwrap(), bin.join("segmirror")).unwrap();
    let java = install.java(256, &kafka_support_dir().join("tools-log4j2.properties"));
    let mut line = shell_quote(&java.get_program().to_string_lossy());
    for arg in java.get_args() {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    let script = bin.join("kafka-topics.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# kafka-topics.sh of the segmirror test harness\nexec {line} {} \"$@\"\n",
            install.main_class(TOPIC_COMMAND)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Runs one runbook step with `bash -euo pipefail`; panics with the script and its output unless it exits 0.
fn run_step(step: &str, script: &str, bin: &Path, vars: &BTreeMap<&str, String>) {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .env("PATH", path)
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(repo_root())
        .output()
        .unwrap();
    let text = format!(
        "runbook step {step}:\n{script}--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{} -> {}", text, out.status);
    eprintln!("{text}");
}

#[test]
fn readme_runbook_blocks_are_the_documented_steps() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let steps: Vec<String> = runbook_blocks(&readme).into_iter().map(|(s, _)| s).collect();
    assert_eq!(steps, STEPS, "README.md's runbook blocks");
}

#[test]
fn readme_runbook_mirrors_a_source_broker_into_a_target_broker() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let blocks: BTreeMap<String, String> = runbook_blocks(&readme).into_iter().collect();
    assert_eq!(
        blocks.keys().collect::<std::collections::BTreeSet<_>>(),
        STEPS.iter().map(|s| s.to_string()).collect::<Vec<_>>().iter().collect(),
        "README.md's runbook blocks"
    );
    let block = |step: &str| blocks[step].as_str();

    // The source: a transactional topic with aborts, two partitions of several segments each.
    let mut source = KafkaBroker::start(BrokerConfig::new("runbook-source")).unwrap();
    let opts = ShapeOptions {
        topic_prefix: "runbook-".into(),
        ..ShapeOptions::default()
    };
    let produced = produce_shapes(&source, &[Shape::Transactions], &opts).unwrap();
    let topic = &produced[0];

    let work = tempfile::tempdir().unwrap();
    let bin = tool_bin(work.path(), source.install());
    let (store, mirror, home) = (
        work.path().join("store"),
        work.path().join("mirror"),
        work.path().join("segmirror-home"),
    );
    std::fs::create_dir(&store).unwrap();
    let mut vars: BTreeMap<&str, String> = BTreeMap::from([
        ("SOURCE_LOG_DIR", source.log_dir().display().to_string()),
        ("STORE", store.display().to_string()),
        ("LINK", "runbook".to_string()),
        ("MIRROR", mirror.display().to_string()),
        ("SEGMIRROR_HOME", home.display().to_string()),
        ("TOPIC", topic.name.clone()),
        ("PARTITIONS", topic.partitions.to_string()),
    ]);

    // Steps 1 and 2 while the source serves: a catch-up pass.
    run_step("seed", block("seed"), &bin, &vars);
    run_step("apply", block("apply"), &bin, &vars);
    assert!(
        home.join("catalog.sqlite").is_file(),
        "the catalog lives in $SEGMIRROR_HOME/catalog.sqlite"
    );

    // More writes, then the cut-over: the source stops cleanly and steps 1 and 2 run once more.
    let more = (0..40)
        .map(|i| OutRecord {
            partition: Some(i % topic.partitions),
            key: Some(format!("late-{i}").into_bytes()),
            value: Some(b"written after the first seed".to_vec()),
            headers: vec![],
            timestamp: None,
        })
        .collect();
    let plan = ProducePlan::new(&topic.name)
        .config("acks", "all")
        .config("enable.idempotence", true)
        .step(ProduceStep::Send(more));
    python_produce(&source.bootstrap(), &plan).unwrap();
    let mut source_records = BTreeMap::new();
    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let got = consume_all(&source.bootstrap(), &topic.name, None, isolation).unwrap();
        source_records.insert(isolation == Isolation::ReadCommitted, got);
    }
    assert!(
        source_records[&true].len() < source_records[&false].len(),
        "the source has aborted records"
    );
    source.stop().unwrap();
    run_step("seed", block("seed"), &bin, &vars);
    run_step("apply", block("apply"), &bin, &vars);

    // Step 3 on the running target, step 4 (stop), step 5 (promote), step 6 (start).
    let mut target = KafkaBroker::start(BrokerConfig::new("runbook-target")).unwrap();
    vars.insert("TARGET_BOOTSTRAP", target.bootstrap());
    vars.insert("TARGET_LOG_DIR", target.log_dir().display().to_string());
    run_step("create-topics", block("create-topics"), &bin, &vars);
    // The broker has created the partitions (their directories and topic ids) before it is stopped.
    for p in 0..topic.partitions {
        let metadata = target.partition_dir(&topic.name, p).join("partition.metadata");
        wait_for(
            &format!("{} on the target", metadata.display()),
            Duration::from_secs(60),
            Duration::from_millis(100),
            || Ok(metadata.is_file().then_some(())),
        )
        .unwrap();
    }
    target.stop().unwrap();
    run_step("promote", block("promote"), &bin, &vars);
    target.restart().unwrap();

    for isolation in [Isolation::ReadUncommitted, Isolation::ReadCommitted] {
        let got = consume_all(&target.bootstrap(), &topic.name, None, isolation).unwrap();
        assert_eq!(
            got,
            source_records[&(isolation == Isolation::ReadCommitted)],
            "{} {isolation:?} on the target",
            topic.name
        );
    }
    target.stop().unwrap();
}
