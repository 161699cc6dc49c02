//! Unit tests of the bucket reading: the lineage rule and hostile manifest bytes.

use segmirror_transport::ObjectInfo;

use super::*;

fn id(n: u8) -> Uuid {
    let mut b = [7u8; 16];
    b[15] = n;
    Uuid(b)
}

fn lineage(times: &[i64]) -> Lineage {
    let mut l = Lineage::default();
    for (i, &t) in times.iter().enumerate() {
        l.manifests.insert(
            i as i64 * 100,
            ObjectInfo {
                key: format!("k{i}"),
                size: 1,
                last_modified_ms: t,
                e_tag: None,
            },
        );
    }
    l
}

#[test]
fn a_new_partition_takes_the_newest_lineage() {
    let mut ls = BTreeMap::new();
    assert_eq!(choose_lineage(None, &ls), LineageChoice::Nothing);
    ls.insert(id(1), lineage(&[10, 20]));
    ls.insert(id(2), lineage(&[30]));
    ls.insert(id(3), Lineage::default()); // data only: not a lineage yet
    assert_eq!(
        choose_lineage(None, &ls),
        LineageChoice::Use {
            topic_id: id(2),
            older: vec![id(1)]
        }
    );
}

#[test]
fn a_recorded_lineage_is_kept_until_a_newer_one_appears() {
    let mut ls = BTreeMap::new();
    ls.insert(id(1), lineage(&[10, 40]));
    ls.insert(id(2), lineage(&[30]));
    let one = id(1).to_string();
    assert_eq!(
        choose_lineage(Some(&one), &ls),
        LineageChoice::Use {
            topic_id: id(1),
            older: vec![id(2)]
        }
    );
    ls.insert(id(2), lineage(&[30, 50]));
    assert_eq!(
        choose_lineage(Some(&one), &ls),
        LineageChoice::Break {
            recorded: one.clone(),
            offered: id(2)
        }
    );
    // The recorded lineage vanished from the store: whatever is there now is another topic.
    ls.remove(&id(1));
    assert!(matches!(choose_lineage(Some(&one), &ls), LineageChoice::Break { .. }));
}

#[test]
fn hostile_manifest_bytes_are_refused_not_errors() {
    let prefix = KeyPrefix::root();
    for bytes in [&b""[..], b"{", b"{\"format\":\"segmirror.manifest.v9\"}", b"[1,2]"] {
        assert!(matches!(
            check_manifest(&prefix, "l/t/0/x/manifests/00000000000000000000.json", bytes),
            ManifestRead::Invalid(Refusal::InvalidManifest { .. })
        ));
    }
}
