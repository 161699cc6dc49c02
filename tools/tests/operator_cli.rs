//! What an operator reads from the binary: `apply --help` listing every flag of both of its modes (the store apply
//! and the tail applier) with each mode's requirements, `segmirror: error:` lines naming each cause once, log
//! lines without colour escape codes when stderr is not a terminal, and `ship --store` given a relative `--log-dir`
//! shipping an append at once (not at the watcher's 10 s rescan).

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::service::{test_home, PATIENCE};
use common::{data_batches, segmirror, write_log_dir, PartitionSpec, SegmentSpec};

/// The long flags (`--name`) at the start of the option lines of a help page.
fn option_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            l.strip_prefix("--")
                .map(|rest| rest.split([' ', '=']).next().unwrap_or_default().to_string())
        })
        .collect()
}

/// The usage lines of a help page (from `Usage:` to the first blank line).
fn usage(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Usage:"))
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.trim().trim_start_matches("Usage:").trim().to_string())
        .collect()
}

#[test]
fn apply_help_lists_every_flag_of_both_modes_with_their_requirements() {
    // What each mode takes, from the parsers themselves: the hidden tail applier's own page, and the store flags.
    let tail = segmirror(["tail-apply", "--help"]);
    tail.expect_code(0);
    let tail_flags = option_flags(&tail.stdout);
    for flag in [
        "listen",
        "connect",
        "plaintext",
        "tls-cert",
        "tls-key",
        "tls-ca",
        "mirror",
        "link",
    ] {
        assert!(
            tail_flags.contains(flag),
            "tail-apply --help lacks --{flag}:\n{}",
            tail.stdout
        );
    }
    let store_flags = [
        "store",
        "prefix",
        "deep",
        "wait",
        "follow",
        "poll-interval-ms",
        "parallel",
        "json",
    ];
    for args in [
        &["apply", "--help"][..],
        &["apply", "-h"],
        &["help", "apply"],
        // Help is never rerouted to the hidden command's page.
        &["apply", "--listen", "127.0.0.1:0", "--help"],
        &["apply", "--connect", "h:1", "--store", "x", "-h"],
    ] {
        let run = segmirror(args);
        run.expect_code(0);
        let help = &run.stdout;
        assert!(
            !help.contains("tail-apply"),
            "{args:?} names the hidden command:\n{help}"
        );
        let shown = option_flags(help);
        let missing: Vec<_> = tail_flags
            .iter()
            .map(String::as_str)
            .chain(store_flags)
            .filter(|f| !shown.contains(*f))
            .collect();
        assert!(missing.is_empty(), "{args:?}: --help lacks {missing:?}:\n{help}");
        // One usage line per mode, each with what that mode requires.
        let lines = usage(help);
        let store = lines
            .iter()
            .find(|l| l.contains("--store"))
            .unwrap_or_else(|| panic!("{help}"));
        assert!(
            store.contains("--mirror <DIR>") && store.contains("[--link <NAME>]"),
            "{store}"
        );
        let direct = lines
            .iter()
            .find(|l| l.contains("--listen"))
            .unwrap_or_else(|| panic!("{help}"));
        for required in [
            "--connect <HOST:PORT>",
            "--mirror <DIR>",
            " --link <NAME>",
            "--plaintext",
            "--tls-ca",
        ] {
            assert!(direct.contains(required), "{required:?} missing from {direct:?}");
        }
        assert!(!direct.contains("--store"), "{direct}");
        // The modes' flags under headings naming them.
        assert!(
            help.contains("The tail applier (--listen ADDR or --connect HOST:PORT):"),
            "{help}"
        );
        assert!(help.contains("The store apply (--store URL"), "{help}");
    }

    // The requirements the usage lines state are the parsers' (what is accepted is unchanged).
    let dir = tempfile::tempdir().unwrap();
    let mirror = dir.path().join("m");
    let m = mirror.to_str().unwrap();
    let out = segmirror(["apply", "--mirror", m]);
    out.expect_code(2);
    assert!(out.stderr.contains("--store <URL>"), "{out}");
    let out = segmirror(["apply", "--listen", "127.0.0.1:0", "--mirror", m, "--plaintext"]);
    out.expect_code(2);
    assert!(out.stderr.contains("--link <NAME>"), "{out}");
    assert!(
        !out.stderr.contains("tail-apply"),
        "usage errors name the command typed:\n{out}"
    );
    let out = segmirror(["apply", "--listen", "127.0.0.1:0", "--mirror", m, "--link", "l"]);
    out.expect_code(2);
    assert!(out.stderr.contains("--plaintext"), "{out}");
    let out = segmirror([
        "apply",
        "--connect",
        "h:1",
        "--mirror",
        m,
        "--link",
        "l",
        "--tls-cert",
        "c",
    ]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("--tls-key") || out.stderr.contains("--tls-ca"),
        "{out}"
    );
    // A tail applier's flag without --listen/--connect is still refused by the store apply.
    let store = dir.path().join("store");
    std::fs::create_dir(&store).unwrap();
    for flag in [&["--plaintext"][..], &["--source-cluster-id", "x"], &["--cluster"]] {
        let mut args = vec!["apply", "--store", store.to_str().unwrap(), "--mirror", m];
        args.extend_from_slice(flag);
        let out = segmirror(&args);
        out.expect_code(2);
        assert!(out.stderr.contains("--listen"), "{flag:?}:\n{out}");
    }
}

/// `ship --help` lists the flags of both of its modes too (the direct link's, and those of `--store`, which runs the
/// hidden `store-ship`), and `ship --store`'s usage errors name the command typed.
#[test]
fn ship_help_lists_both_modes_and_names_the_command_typed() {
    let store = segmirror(["store-ship", "--help"]);
    store.expect_code(0);
    let store_flags = option_flags(&store.stdout);
    for flag in ["store", "log-dir", "upload-interval-ms", "prefix"] {
        assert!(
            store_flags.contains(flag),
            "store-ship --help lacks --{flag}:\n{}",
            store.stdout
        );
    }
    for args in [
        &["ship", "--help"][..],
        &["ship", "-h"],
        &["ship", "--store", "/b", "--help"],
    ] {
        let run = segmirror(args);
        run.expect_code(0);
        let help = &run.stdout;
        assert!(!help.contains("store-ship"), "{args:?}:\n{help}");
        let shown = option_flags(help);
        let missing: Vec<_> = store_flags
            .iter()
            .chain(["connect", "listen", "plaintext", "tls-ca"].map(String::from).iter())
            .filter(|f| !shown.contains(*f))
            .cloned()
            .collect();
        assert!(missing.is_empty(), "{args:?}: --help lacks {missing:?}:\n{help}");
        let lines = usage(help);
        let bucket = lines
            .iter()
            .find(|l| l.contains("--store"))
            .unwrap_or_else(|| panic!("{help}"));
        assert!(
            bucket.starts_with("segmirror ship --store <URL> --log-dir <DIR>"),
            "{bucket}"
        );
        let direct = lines
            .iter()
            .find(|l| l.contains("--connect"))
            .unwrap_or_else(|| panic!("{help}"));
        assert!(
            direct.contains(" --link <NAME>") && direct.contains("--plaintext"),
            "{direct}"
        );
    }
    let out = segmirror(["ship", "--store", "/b"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("--log-dir") && !out.stderr.contains("store-ship"),
        "{out}"
    );
    // A bucket flag without --store is still refused by the direct ship.
    let out = segmirror([
        "ship",
        "--log-dir",
        "/x",
        "--link",
        "l",
        "--connect",
        "h:1",
        "--plaintext",
        "--prefix",
        "p",
    ]);
    out.expect_code(2);
    assert!(out.stderr.contains("--store"), "{out}");
}

/// A catalog that cannot be opened: the chain of errors names SQLite's cause once (it used to be repeated by each
/// error that embeds its source's text).
#[test]
fn an_error_line_names_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    // The catalog is a directory: SQLite cannot open it.
    let catalog = dir.path().join("a-directory");
    std::fs::create_dir(&catalog).unwrap();
    let out = segmirror([
        "link",
        "create",
        "l",
        "--transport",
        "direct",
        "--address",
        "h:1",
        "--catalog",
        catalog.to_str().unwrap(),
    ]);
    out.expect_code(2);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("segmirror: error:"))
        .collect();
    assert_eq!(lines.len(), 1, "{out}");
    let line = lines[0];
    let parts: Vec<&str> = line.trim_start_matches("segmirror: error: ").split(": ").collect();
    let mut seen = BTreeSet::new();
    for part in &parts {
        assert!(seen.insert(*part), "{part:?} twice in {line:?}");
    }
    assert!(line.contains(catalog.to_str().unwrap()), "{line}");
    assert_eq!(line.matches("unable to open database file").count(), 1, "{line}");
}

/// `apply --listen` with its log (SEGMIRROR_LOG=info) redirected to a file, as a service manager does: the file
/// holds the log lines, and no escape code.
#[test]
fn log_lines_written_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("apply.log");
    let mirror = dir.path().join("mirror");
    let mut child = Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .env("SEGMIRROR_HOME", test_home())
        .env("SEGMIRROR_LOG", "info")
        .env_remove("NO_COLOR")
        .args([
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--link",
            "dr",
            "--plaintext",
            "--mirror",
        ])
        .arg(&mirror)
        .arg("--catalog")
        .arg(dir.path().join("catalog.sqlite"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    // The tracing event `listening` (INFO), written after the socket is bound.
    while !std::fs::read_to_string(&log).unwrap().contains("INFO") {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{}",
            std::fs::read_to_string(&log).unwrap()
        );
        assert!(start.elapsed() < PATIENCE, "{}", std::fs::read_to_string(&log).unwrap());
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("listening"), "{text}");
    assert!(!bytes.contains(&0x1b), "an escape code in the log file:\n{text:?}");
}

/// `ship --store` with a relative `--log-dir` (the working directory the log dir's parent): an append is shipped
/// as a new version within seconds, well inside the watcher's 10 s rescan, so its file notifications are matched
/// to the log dir.
#[test]
fn ship_store_with_a_relative_log_dir_ships_an_append_within_seconds() {
    let root = tempfile::tempdir().unwrap();
    let source = root.path().join("source");
    write_log_dir(
        &source,
        &[PartitionSpec::new("orders", 0, vec![SegmentSpec::new(data_batches(0, 10, 3, 0))]).index_interval(4096)],
    );
    let store = root.path().join("bucket");
    let objects = || -> usize {
        let mut n = 0;
        let mut dirs = vec![store.clone()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    dirs.push(e.path());
                } else {
                    n += 1;
                }
            }
        }
        n
    };
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_segmirror"));
    command
        .current_dir(root.path())
        .env("SEGMIRROR_HOME", common::service::test_home())
        .args([
            "ship",
            "--store",
            "bucket",
            "--log-dir",
            "source",
            "--link",
            "bk",
            "--upto",
            "log-end",
        ])
        .args(["--upload-interval-ms", "100"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = command.spawn().unwrap();
    let start = Instant::now();
    let mut settled = (objects(), Instant::now());
    // The first round's objects, then quiet for a second.
    while settled.0 == 0 || settled.1.elapsed() < Duration::from_secs(1) {
        assert!(child.try_wait().unwrap().is_none(), "ship --store exited");
        assert!(start.elapsed() < PATIENCE, "nothing shipped");
        let now = objects();
        if now != settled.0 {
            settled = (now, Instant::now());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = source.join("orders-0").join("00000000000000000000.log");
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    for batch in data_batches(30, 2, 3, 0) {
        std::io::Write::write_all(&mut f, &batch).unwrap();
    }
    drop(f);
    let appended = Instant::now();
    while objects() == settled.0 {
        assert!(child.try_wait().unwrap().is_none(), "ship --store exited");
        assert!(
            appended.elapsed() < Duration::from_secs(5),
            "the append was not shipped within 5 s (the rescan is 10 s): notifications were not matched"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("append shipped after {:?}", appended.elapsed());
    let _ = child.kill();
    let _ = child.wait();
}
