//! `segmirror apply`, `seed` and `verify` against a local-folder store that holds what no segmirror wrote: a FIFO
//! where a data object should be, names with a newline, a symlink loop, upload leftovers of a killed seed; and
//! operator mistakes: a mistyped store path, an unknown link, two applies on one mirror. Each gets a clear message
//! naming the object, the documented exit status, no hang, and nothing wrong installed or recorded.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use segmirror_catalog::{Catalog, EventKind};

/// No run may hang: a FIFO opened for reading would block forever.
const RUN_LIMIT: Duration = Duration::from_secs(180);

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_segmirror"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run segmirror")
}

fn finish(mut child: std::process::Child, what: &str) -> Run {
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            panic!("segmirror {what} hung for {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "segmirror {what} panicked: {stderr}");
    Run {
        code: out.status.code().expect("exit code, not a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr,
    }
}

fn segmirror(args: &[&str]) -> Run {
    finish(spawn(args), &args.join(" "))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The sample set seeded into `<tmp>/store` (link `default`).
fn seeded(tmp: &Path) -> PathBuf {
    let log_dir = tmp.join("source");
    let store = tmp.join("store");
    let r = segmirror(&["generate", "--out", s(&log_dir), "--no-fsync"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = segmirror(&["seed", "--log-dir", s(&log_dir), "--store", s(&store)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    store
}

fn apply_args<'a>(tmp: &'a Path, store: &'a Path, extra: &[&'a str]) -> Vec<String> {
    let mut args = vec![
        "apply".to_string(),
        "--store".into(),
        s(store).into(),
        "--mirror".into(),
        s(&tmp.join("mirror")).into(),
        "--catalog".into(),
        s(&tmp.join("catalog.sqlite")).into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn apply(tmp: &Path, store: &Path, extra: &[&str]) -> Run {
    let args = apply_args(tmp, store, extra);
    segmirror(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Every file under `dir` whose path ends with `suffix`.
fn find(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        let t = entry.file_type().unwrap();
        if t.is_dir() {
            out.extend(find(&p, suffix));
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

fn rejections(tmp: &Path) -> Vec<String> {
    Catalog::open(tmp.join("catalog.sqlite"))
        .unwrap()
        .events(None, 10_000)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == EventKind::SegmentRejected)
        .map(|e| e.detail)
        .collect()
}

#[test]
fn a_fifo_data_object_and_foreign_entries_are_reported_and_skipped_without_hanging() {
    let tmp = tempfile::tempdir().unwrap();
    let store = seeded(tmp.path());
    // A FIFO where one partition's first offset index should be: opening it for reading would block forever.
    let victim = find(
        &store.join("default/sample-log-append-time"),
        "00000000000000000000.index",
    )
    .into_iter()
    .next()
    .expect("a shipped index");
    std::fs::remove_file(&victim).unwrap();
    mkfifo(&victim);
    let fifo_key = victim.strip_prefix(&store).unwrap().to_str().unwrap().to_string();
    // Foreign entries: a name with a newline, a symlink loop, a FIFO outside any data folder.
    std::fs::write(store.join("default/bad\nname"), b"x").unwrap();
    std::os::unix::fs::symlink(store.join("default"), store.join("default/loop")).unwrap();
    mkfifo(&store.join("default/pipe"));
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"latin1-\xe9");
        std::fs::write(store.join("default").join(name), b"x").unwrap();
    }

    let r = apply(tmp.path(), &store, &[]);
    assert_eq!(r.code, 1, "a refused segment: {}{}", r.stdout, r.stderr);
    for named in [
        "warning: ignored \"default/bad\\nname\"",
        "warning: ignored \"default/loop\": a symbolic link",
        "warning: ignored \"default/pipe\": a FIFO",
        "warning: ignored \"default/latin1-\u{fffd}\": the name is not UTF-8",
    ] {
        assert!(r.stderr.contains(named), "{named}: {}", r.stderr);
    }
    assert!(
        r.stdout.contains(&format!("{fifo_key}: a FIFO, not a regular file")),
        "{}",
        r.stdout
    );
    // Every other partition is complete; the FIFO's partition has nothing installed, on disk or in the catalog.
    let complete = r.stdout.lines().filter(|l| l.contains(" complete ")).count();
    assert_eq!(complete, 10, "{}", r.stdout);
    assert!(r
        .stdout
        .lines()
        .any(|l| l.starts_with("sample-log-append-time-0") && l.contains("REFUSED")));
    assert!(find(&tmp.path().join("mirror/sample-log-append-time-0"), ".log").is_empty());
    let catalog = Catalog::open(tmp.path().join("catalog.sqlite")).unwrap();
    let key = segmirror_catalog::PartitionKey::new("default", "sample-log-append-time", 0);
    let p = catalog.partition(&key).unwrap();
    assert!(catalog.installed_segments(p.id).unwrap().is_empty());

    // The audit reports each foreign entry and goes on; the FIFO is never opened.
    let r = segmirror(&["verify", &format!("file://{}", store.display())]);
    assert_eq!(r.code, 1, "the manifest naming a FIFO is unsound: {}", r.stdout);
    assert!(
        r.stdout
            .contains("default/loop: not an object segmirror can read: a symbolic link"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains(&format!("{fifo_key}: not an object segmirror can read: a FIFO")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("[unknown_key]"));
    let partitions = r.stdout.matches("sample-").count();
    assert!(partitions >= 11, "every partition is audited: {}", r.stdout);
}

#[test]
fn killed_seed_leftovers_are_reported_by_the_audit_and_removed_by_the_next_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = seeded(tmp.path());
    let url = format!("file://{}", store.display());
    let r = segmirror(&["verify", &url]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(!r.stdout.contains("upload_leftover"));
    // What a seed killed mid-upload leaves: `<key>#<n>` next to where the object would have gone, untouched since.
    let data = find(&store.join("default/sample-transactions"), ".log")[0].clone();
    let stale = PathBuf::from(format!("{}#3", data.display()));
    std::fs::write(&stale, vec![7u8; 4096]).unwrap();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    // One being written right now (another seed's upload under way) must be left alone.
    let fresh = store.join("default/sample-transactions/0/in-flight#9");
    std::fs::write(&fresh, b"partial").unwrap();
    let stale_key = stale.strip_prefix(&store).unwrap().to_str().unwrap().to_string();

    let r = segmirror(&["verify", &url]);
    assert!(
        r.stdout
            .contains(&format!("{stale_key}: an upload's temporary file (4096 bytes)")),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.matches("[upload_leftover]").count(), 2, "{}", r.stdout);

    let r = segmirror(&["seed", "--log-dir", s(&tmp.path().join("source")), "--store", s(&store)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("removed 1 upload leftover(s) of an interrupted seed") && r.stderr.contains(&stale_key),
        "{}",
        r.stderr
    );
    assert!(!stale.exists());
    assert!(fresh.exists(), "an upload under way is not touched");
    // Only temp names are ever removed: every object is still there and the store is sound.
    std::fs::remove_file(&fresh).unwrap();
    let r = segmirror(&["verify", &url]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert!(!r.stdout.contains("upload_leftover"), "{}", r.stdout);
}

#[test]
fn a_mistyped_store_path_is_an_error_and_never_created() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("stroe");
    let r = apply(tmp.path(), &missing, &[]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("the store folder {} does not exist", missing.display())),
        "{}",
        r.stderr
    );
    assert!(!missing.exists());
    assert!(
        !tmp.path().join("mirror").exists(),
        "nothing is touched before the store is known"
    );

    let r = segmirror(&["verify", &format!("file://{}", missing.display())]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains(&format!("the store folder {} does not exist", missing.display())),
        "{}",
        r.stdout
    );
    assert!(!missing.exists());
}

#[test]
fn an_unknown_link_is_an_error_and_never_created() {
    let tmp = tempfile::tempdir().unwrap();
    let store = seeded(tmp.path());
    let r = apply(tmp.path(), &store, &["--link", "defualt"]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("link 'defualt' is neither in the catalog nor under prefix"),
        "{}",
        r.stderr
    );
    let catalog = Catalog::open(tmp.path().join("catalog.sqlite")).unwrap();
    assert!(catalog.links().unwrap().is_empty(), "no link was created");
    drop(catalog);
    let partitions = std::fs::read_dir(tmp.path().join("mirror"))
        .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
        .unwrap_or(0);
    assert_eq!(partitions, 0);
    // The link the bucket holds is applied the first time it is named.
    let r = apply(tmp.path(), &store, &["--link", "default"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
}

#[test]
fn two_applies_on_one_mirror_never_collide() {
    let tmp = tempfile::tempdir().unwrap();
    let store = seeded(tmp.path());
    let mirror = tmp.path().join("mirror");
    std::fs::create_dir_all(&mirror).unwrap();

    // Another apply holds the mirror: a second one exits at once, naming the holder, and touches nothing.
    let lock = std::fs::File::create(mirror.join(".segmirror-apply.lock")).unwrap();
    lock.try_lock().unwrap();
    std::fs::write(
        mirror.join(".segmirror-apply.holder"),
        "pid 4242 since 2026-01-01T00:00:00Z\n",
    )
    .unwrap();
    let r = apply(tmp.path(), &store, &[]);
    assert_eq!(r.code, 2, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("another apply is running on this mirror (pid 4242 since 2026-01-01T00:00:00Z"),
        "{}",
        r.stderr
    );
    let entries: Vec<_> = std::fs::read_dir(&mirror)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(entries.len(), 2, "only the lock and holder files: {entries:?}");
    // With --wait it waits for the holder, then runs.
    let waiting = spawn(
        &apply_args(tmp.path(), &store, &["--wait"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(!mirror.join("sample-transactions-0").exists(), "it waited");
    drop(lock);
    let r = finish(waiting, "apply --wait");
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);

    // Two at once on a fresh mirror: one runs, the other waits or reports the holder; never a staging file deleted
    // under the other, never a healthy object recorded as corrupt.
    for extra in [&["--wait"][..], &[][..]] {
        let tmp2 = tempfile::tempdir().unwrap();
        let args = apply_args(tmp2.path(), &store, extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (a, b) = (spawn(&args), spawn(&args));
        let runs = [finish(a, "apply a"), finish(b, "apply b")];
        for r in &runs {
            assert!(
                r.code == 0 || (extra.is_empty() && r.code == 2 && r.stderr.contains("another apply is running")),
                "{extra:?}: {}{}",
                r.stdout,
                r.stderr
            );
        }
        assert!(runs.iter().any(|r| r.code == 0));
        assert!(rejections(tmp2.path()).is_empty(), "{:?}", rejections(tmp2.path()));
        // The partitions (segmirror's own entries are dot names: `.closed` holds the segments' logs).
        let dirs: Vec<PathBuf> = std::fs::read_dir(tmp2.path().join("mirror"))
            .unwrap()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        assert_eq!(dirs.len(), 11);
        let mut verify = vec!["verify"];
        verify.extend(dirs.iter().map(|d| s(d)));
        let r = segmirror(&verify);
        assert_eq!(r.code, 0, "{}", r.stdout);
    }
}
