//! Unit tests of reconciling a partition directory with the catalog.

use super::*;

fn installed(base: i64, size: u64, sealed: bool) -> Installed {
    Installed {
        base_offset: base,
        next_offset: base + 10,
        last_offset: base + 9,
        size,
        sha256: [0; 32],
        sealed,
        manifest_key: format!("m{base}"),
    }
}

fn write_segment(dir: &Path, base: i64, log_size: usize) {
    for kind in [SegmentFileKind::Log, SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
        let len = if kind == SegmentFileKind::Log { log_size } else { 0 };
        fs::write(
            dir.join(segment_format::dir::segment_file_name(base, kind)),
            vec![0u8; len],
        )
        .unwrap();
    }
}

#[test]
fn installed_segments_must_be_on_disk_as_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    fs::create_dir(&dir).unwrap();
    write_segment(&dir, 0, 100);
    write_segment(&dir, 10, 50);
    let disk = scan(&dir).unwrap().unwrap();
    let ok = [installed(0, 100, true), installed(10, 50, false)];
    assert_eq!(check_installed("t-0", &dir, Some(&disk), &ok).unwrap(), None);
    // The last, unsealed segment grew on disk: an interrupted replacement.
    let grown = [installed(0, 100, true), installed(10, 40, false)];
    assert_eq!(check_installed("t-0", &dir, Some(&disk), &grown).unwrap(), Some(10));
    // A sealed or earlier segment that differs, a shrunk one, or missing files: behind the catalog.
    for bad in [
        vec![installed(0, 90, true), installed(10, 50, false)],
        vec![installed(0, 100, true), installed(10, 40, true)],
        vec![installed(0, 100, true), installed(10, 60, false)],
        vec![
            installed(0, 100, true),
            installed(10, 50, true),
            installed(20, 1, false),
        ],
    ] {
        assert!(matches!(
            check_installed("t-0", &dir, Some(&disk), &bad),
            Err(Error::DiskBehindCatalog { .. })
        ));
    }
    fs::remove_file(dir.join("00000000000000000000.index")).unwrap();
    let disk = scan(&dir).unwrap().unwrap();
    match check_installed("t-0", &dir, Some(&disk), &ok) {
        Err(Error::DiskBehindCatalog { path, base_offset, .. }) => {
            assert_eq!((path, base_offset), (dir.join("00000000000000000000.index"), 0))
        }
        other => panic!("{other:?}"),
    }
    assert!(check_installed("t-0", &dir, None, &ok).is_err());
    assert_eq!(check_installed("t-0", &dir, None, &[]).unwrap(), None);
}

#[test]
fn sweep_removes_only_segments_the_catalog_does_not_list() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    fs::create_dir(&dir).unwrap();
    write_segment(&dir, 0, 10);
    write_segment(&dir, 10, 10);
    fs::write(dir.join("00000000000000000010.snapshot"), b"s").unwrap();
    fs::write(dir.join(LEADER_EPOCH_CHECKPOINT_FILE), b"0\n0\n").unwrap();
    fs::write(dir.join("leader-epoch-checkpoint.tmp"), b"0\n").unwrap();
    fs::write(dir.join("notes.txt"), b"mine").unwrap();
    let disk = scan(&dir).unwrap().unwrap();
    assert_eq!(disk.temp_files, [dir.join("leader-epoch-checkpoint.tmp")]);
    assert_eq!(remove_temp_files(&dir, &disk).unwrap().len(), 1);
    let removed = sweep(&dir, &BTreeSet::from([0]), None).unwrap();
    assert_eq!(removed.len(), 4);
    assert!(removed[0].ends_with("00000000000000000010.log"), "{removed:?}");
    let mut left: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex",
            "leader-epoch-checkpoint",
            "notes.txt"
        ]
    );
    assert!(sweep(&tmp.path().join("absent"), &BTreeSet::new(), None)
        .unwrap()
        .is_empty());
}

#[test]
fn sweep_keeps_the_log_end_snapshot_and_removes_stale_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("t-0");
    fs::create_dir(&dir).unwrap();
    write_segment(&dir, 0, 10);
    // A stale log-end snapshot of a shorter version, the installed one at the log end (20), and an interrupted
    // install of a segment starting there.
    fs::write(dir.join("00000000000000000007.snapshot"), b"old").unwrap();
    fs::write(dir.join("00000000000000000020.snapshot"), b"end").unwrap();
    fs::write(dir.join("00000000000000000020.log"), b"partial").unwrap();
    let removed = sweep(&dir, &BTreeSet::from([0]), Some(20)).unwrap();
    let mut names: Vec<String> = removed
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["00000000000000000007.snapshot", "00000000000000000020.log"]);
    assert_eq!(fs::read(dir.join("00000000000000000020.snapshot")).unwrap(), b"end");
    // Without a log end there (the catalog's end moved on), it is a leftover like any other.
    let removed = sweep(&dir, &BTreeSet::from([0]), Some(30)).unwrap();
    assert_eq!(removed, [dir.join("00000000000000000020.snapshot")]);
}

#[test]
fn staging_is_cleared_and_lineage_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = MirrorLayout::open(tmp.path()).unwrap();
    assert!(!clear_staging(&layout).unwrap());
    fs::create_dir_all(layout.staging_dir("t", 0, 0, 10)).unwrap();
    fs::write(layout.staging_dir("t", 0, 0, 10).join("x"), b"x").unwrap();
    assert!(clear_staging(&layout).unwrap());
    assert!(!layout.staging_root().exists());

    let dir = layout.partition_dir("t", 0);
    fs::create_dir_all(&dir).unwrap();
    PartitionMetadata::new(Uuid([3; 16]))
        .write(&dir.join(PARTITION_METADATA_FILE))
        .unwrap();
    let disk = scan(&dir).unwrap().unwrap();
    assert!(check_lineage(&dir, &disk, &Uuid([3; 16])).is_ok());
    assert!(matches!(
        check_lineage(&dir, &disk, &Uuid([4; 16])),
        Err(Error::ForeignPartitionDir { .. })
    ));
}
