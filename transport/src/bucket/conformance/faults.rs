//! Faults injected into a transport ([`Faulty`]) surface as clear errors, or as
//! documents refused, and never as bytes silently accepted; a retried call after
//! a failure succeeds. Runs over any backend (the local folder in this crate's
//! tests, S3 in `segmirror-tests`).

use std::time::Duration;

use bytes::Bytes;

use super::contract::{manifest_for, partition, stage_version, staged_files, BASE, TOPIC_ID};
use super::faulty::{Fault, Faulty, Op};
use crate::bucket::traits::{SegmentSink, SegmentSource};
use segmirror_contract::error::{Error, MismatchKind};
use segmirror_contract::index::ManifestRead;

/// Run every fault check against `t` (which must have nothing injected).
pub async fn run_all<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    failed_calls_are_transient_errors_and_do_nothing(t).await;
    a_lost_commit_answer_is_retried_safely(t).await;
    damaged_deliveries_are_mismatches(t).await;
    damaged_documents_are_refused(t).await;
    damaged_stored_files_are_caught_at_fetch(t).await;
    delayed_calls_pass_through(t).await;
    assert_eq!(t.pending(), 0, "faults planned but never reached");
}

fn assert_transient<T: std::fmt::Debug>(what: &str, r: Result<T, Error>) {
    match r {
        Err(e) => assert!(e.is_transient(), "{what}: {e}"),
        Ok(v) => panic!("{what}: an injected failure was not reported: {v:?}"),
    }
}

/// Each call failed once reports a transient error and changes nothing; the next call works.
pub async fn failed_calls_are_transient_errors_and_do_nothing<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    let p = partition("fault-fail");
    let dir = tempfile::tempdir().unwrap();
    let key = format!("{}/doc", p.dir());
    t.inject(Op::Stage, Fault::Fail);
    assert_transient("stage", t.stage_bytes(&key, Bytes::from_static(b"doc")).await);
    assert!(matches!(t.read_document(&key, 10).await, Err(Error::NotFound { .. })));
    t.stage_bytes(&key, Bytes::from_static(b"doc")).await.unwrap();

    t.inject(Op::List, Fault::Fail);
    assert_transient("list", t.index(p.prefix(), None).await);

    t.inject(Op::AcquireLease, Fault::Fail);
    assert_transient("acquire", t.acquire_lease(&p, "me").await);
    let index = t.index(p.prefix(), None).await.unwrap();
    assert!(index.partitions.get(&p).is_none_or(|part| part.leases.is_empty()));

    let files = staged_files(t, &p, dir.path()).await;
    let lease = t.acquire_lease(&p, "me").await.unwrap();
    let manifest = manifest_for(&p, files.clone(), lease.epoch);
    let mkey = p.manifest_key(&TOPIC_ID, BASE).unwrap();
    t.inject(Op::Commit, Fault::Fail);
    assert_transient("commit", t.commit(p.prefix(), &lease, &manifest).await);
    assert!(matches!(
        t.read_manifest(p.prefix(), &mkey).await.unwrap(),
        ManifestRead::Gone
    ));
    t.commit(p.prefix(), &lease, &manifest).await.unwrap();

    t.inject(Op::ReadDocument, Fault::Fail);
    assert_transient("read manifest", t.read_manifest(p.prefix(), &mkey).await);

    let dest = dir.path().join("fetched");
    t.inject(Op::Fetch, Fault::Fail);
    assert_transient("fetch", t.fetch_manifest_file(&files[0], &dest).await);
    assert!(!dest.exists());
    t.fetch_manifest_file(&files[0], &dest).await.unwrap();
}

/// A commit done whose answer was lost is an error; committing again leaves exactly that manifest.
pub async fn a_lost_commit_answer_is_retried_safely<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    let p = partition("fault-lost");
    let dir = tempfile::tempdir().unwrap();
    let files = staged_files(t, &p, dir.path()).await;
    let lease = t.acquire_lease(&p, "me").await.unwrap();
    let manifest = manifest_for(&p, files, lease.epoch);
    t.inject(Op::Commit, Fault::LoseAnswer);
    assert_transient("commit", t.commit(p.prefix(), &lease, &manifest).await);
    t.commit(p.prefix(), &lease, &manifest).await.unwrap();
    let mkey = p.manifest_key(&TOPIC_ID, BASE).unwrap();
    match t.read_manifest(p.prefix(), &mkey).await.unwrap() {
        ManifestRead::Valid(m) => assert_eq!(*m, manifest),
        other => panic!("{other:?}"),
    }
}

/// Bytes truncated or corrupted on their way to the receiver are a size or SHA-256 mismatch, and no file is left.
pub async fn damaged_deliveries_are_mismatches<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    let p = partition("fault-fetch");
    let dir = tempfile::tempdir().unwrap();
    let staged = stage_version(t, &p, dir.path()).await;
    let dest = dir.path().join("fetched");
    for (file, _) in &staged {
        for (fault, expected) in [
            (Fault::Truncate, MismatchKind::Size),
            (Fault::Corrupt, MismatchKind::Sha256),
        ] {
            t.inject(Op::Fetch, fault);
            match t.fetch_manifest_file(file, &dest).await {
                Err(Error::Mismatch { what, ref key, .. }) if what == expected && key == &file.key => {}
                other => panic!("{}: {fault:?} gave {other:?}", file.key),
            }
            assert!(!dest.exists(), "{fault:?} left {}", dest.display());
        }
    }
}

/// A manifest or lease truncated or corrupted on the way is refused as a bad document, never read as valid.
pub async fn damaged_documents_are_refused<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    let p = partition("fault-doc");
    let dir = tempfile::tempdir().unwrap();
    let files = staged_files(t, &p, dir.path()).await;
    let lease = t.acquire_lease(&p, "me").await.unwrap();
    t.commit(p.prefix(), &lease, &manifest_for(&p, files, lease.epoch))
        .await
        .unwrap();
    let mkey = p.manifest_key(&TOPIC_ID, BASE).unwrap();
    for fault in [Fault::Truncate, Fault::Corrupt] {
        t.inject(Op::ReadDocument, fault);
        match t.read_manifest(p.prefix(), &mkey).await.unwrap() {
            ManifestRead::Invalid(Error::BadDocument { key, .. }) => assert_eq!(key, mkey),
            other => panic!("{fault:?} gave {other:?}"),
        }
        t.inject(Op::ReadDocument, fault);
        assert!(matches!(
            t.read_lease(&p, lease.epoch).await,
            Err(Error::BadDocument { .. })
        ));
    }
}

/// A file damaged where it was stored (the sender reported the digest of what it sent) is caught when fetched.
pub async fn damaged_stored_files_are_caught_at_fetch<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    let p = partition("fault-stored");
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("file");
    std::fs::write(&local, super::test_bytes(4096, 9)).unwrap();
    let dest = dir.path().join("fetched");
    for (fault, expected) in [
        (Fault::Truncate, MismatchKind::Size),
        (Fault::Corrupt, MismatchKind::Sha256),
    ] {
        let key = format!("{}/{fault:?}", p.dir());
        t.inject(Op::Stage, fault);
        let staged = t.stage_file(&key, &local, None).await.unwrap();
        match t
            .fetch_file(&key, &dest, staged.digest.size, &staged.digest.sha256)
            .await
        {
            Err(Error::Mismatch { what, .. }) if what == expected => {}
            other => panic!("{fault:?} gave {other:?}"),
        }
        assert!(!dest.exists());
    }
}

/// A delay on every call changes no result.
pub async fn delayed_calls_pass_through<T: SegmentSink + SegmentSource>(t: &Faulty<T>) {
    let delay = Fault::Delay(Duration::from_millis(20));
    for op in [
        Op::Stage,
        Op::AcquireLease,
        Op::Commit,
        Op::List,
        Op::ReadDocument,
        Op::Fetch,
    ] {
        t.inject(op, delay);
    }
    let p = partition("fault-delay");
    let dir = tempfile::tempdir().unwrap();
    let staged = stage_version(t, &p, dir.path()).await;
    let lease = t.acquire_lease(&p, "me").await.unwrap();
    let manifest = manifest_for(&p, staged.iter().map(|(f, _)| f.clone()).collect(), lease.epoch);
    t.commit(p.prefix(), &lease, &manifest).await.unwrap();
    assert_eq!(t.index(p.prefix(), None).await.unwrap().partitions.len(), 1);
    let mkey = p.manifest_key(&TOPIC_ID, BASE).unwrap();
    assert!(matches!(t.read_manifest(p.prefix(), &mkey).await.unwrap(), ManifestRead::Valid(m) if *m == manifest));
    let dest = dir.path().join("fetched");
    t.fetch_manifest_file(&staged[0].0, &dest).await.unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), staged[0].1);
}
