//! The `segmirror` binary, built once per test process and run like an operator would run it.
//!
//! A test crate cannot depend on another crate's binary, so the harness asks cargo to build it into the same
//! target directory and profile as the running test (derived from the test executable's own path), then runs
//! it. The library is tested directly elsewhere; running the binary also proves the exit codes and the JSON a
//! user scripts against.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Context, Result};

use crate::install::repo_root;

/// Outcome of one `segmirror` run.
#[derive(Debug, Clone)]
pub struct CliRun {
    pub args: Vec<String>,
    /// Exit status (`-1` if killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// The `--json` document printed on stdout.
    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("segmirror printed no JSON:\n{self}"))
    }
}

impl std::fmt::Display for CliRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "segmirror {} -> exit {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.code,
            self.stdout,
            self.stderr
        )
    }
}

/// `<target dir>/<profile dir>` of the running test executable (`<target>/<profile>/deps/<test>-<hash>`).
fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test executable")?;
    let deps = exe.parent().context("test executable has no directory")?;
    let profile = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().context("deps dir has no parent")?
    } else {
        deps
    };
    Ok(profile.to_path_buf())
}

/// Builds `segmirror` (once per process) with the test's profile and target dir; returns the executable.
pub fn segmirror_binary() -> Result<&'static Path> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn build() -> Result<PathBuf> {
    let profile_dir = profile_dir()?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .context("profile dir name")?
        .to_string();
    let target_dir = profile_dir.parent().context("profile dir has no target dir")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root())
        .args([
            "build",
            "--quiet",
            "-p",
            "segmirror",
            "--bin",
            "segmirror",
            "--target-dir",
        ])
        .arg(target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let out = cmd.output().context("running cargo build -p segmirror")?;
    if !out.status.success() {
        bail!(
            "cargo build -p segmirror failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let exe = profile_dir.join(format!("segmirror{}", std::env::consts::EXE_SUFFIX));
    if !exe.is_file() {
        bail!("cargo built segmirror but {} does not exist", exe.display());
    }
    Ok(exe)
}

static HOME: OnceLock<PathBuf> = OnceLock::new();

/// The data directory (`SEGMIRROR_HOME`) every `segmirror` this test process starts defaults to: one per test
/// process, never the user's own, so a catalog or link record left by one test binary (or by the operator) is never
/// read by another. A test that sets `SEGMIRROR_HOME` itself wins. Removed when the test process exits (a process
/// killed by a signal leaves it).
pub fn test_home() -> &'static Path {
    HOME.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let home = std::env::temp_dir().join(format!("segmirror-test-home-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&home).expect("creating the tests' SEGMIRROR_HOME");
        // SAFETY: registers a plain function with no arguments; it runs once, at exit.
        unsafe { libc::atexit(remove_test_home) };
        home
    })
}

extern "C" fn remove_test_home() {
    if let Some(home) = HOME.get() {
        let _ = std::fs::remove_dir_all(home);
    }
}

/// A `segmirror` command with [`test_home`] as its data directory (a later `.env`/`.envs` may replace it).
pub fn segmirror_command() -> Result<Command> {
    let mut cmd = Command::new(segmirror_binary()?);
    cmd.env("SEGMIRROR_HOME", test_home());
    Ok(cmd)
}

/// Runs `segmirror <args>` and captures everything.
pub fn run_segmirror<I, S>(args: I) -> Result<CliRun>
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    crate::mirror::run_segmirror_env(args, &[])
}

/// `segmirror verify <flags> <paths>`.
pub fn segmirror_verify(paths: &[&Path], flags: &[&str]) -> Result<CliRun> {
    let mut args: Vec<std::ffi::OsString> = vec!["verify".into()];
    args.extend(flags.iter().map(Into::into));
    args.extend(paths.iter().map(|p| p.as_os_str().to_os_string()));
    run_segmirror(args)
}
