//! Stopping and starting the target brokers: segmirror cannot do it itself (it does not know how the brokers are
//! run: systemd, containers, a script), so it runs the operator's hook, or says what to do, and in both cases
//! waits for the evidence: a stopped broker has released its log dir's `.lock` (the record lock Kafka holds while
//! it runs, the one `promote` takes); a started one answers on the bootstrap address with the link's topics.
//!
//! Why wait even after a hook: a stop script that returns before the JVM exits (or a start script that returns at
//! once) is common; the next step must not begin before the broker really is stopped or serving.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use cluster_client::admin::AdminClient;
use segmirror_applier::promote::{LockFailure, LogDirLock};

use super::{FailoverConfig, Narrator, POLL};
use crate::runtime::Runtime;

/// The log dirs whose `.lock` a running broker holds.
fn held_log_dirs(config: &FailoverConfig) -> anyhow::Result<Vec<&Path>> {
    let mut held = Vec::new();
    for dir in &config.log_dirs {
        match LogDirLock::try_acquire(dir) {
            Ok(lock) => drop(lock),
            Err(LockFailure::Held) => held.push(dir.as_path()),
            Err(LockFailure::Io(e)) => return Err(anyhow::Error::new(e).context(format!("locking {}", dir.display()))),
        }
    }
    Ok(held)
}

/// Run a hook with `sh -c`, its environment naming the step, and fail on a non-zero exit.
fn run_hook(config: &FailoverConfig, out: &dyn Narrator, step: &str, command: &str) -> anyhow::Result<()> {
    let log_dirs: Vec<String> = config.log_dirs.iter().map(|d| d.display().to_string()).collect();
    out.line(&format!("[{step}] running hook: {command}"));
    let status = Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("SEGMIRROR_FAILOVER_LINK", &config.link)
        .env("SEGMIRROR_FAILOVER_STEP", step)
        .env("SEGMIRROR_FAILOVER_LOG_DIRS", log_dirs.join(":"))
        .env(
            "SEGMIRROR_FAILOVER_BOOTSTRAP",
            config.bootstrap.as_deref().unwrap_or(""),
        )
        .status()
        .with_context(|| format!("running the {step} hook `{command}`"))?;
    if !status.success() {
        bail!("the {step} hook `{command}` failed ({status})");
    }
    Ok(())
}

/// Stop the target brokers (hook or operator), and wait until their log dirs are free.
pub fn stop(config: &FailoverConfig, out: &dyn Narrator) -> anyhow::Result<String> {
    let started = Instant::now();
    if held_log_dirs(config)?.is_empty() {
        return Ok("the target broker(s) were already stopped".into());
    }
    match &config.stop_hook {
        Some(hook) => run_hook(config, out, "stop-brokers", hook)?,
        None => {
            let held: Vec<String> = held_log_dirs(config)?.iter().map(|d| d.display().to_string()).collect();
            out.line(&format!(
                "[stop-brokers] STOP the target broker(s) running on log dir(s) {} now (e.g. `kafka-server-stop.sh`, \
                 or the service manager's stop); waiting up to {} s for their .lock to be released",
                held.join(", "),
                config.broker_timeout
            ));
        }
    }
    let deadline = started + Duration::from_secs(config.broker_timeout);
    loop {
        let held = held_log_dirs(config)?;
        if held.is_empty() {
            return Ok(format!(
                "the target broker(s) stopped after {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }
        if Instant::now() > deadline {
            bail!(
                "a broker still holds {} after {} s",
                held.iter()
                    .map(|d| d.join(segment_format::dir::LOCK_FILE).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                config.broker_timeout
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Whether the target answers on the bootstrap address with every topic of `topics`.
async fn answers(bootstrap: &str, topics: &[String], timeout: Duration) -> Result<(), String> {
    let mut admin = AdminClient::connect(bootstrap, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let listed = admin.topics().await.map_err(|e| e.to_string())?;
    match topics.iter().find(|t| !listed.contains_key(*t)) {
        Some(missing) => Err(format!("topic {missing} not listed yet")),
        None => Ok(()),
    }
}

/// Start the target brokers (hook or operator), and wait until the bootstrap answers with the link's topics.
pub fn start(config: &FailoverConfig, runtime: &Runtime, out: &dyn Narrator) -> anyhow::Result<String> {
    let started = Instant::now();
    let bootstrap = config.bootstrap.as_deref().context("--bootstrap is needed")?;
    let (_, catalog) = crate::catalog::open_mirror_catalog(config.catalog.clone(), &config.mirror, true)?;
    let topics: Vec<String> = catalog.link_topics(&config.link)?.into_iter().map(|t| t.name).collect();
    drop(catalog);
    let probe_timeout = Duration::from_secs(5);
    if held_log_dirs(config)?.is_empty() {
        match &config.start_hook {
            Some(hook) => run_hook(config, out, "start-brokers", hook)?,
            None => out.line(&format!(
                "[start-brokers] START the target broker(s) now; waiting up to {} s for {bootstrap} to answer",
                config.broker_timeout
            )),
        }
    }
    let deadline = started + Duration::from_secs(config.broker_timeout);
    loop {
        match runtime.block_on(answers(bootstrap, &topics, probe_timeout))? {
            Ok(()) => {
                return Ok(format!(
                    "the target answers on {bootstrap} after {:.1} s",
                    started.elapsed().as_secs_f64()
                ))
            }
            Err(why) if Instant::now() > deadline => {
                bail!("{bootstrap} does not answer after {} s: {why}", config.broker_timeout)
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}
