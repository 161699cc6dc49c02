//! `segmirror verify` on live and hostile log dirs: a segment truncated while it
//! is read, files far larger than Kafka ever writes, entries that are not regular
//! files, names that are not UTF-8. Every run has a deadline (a hang fails the
//! test instead of blocking it) and its peak memory is read from `wait4`.

mod common;

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use segment_format::batch::seal_crc;
use segment_format::record::{BatchBuilder, RecordSpec};

/// Longest a run may take before it counts as hung. Generous: the machine may
/// be loaded; a FIFO read would block forever.
const DEADLINE: Duration = Duration::from_secs(120);

/// Peak RSS a run on a tiny or rejected input may reach (64 MiB): a 4 GiB index
/// read whole, or a 50 GiB log mapped and scanned, would be far above. (Linux
/// counts the parent's resident set at the fork in a child's peak, so tests in
/// this file keep their own memory small.)
const SMALL_RSS_KIB: i64 = 64 * 1024;

/// A finished run and its peak resident set.
struct Bounded {
    run: Run,
    max_rss_kib: i64,
}

/// Run `segmirror args` (under `/usr/bin/time`, for its peak RSS), calling
/// `during` with the pid of the `segmirror` process while it runs (until it
/// returns `false`), failing the test if it is not done by [`DEADLINE`].
// The child is reaped by `wait4`, which also reports its peak memory.
#[allow(clippy::zombie_processes)]
fn run_bounded<I, S>(args: I, mut during: impl FnMut(u32) -> bool) -> Bounded
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    // The peak RSS comes from GNU time, the binary's parent: `wait4` here would
    // report this test process's own peak too (Linux carries a process's peak
    // across the `exec` of a spawned child).
    let rss_file = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(rss_file.path())
        .arg(env!("CARGO_BIN_EXE_segmirror"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let stderr = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let started = Instant::now();
    let mut watching = true;
    let status = loop {
        let mut status = 0;
        // SAFETY: a plain out-parameter; `pid` is our child, reaped only here.
        let done = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
        if done == pid as libc::pid_t {
            break status;
        }
        if started.elapsed() > DEADLINE {
            // SAFETY: our own child, not yet reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("segmirror did not finish within {DEADLINE:?}: it hangs");
        }
        if watching {
            // `during` is about segmirror itself, the child of GNU time.
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
            match children.split_whitespace().next().and_then(|c| c.parse().ok()) {
                Some(segmirror) => watching = during(segmirror),
                None => std::thread::yield_now(),
            }
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
    // GNU time says so when its child dies of a signal (a SIGBUS, say).
    assert!(
        !stderr.contains("Command terminated by signal"),
        "segmirror was killed by a signal: {stderr}"
    );
    let report = std::fs::read_to_string(rss_file.path()).unwrap();
    let max_rss_kib = report
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no peak RSS from /usr/bin/time: {report:?}"));
    Bounded {
        run: Run {
            code,
            stdout: String::from_utf8_lossy(&stdout.join().unwrap()).into_owned(),
            stderr,
        },
        max_rss_kib,
    }
}

fn verify_bounded(paths: &[&Path], json: bool) -> Bounded {
    let mut args: Vec<&OsStr> = vec![OsStr::new("verify")];
    if json {
        args.push(OsStr::new("--json"));
    }
    args.extend(paths.iter().map(|p| p.as_os_str()));
    run_bounded(args, |_| false)
}

fn findings(doc: &serde_json::Value) -> Vec<serde_json::Value> {
    doc["findings"].as_array().cloned().unwrap_or_default()
}

/// The findings about `path`.
fn findings_of(doc: &serde_json::Value, path: &Path) -> Vec<serde_json::Value> {
    findings(doc)
        .into_iter()
        .filter(|f| f["path"].as_str() == path.to_str())
        .collect()
}

/// A partition `big-0` of one segment of `batches` batches of 1 MiB, without
/// index files (a broker rebuilds them: a warning each), so that cutting the
/// `.log` at a batch boundary leaves a sound partition.
fn big_partition(parent: &Path, batches: usize) -> (PathBuf, PathBuf, Vec<u64>) {
    let dir = parent.join("big-0");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("00000000000000000000.log");
    let one = BatchBuilder::new(0)
        .record(RecordSpec::new(0, BASE_TS).with_value(vec![0x5a; 1 << 20]))
        .build();
    // Written batch by batch: the test process stays small, and so the peak RSS
    // its children report (Linux counts a child's memory before `exec` too).
    let mut file = std::io::BufWriter::new(std::fs::File::create(&log).unwrap());
    let mut ends = Vec::new();
    let mut end = 0;
    for i in 0..batches {
        let mut b = one.clone();
        b[..8].copy_from_slice(&(i as i64).to_be_bytes());
        seal_crc(&mut b);
        std::io::Write::write_all(&mut file, &b).unwrap();
        end += b.len() as u64;
        ends.push(end);
    }
    std::io::Write::flush(&mut file).unwrap();
    (dir, log, ends)
}

/// Whether process `pid` has `path` open.
fn has_open(pid: u32, path: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == path))
}

/// A segment cut short (ftruncate, as a follower truncates its log) while
/// `verify` reads it: reported as "changed while read" and read again, the run
/// ends normally (no SIGBUS), and what it reports describes the file as it is
/// after the cut.
#[test]
fn segment_truncated_while_verify_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    // 160 MiB: the cut lands long before verify could have read past it.
    let (dir, log, ends) = big_partition(tmp.path(), 160);
    let log = std::fs::canonicalize(&log).unwrap();
    let cut = ends[1];
    let mut truncated = false;
    let bounded = run_bounded([OsStr::new("verify"), OsStr::new("--json"), dir.as_os_str()], |pid| {
        if has_open(pid, &log) {
            let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
            f.set_len(cut).unwrap();
            truncated = true;
            return false;
        }
        true
    });
    assert!(truncated, "verify never opened {}\n{}", log.display(), bounded.run);
    let run = &bounded.run;
    run.expect_code(0);
    let doc = run.json().doc;
    let about_log = findings_of(&doc, &log);
    let changed: Vec<_> = about_log
        .iter()
        .filter(|f| f["defect"]["kind"] == "changed_while_read")
        .collect();
    assert_eq!(changed.len(), 1, "{doc:#}");
    assert_eq!(changed[0]["severity"], "warning", "{doc:#}");
    let message = changed[0]["defect"]["message"].as_str().unwrap();
    assert!(message.contains("truncated while it was read"), "{message}");
    assert!(message.contains("read again"), "{message}");
    assert!(changed[0]["position"].as_u64().unwrap() >= cut, "{doc:#}");
    // The second attempt read the cut file: two batches.
    assert_eq!(doc["partitions"][0]["batches"], 2, "{doc:#}");
    assert_eq!(doc["partitions"][0]["bytes"], cut, "{doc:#}");
    assert_eq!(doc["errors"], 0, "{doc:#}");
}

/// A 50 GiB sparse `.log` and a 4 GiB sparse `.index`: each rejected by its
/// size with the limit named, at once (nothing is scanned or read whole), in a
/// process whose memory stays small.
#[test]
fn sparse_huge_log_and_index_are_rejected_by_size() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders_like(tmp.path());
    let sealed = p.segment(0);
    let newest = p.segment(1);
    std::fs::File::options()
        .write(true)
        .open(&sealed.log)
        .unwrap()
        .set_len(50 << 30)
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&newest.index)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let bounded = verify_bounded(&[&p.dir], true);
    bounded.run.expect_code(1);
    let doc = bounded.run.json().doc;
    let log = findings_of(&doc, &sealed.log);
    assert_eq!(log.len(), 1, "{doc:#}");
    assert_eq!(log[0]["severity"], "error");
    assert_eq!(log[0]["defect"]["kind"], "too_large");
    assert_eq!(log[0]["defect"]["size"], 50u64 << 30);
    assert_eq!(log[0]["defect"]["limit"], i32::MAX);
    let index = findings_of(&doc, &newest.index);
    assert_eq!(index.len(), 1, "{doc:#}");
    assert_eq!(index[0]["defect"]["kind"], "too_large");
    assert_eq!(index[0]["defect"]["what"], "offset index");
    assert_eq!(index[0]["defect"]["size"], 4u64 << 30);
    assert_eq!(index[0]["defect"]["limit"], i32::MAX);
    assert!(
        bounded.max_rss_kib < SMALL_RSS_KIB,
        "peak RSS {} KiB",
        bounded.max_rss_kib
    );
    // The text report names the limit too.
    let text = verify(&[&p.dir], &[]);
    text.expect_code(1)
        .expect_stdout("exceeds the limit of 2147483647 bytes; rejected by its size, not read");
}

/// A 1 GiB sparse `.index` next to a small newest segment (a broker's
/// preallocation, or a hostile file within Kafka's limit): only what the segment
/// can need is read; the zeros are skipped, not held.
#[test]
fn preallocated_index_of_the_newest_segment_is_not_read_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders_like(tmp.path());
    let newest = p.segment(1);
    std::fs::File::options()
        .write(true)
        .open(&newest.index)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let bounded = verify_bounded(&[&p.dir], true);
    bounded.run.expect_code(0);
    assert!(
        bounded.max_rss_kib < SMALL_RSS_KIB,
        "peak RSS {} KiB",
        bounded.max_rss_kib
    );
}

fn orders_like(parent: &Path) -> BuiltPartition {
    write_partition(
        parent,
        &PartitionSpec::new(
            "orders",
            0,
            vec![
                SegmentSpec::new(data_batches(0, 4, 5, 1)),
                SegmentSpec::new(data_batches(20, 3, 5, 2)),
            ],
        ),
    )
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// A FIFO, a socket, a symlink loop and a symlink out of the root in a
/// partition dir (two of them with segment names): each reported by name, none
/// opened (a FIFO read would hang), the real segments still verified.
#[test]
fn fifo_socket_and_symlinks_in_a_partition_dir_are_reported_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let p = orders_like(tmp.path());
    let fifo = p.dir.join("00000000000000000100.log");
    mkfifo(&fifo);
    let socket = p.dir.join("sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let looped = p.dir.join("00000000000000000200.snapshot");
    std::os::unix::fs::symlink(&looped, &looped).unwrap();
    let outside = tmp.path().join("outside.log");
    std::fs::write(&outside, b"not kafka").unwrap();
    let escape = p.dir.join("00000000000000000300.log");
    std::os::unix::fs::symlink(&outside, &escape).unwrap();

    let bounded = verify_bounded(&[&p.dir], true);
    bounded.run.expect_code(1);
    let doc = bounded.run.json().doc;
    for (path, kind, severity) in [
        (&fifo, "a FIFO", "error"),
        (&socket, "a socket", "warning"),
        (&looped, "a symbolic link", "error"),
        (&escape, "a symbolic link", "error"),
    ] {
        let found = findings_of(&doc, path);
        assert_eq!(found.len(), 1, "{}: {doc:#}", path.display());
        assert_eq!(found[0]["severity"], severity, "{}", path.display());
        assert_eq!(found[0]["defect"]["kind"], "not_regular_file", "{}", path.display());
        assert_eq!(found[0]["defect"]["file_type"], kind, "{}", path.display());
    }
    // The real segments were verified; nothing outside the root was read.
    assert_eq!(doc["partitions"][0]["batches"], 7, "{doc:#}");
    assert_eq!(doc["errors"], 3, "{doc:#}");
    // A FIFO given as the path itself is an error, not a hang.
    let direct = verify_bounded(&[&fifo], false);
    direct.run.expect_code(2);
    assert!(direct.run.stdout.contains(fifo.to_str().unwrap()), "{}", direct.run);
}

/// A file and a directory whose names are not UTF-8: `--json` prints one valid
/// document naming them (lossily), and nothing panics.
#[test]
fn non_utf8_names_with_json() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let p = orders_like(tmp.path());
    let bad_file = p.dir.join(OsStr::from_bytes(b"stray-\xff\xfe.log"));
    std::fs::write(&bad_file, b"x").unwrap();
    let bad_dir = tmp.path().join(OsStr::from_bytes(b"topic\xff-0"));
    std::fs::create_dir(&bad_dir).unwrap();
    for paths in [vec![p.dir.as_path()], vec![tmp.path()], vec![bad_dir.as_path()]] {
        for json in [true, false] {
            let bounded = verify_bounded(&paths, json);
            let run = &bounded.run;
            assert!(!run.stderr.contains("panicked"), "{run}");
            assert!(matches!(run.code, Some(0..=2)), "{run}");
            if json {
                let doc = run.json().doc;
                let lossy = bad_file.to_string_lossy();
                if paths[0] == p.dir.as_path() {
                    run.expect_code(0);
                    assert!(findings(&doc).iter().any(|f| f["path"] == lossy.as_ref()), "{doc:#}");
                }
            }
        }
    }
}

/// `seed` on a source log dir whose partition holds a FIFO named like a
/// segment: the FIFO is never opened (no hang), the partition is refused naming
/// it (shipping the segments around it would leave a hole), and the other
/// partitions are shipped.
#[test]
fn seed_refuses_a_partition_with_a_fifo_segment_and_ships_the_others() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let store = tmp.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    segmirror([
        OsStr::new("generate"),
        OsStr::new("--out"),
        source.as_os_str(),
        OsStr::new("--no-fsync"),
    ])
    .expect_code(0);
    let mut partitions: Vec<PathBuf> = std::fs::read_dir(&source)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("leader-epoch-checkpoint").exists())
        .collect();
    partitions.sort();
    assert!(partitions.len() > 1, "{partitions:?}");
    let fifo = partitions[0].join("00000000000000000001.log");
    mkfifo(&fifo);
    let bounded = run_bounded(
        [
            OsStr::new("seed"),
            OsStr::new("--log-dir"),
            source.as_os_str(),
            OsStr::new("--store"),
            store.as_os_str(),
        ],
        |_| false,
    );
    let run = &bounded.run;
    assert!(!run.stderr.contains("panicked"), "{run}");
    let all = format!("{}{}", run.stdout, run.stderr);
    let line = all
        .lines()
        .find(|l| l.contains(fifo.to_str().unwrap()))
        .unwrap_or_else(|| panic!("the FIFO is not named\n{run}"));
    assert!(line.contains("a FIFO, not a regular file"), "{line}");
    // The other partitions were shipped.
    let dir_name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
    let status = |p: &Path| {
        run.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(dir_name(p).as_str()))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("no status row for {}\n{run}", p.display()))
            .to_string()
    };
    assert_eq!(status(&partitions[0]), "REFUSED", "{run}");
    assert!(partitions[1..].iter().all(|p| status(p) == "complete"), "{run}");
    assert_eq!(run.code, Some(1), "{run}");
}
