use super::*;

#[test]
fn paths_follow_kafka_names() {
    let dir = tempfile::tempdir().unwrap();
    let layout = MirrorLayout::open(&dir.path().join("mirror")).unwrap();
    assert!(layout.root().is_dir());
    assert_eq!(layout.partition_dir("orders", 3), dir.path().join("mirror/orders-3"));
    assert_eq!(
        layout.staging_dir("orders", 3, 100, 250),
        dir.path().join("mirror/.staging/orders-3.100-250")
    );
}

/// The names are on disk: a mirror written by an earlier build must read the same, so each is spelled out here
/// rather than built from the constants.
#[test]
fn the_state_paths_keep_their_on_disk_names() {
    let root = Path::new("/m");
    let name = "orders-3";
    for (built, expected) in [
        (apply_lock_file(root), "/m/.segmirror-apply.lock"),
        (apply_holder_file(root), "/m/.segmirror-apply.holder"),
        (install_staging_root(root), "/m/.staging"),
        (tail_dir(root), "/m/.tail"),
        (state_file(root, name), "/m/.tail/orders-3.json"),
        (claims_dir(root), "/m/.tail/claims"),
        (claim_file(root, name), "/m/.tail/claims/orders-3.json"),
        (progress_dir(root), "/m/.tail/progress"),
        (progress_file(root, name), "/m/.tail/progress/orders-3.json"),
        (retention_file(root, name), "/m/.tail/retention/orders-3.json"),
        (
            replace_staging_file(root, name, 42),
            "/m/.tail/staging/orders-3-00000000000000000042.log",
        ),
        (replace_journal_dir(root), "/m/.tail/replace"),
        (replace_journal_file(root, name), "/m/.tail/replace/orders-3.json"),
        (truncation_journal_dir(root), "/m/.tail/truncations"),
        (
            truncation_journal_file(root, name),
            "/m/.tail/truncations/orders-3.json",
        ),
        (closed_log_file(root, name), "/m/.tail/closed/orders-3.bin"),
        (segment_logs_dir(root, name), "/m/.closed/orders-3"),
        (
            segment_log_file(root, name, 42),
            "/m/.closed/orders-3/00000000000000000042.bin",
        ),
        (archive_dir(root), "/m/.archive"),
        (partition_archive_dir(root, name), "/m/.archive/orders-3"),
        (partition_dir(root, "orders", 3), "/m/orders-3"),
    ] {
        assert_eq!(built, PathBuf::from(expected));
    }
    // A segment log's name gives its base back; other names none.
    let logged = segment_log_file(root, name, 42);
    let file_name = logged.file_name().unwrap().to_str().unwrap();
    assert_eq!(segment_log_base(file_name), Some(42));
    for other in [
        "00000000000000000042.json",
        "42.bin",
        "-0000000000000000042.bin",
        "0000000000000000004x.bin",
    ] {
        assert_eq!(segment_log_base(other), None, "{other}");
    }
    assert_eq!(
        archive_range_file("orders", 3, 5, 17),
        ".archive/orders-3/00000000000000000005-00000000000000000017.log"
    );
}

#[test]
fn the_root_entries_name_every_top_level_entry() {
    for suffix in ["-wal", "-shm", "-journal"] {
        let name = format!("{}{suffix}", segmirror_catalog::CATALOG_FILE_NAME);
        assert!(MIRROR_ROOT_ENTRIES.iter().any(|e| e.name == name), "{name}");
    }
    let root = Path::new("/m");
    for top in [
        apply_lock_file(root),
        apply_holder_file(root),
        install_staging_root(root),
        tail_dir(root),
        archive_dir(root),
        segment_logs_dir(root, "orders-3").parent().unwrap().to_path_buf(),
    ] {
        let name = top.file_name().unwrap().to_str().unwrap();
        assert!(MIRROR_ROOT_ENTRIES.iter().any(|e| e.name == name), "{name}");
    }
}

#[test]
fn a_broker_log_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(META_PROPERTIES_FILE), b"version=1\n").unwrap();
    assert!(matches!(
        MirrorLayout::open(dir.path()),
        Err(LayoutError::IsLogDir { path }) if path == dir.path()
    ));
}

#[test]
fn tailed_partitions_are_those_with_a_state_progress_or_claim_record() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert!(tailed_partitions(root).is_empty(), "no .tail at all");
    for path in [
        state_file(root, "orders-0"),
        progress_file(root, "orders-1"),
        claim_file(root, "my-topic-2"),
        // Not a partition's record: a crash's temporary file, a name without a partition number, another
        // directory's records.
        tail_dir(root).join("orders-3.json.tmp"),
        tail_dir(root).join("orders.json"),
        retention_file(root, "orders-4"),
        replace_journal_file(root, "orders-5"),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"{}").unwrap();
    }
    let found: Vec<(String, i32)> = tailed_partitions(root).into_iter().collect();
    assert_eq!(
        found,
        vec![
            ("my-topic".to_string(), 2),
            ("orders".to_string(), 0),
            ("orders".to_string(), 1)
        ]
    );
}
