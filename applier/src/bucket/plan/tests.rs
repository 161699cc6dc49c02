use proptest::prelude::*;
use segment_format::dir::SegmentFileKind;
use segment_format::partition_metadata::Uuid;
use segmirror_transport::manifest::{ManifestFile, SegmentFileName, Sha256Digest, ShipperStamp, MANIFEST_FORMAT_V1};

use super::*;

/// A manifest for `[base, next)` whose `.log` content is identified by `content` (size and hash derive from it).
fn manifest(base: i64, next: i64, sealed: bool, content: u8) -> Box<Manifest> {
    let empty = next == base;
    let file = |kind: SegmentFileKind, size: u64| ManifestFile {
        name: SegmentFileName::new(base, kind),
        key: String::new(),
        size,
        crc32c: 0,
        sha256: Sha256Digest([content; 32]),
        mtime_ms: 0,
    };
    Box::new(Manifest {
        format: MANIFEST_FORMAT_V1.to_string(),
        link: "l".into(),
        topic: "t".into(),
        partition: 0,
        source_topic_id: Uuid([1; 16]),
        source_cluster_id: "c".into(),
        base_offset: base,
        first_offset: (!empty).then_some(base),
        last_offset: (!empty).then_some(next - 1),
        next_offset: next,
        batches: u64::from(!empty),
        records: u64::from(!empty),
        max_timestamp: -1,
        sealed,
        epochs: Vec::new(),
        log_start_offset: 0,
        files: vec![
            file(SegmentFileKind::Log, if empty { 0 } else { 100 + u64::from(content) }),
            file(SegmentFileKind::Index, 0),
            file(SegmentFileKind::TimeIndex, 0),
        ],
        end_snapshot: None,
        log_chunks: Vec::new(),
        shipper: ShipperStamp {
            id: "s".into(),
            lease_epoch: 1,
        },
        created_at_ms: 0,
    })
}

fn read(base: i64, next: i64, sealed: bool) -> Candidate {
    read_content(base, next, sealed, 0)
}

fn read_content(base: i64, next: i64, sealed: bool, content: u8) -> Candidate {
    Candidate::Read {
        key: format!("m{base}"),
        manifest: manifest(base, next, sealed, content),
    }
}

fn installed(base: i64, next: i64, sealed: bool) -> Installed {
    Installed {
        base_offset: base,
        next_offset: next,
        last_offset: next - 1,
        size: 100,
        sha256: [0; 32],
        sealed,
        manifest_key: format!("m{base}"),
    }
}

/// A compact picture of a plan: `I0` install, `R0` replace, `S0:why`, `X0` refuse, `W0` wait.
fn show(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Step::Install { manifest, replaces, .. } => {
                format!("{}{}", if replaces.is_some() { "R" } else { "I" }, manifest.base_offset)
            }
            Step::Skip { base_offset, why } => format!(
                "S{base_offset}:{}",
                match why {
                    SkipSegment::AlreadyInstalled => "installed".to_string(),
                    SkipSegment::Superseded { by } => format!("by{by}"),
                    SkipSegment::Empty => "empty".to_string(),
                    SkipSegment::BeforeMirrorStart => "before".to_string(),
                }
            ),
            Step::Refuse { base_offset, .. } => format!("X{base_offset}"),
            Step::Wait { base_offset, .. } => format!("W{base_offset}"),
        })
        .collect()
}

#[test]
fn a_fresh_partition_installs_its_chain_in_order() {
    let steps = plan(
        &[],
        vec![read(100, 200, true), read(0, 100, true), read(200, 250, false)],
    );
    assert_eq!(show(&steps), ["I0", "I100", "I200"]);
}

/// A manifest for `[base, next)` shipped when the source's log start offset was `log_start`.
fn read_with_log_start(base: i64, next: i64, sealed: bool, log_start: i64) -> Candidate {
    let mut manifest = manifest(base, next, sealed, 0);
    manifest.log_start_offset = log_start;
    Candidate::Read {
        key: format!("m{base}"),
        manifest,
    }
}

#[test]
fn a_gap_is_refused_unless_the_log_start_proves_it() {
    // A manifest missing from the middle of the chain: refused, naming the missing range and both manifests.
    let steps = plan(
        &[],
        vec![read(0, 100, true), read(150, 200, true), read(300, 310, false)],
    );
    assert_eq!(show(&steps), ["I0", "X150"]);
    match &steps[1] {
        Step::Refuse { key, refusal, .. } => {
            assert_eq!(key, "m150");
            assert_eq!(
                refusal,
                &Refusal::Gap {
                    from: 100,
                    to: 150,
                    after: "m0".into(),
                    log_start_offset: 0
                }
            );
            assert!(
                refusal.to_string().contains("missing offsets [100, 150) between m0"),
                "{refusal}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The same after what a previous run installed.
    let steps = plan(&[installed(0, 120, true)], vec![read(245, 300, true)]);
    assert_eq!(show(&steps), ["X245"]);
    // A log start at the gap's end but not beyond its base does not prove it.
    let steps = plan(
        &[installed(0, 100, true)],
        vec![read_with_log_start(150, 200, true, 149)],
    );
    assert_eq!(show(&steps), ["X150"]);
    // Retention deleted [100, 150) at the source before it was shipped: the manifest's log start says so.
    let steps = plan(
        &[installed(0, 100, true)],
        vec![read_with_log_start(150, 200, true, 150)],
    );
    assert_eq!(show(&steps), ["I150"]);
    // An empty mirror may start anywhere.
    let steps = plan(&[], vec![read(500, 600, true)]);
    assert_eq!(show(&steps), ["I500"]);
}

#[test]
fn nothing_is_installed_after_an_unsealed_segment() {
    // An unsealed segment with a successor: wait for its sealed version, even without a gap.
    let steps = plan(&[], vec![read(0, 100, false), read(100, 200, true)]);
    assert_eq!(show(&steps), ["I0", "W0"]);
    let steps = plan(&[installed(0, 80, false)], vec![read(100, 200, true)]);
    assert_eq!(show(&steps), ["W0"]);
}

#[test]
fn reruns_skip_what_is_installed_and_grow_the_tail() {
    let history = [installed(0, 100, true), installed(100, 150, false)];
    let steps = plan(
        &history,
        vec![Candidate::Settled { base_offset: 0 }, read(100, 150, false)],
    );
    assert_eq!(show(&steps), ["S0:installed", "S100:installed"]);
    // The tail grew, then got sealed and a new segment followed.
    let steps = plan(
        &history,
        vec![
            Candidate::Settled { base_offset: 0 },
            read_content(100, 180, true, 1),
            read(180, 190, false),
        ],
    );
    assert_eq!(show(&steps), ["S0:installed", "R100", "I180"]);
    match &steps[1] {
        Step::Install { replaces, .. } => assert_eq!(*replaces, Some(150)),
        other => panic!("{other:?}"),
    }
    // The same bytes, now sealed: installed again so that the catalog records it final.
    let steps = plan(&history, vec![read(100, 150, true)]);
    assert_eq!(show(&steps), ["R100"]);
}

#[test]
fn versions_that_do_not_fit_are_refused_and_stop_the_partition() {
    let history = [installed(0, 100, true), installed(100, 150, false)];
    // A sealed segment changed.
    assert_eq!(
        show(&plan(
            &history,
            vec![read_content(0, 100, true, 7), read(150, 160, true)]
        )),
        ["X0"]
    );
    // The tail shrank, or kept its range with other bytes.
    assert_eq!(show(&plan(&history, vec![read(100, 120, false)])), ["X100"]);
    assert_eq!(show(&plan(&history, vec![read_content(100, 150, false, 7)])), ["X100"]);
    // Growing a segment that has a successor.
    let longer = [installed(0, 100, false), installed(100, 150, false)];
    assert_eq!(show(&plan(&longer, vec![read_content(0, 120, false, 3)])), ["X0"]);
    // A new segment starting inside the installed range, not covered by one segment.
    assert_eq!(show(&plan(&history, vec![read(120, 200, true)])), ["X120"]);
    // An invalid manifest.
    let invalid = Candidate::Invalid {
        key: "m150".into(),
        base_offset: 150,
        refusal: Refusal::InvalidManifest { reason: "bad".into() },
    };
    let history = [installed(0, 100, true), installed(100, 150, true)];
    assert_eq!(show(&plan(&history, vec![invalid, read(200, 300, true)])), ["X150"]);
}

#[test]
fn stale_empty_and_early_manifests_are_skipped() {
    // The cleaner merged [100, 150) into the segment at 0, which now ends at 150.
    let steps = plan(
        &[],
        vec![read(0, 150, true), read(100, 150, true), read(150, 160, false)],
    );
    assert_eq!(show(&steps), ["I0", "S100:by0", "I150"]);
    let steps = plan(&[installed(0, 150, true)], vec![read(100, 150, true)]);
    assert_eq!(show(&steps), ["S100:by0"]);
    // Empty versions have nothing to install.
    let steps = plan(&[], vec![read(0, 100, true), read(100, 100, false)]);
    assert_eq!(show(&steps), ["I0", "S100:empty"]);
    // Below the first installed segment.
    let steps = plan(
        &[installed(500, 600, true)],
        vec![read(0, 100, true), read(600, 700, true)],
    );
    assert_eq!(show(&steps), ["S0:before", "I600"]);
}

/// A sealed version of the segment at `base` that the cleaner emptied: no batches, an empty `.log`, and still the
/// range up to the next segment's base.
fn read_emptied(base: i64, next: i64) -> Candidate {
    let mut manifest = manifest(base, base, true, 0);
    manifest.next_offset = next;
    Candidate::Read {
        key: format!("m{base}"),
        manifest,
    }
}

/// The installed history after the steps of a run: each install added (or replacing the tail), nothing else.
fn after(history: &[Installed], steps: &[Step]) -> Vec<Installed> {
    let mut out = history.to_vec();
    for step in steps {
        if let Step::Install { manifest, replaces, .. } = step {
            if replaces.is_some() {
                out.pop();
            }
            let mut s = installed(manifest.base_offset, manifest.next_offset, manifest.sealed);
            s.size = manifest.file(SegmentFileKind::Log).map_or(0, |f| f.size);
            s.sha256 = [0; 32];
            out.push(s);
        }
    }
    out
}

#[test]
fn an_emptied_segment_in_the_middle_of_the_log_covers_its_range() {
    // Segment 400 was emptied by the cleaner between 297 and 429: both neighbours are installed, 400 is skipped, and
    // the install of 429 names the empty range before it for the catalog.
    let candidates = || {
        vec![
            read(297, 400, true),
            read_emptied(400, 429),
            read(429, 500, true),
            read(500, 510, false),
        ]
    };
    let steps = plan(&[installed(0, 297, true)], candidates());
    assert_eq!(show(&steps), ["I297", "S400:empty", "I429", "I500"]);
    let preceded: Vec<_> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Install { preceded, .. } => Some(*preceded),
            _ => None,
        })
        .collect();
    assert_eq!(
        preceded,
        [
            Preceded::ByInstalled,
            Preceded::ByEmpty { from: 400 },
            Preceded::ByInstalled
        ]
    );
    // A rerun over what the first installed installs nothing and refuses nothing: the empty version now lies between
    // installed segments.
    let history = after(&[installed(0, 297, true)], &steps);
    assert_eq!(
        history
            .iter()
            .map(|s| (s.base_offset, s.next_offset))
            .collect::<Vec<_>>(),
        [(0, 297), (297, 400), (429, 500), (500, 510)]
    );
    let again = plan(&history, candidates());
    assert_eq!(
        show(&again),
        ["S297:installed", "S400:empty", "S429:installed", "S500:installed"]
    );
    // A run stopped after 297 resumes at the empty version.
    let resumed = plan(&[installed(297, 400, true)], candidates());
    assert_eq!(show(&resumed), ["S297:installed", "S400:empty", "I429", "I500"]);
    // Several emptied segments in a row: the range starts at the first.
    let steps = plan(
        &[installed(0, 100, true)],
        vec![read_emptied(100, 120), read_emptied(120, 150), read(150, 160, true)],
    );
    assert_eq!(show(&steps), ["S100:empty", "S120:empty", "I150"]);
    assert!(matches!(
        steps[2],
        Step::Install {
            preceded: Preceded::ByEmpty { from: 100 },
            ..
        }
    ));
}

#[test]
fn an_emptied_segment_explains_no_hole_but_its_own() {
    // Offsets [100, 120) are missing before the emptied segment: it is skipped, and what follows is still refused.
    let steps = plan(
        &[installed(0, 100, true)],
        vec![read_emptied(120, 150), read(150, 200, true)],
    );
    assert_eq!(show(&steps), ["S120:empty", "X150"]);
    match &steps[1] {
        Step::Refuse { refusal, .. } => assert!(matches!(refusal, Refusal::Gap { from: 100, to: 150, .. })),
        other => panic!("{other:?}"),
    }
    // Offsets [150, 170) are missing after it.
    let steps = plan(
        &[installed(0, 100, true)],
        vec![read_emptied(100, 150), read(170, 200, true)],
    );
    assert_eq!(show(&steps), ["S100:empty", "X170"]);
    match &steps[1] {
        Step::Refuse { refusal, .. } => assert!(matches!(refusal, Refusal::Gap { from: 150, to: 170, .. })),
        other => panic!("{other:?}"),
    }
    // An unsealed empty version covers nothing: what follows it waits for nothing and is refused as a hole.
    let mut unsealed = read_emptied(100, 150);
    if let Candidate::Read { manifest, .. } = &mut unsealed {
        manifest.sealed = false;
    }
    let steps = plan(&[installed(0, 100, true)], vec![unsealed, read(150, 200, true)]);
    assert_eq!(show(&steps), ["S100:empty", "X150"]);
    // An empty version overlapping installed offsets is still refused.
    let steps = plan(
        &[installed(0, 100, true), installed(120, 200, true)],
        vec![read_emptied(90, 120)],
    );
    assert_eq!(show(&steps), ["X90"]);
}

fn arb_candidate() -> impl Strategy<Value = Candidate> {
    (0i64..20, 0i64..6, any::<bool>(), 0u8..3, 0u8..10).prop_map(|(b, len, sealed, content, kind)| {
        let base = b * 10;
        match kind {
            0 => Candidate::Settled { base_offset: base },
            1 => Candidate::Invalid {
                key: format!("m{base}"),
                base_offset: base,
                refusal: Refusal::InvalidManifest { reason: "x".into() },
            },
            _ => read_content(base, base + len * 10, sealed, content),
        }
    })
}

fn arb_history() -> impl Strategy<Value = Vec<Installed>> {
    proptest::collection::vec((1i64..4, 0i64..3, any::<bool>()), 0..5).prop_map(|parts| {
        let mut at = 0;
        let mut out = Vec::new();
        let n = parts.len();
        for (i, (len, gap, sealed)) in parts.into_iter().enumerate() {
            at += gap * 10;
            let next = at + len * 10;
            // Only the last installed segment may be unsealed.
            out.push(installed(at, next, sealed || i + 1 < n));
            at = next;
        }
        out
    })
}

proptest! {
    /// Whatever the history and the bucket hold: the plan never panics, installs strictly advance without overlap
    /// (a replacement only of the current tail, only growing it), nothing follows a refusal or a wait, and nothing
    /// is installed after an unsealed segment or past a hole.
    #[test]
    fn plans_keep_the_ordering_rule(history in arb_history(), candidates in proptest::collection::vec(arb_candidate(), 0..12)) {
        let mut dedup: Vec<Candidate> = Vec::new();
        for c in candidates {
            if !dedup.iter().any(|d| d.base_offset() == c.base_offset()) {
                dedup.push(c);
            }
        }
        let steps = plan(&history, dedup);
        let mut ranges: Vec<(i64, i64, bool)> = history.iter().map(|s| (s.base_offset, s.next_offset, s.sealed)).collect();
        for (i, step) in steps.iter().enumerate() {
            let last_step = i + 1 == steps.len();
            match step {
                Step::Install { manifest, replaces, .. } => {
                    prop_assert!(manifest.batches > 0);
                    match replaces {
                        Some(prev) => {
                            let tail = ranges.pop();
                            prop_assert_eq!(tail.map(|t| (t.0, t.1, t.2)), Some((manifest.base_offset, *prev, false)));
                            prop_assert!(manifest.next_offset >= *prev);
                        }
                        None => {
                            if let Some(&(_, end, sealed)) = ranges.last() {
                                prop_assert!(manifest.base_offset >= end);
                                prop_assert!(
                                    manifest.base_offset == end || manifest.log_start_offset >= manifest.base_offset,
                                    "installed past a hole"
                                );
                                prop_assert!(sealed, "installed after an unsealed segment");
                            }
                        }
                    }
                    ranges.push((manifest.base_offset, manifest.next_offset, manifest.sealed));
                }
                Step::Refuse { .. } | Step::Wait { .. } => prop_assert!(last_step),
                Step::Skip { .. } => {}
            }
        }
    }
}
