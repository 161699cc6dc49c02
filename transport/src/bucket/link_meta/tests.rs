//! Link metadata through a local bucket: a version round-trips; hostile or tampered objects are refused naming the
//! key and the field; metadata keys are the contract's (not foreign) and a listing of versions skips their data.

use std::collections::BTreeMap;

use super::*;
use crate::bucket::store::{Store, StoreUrl};
use crate::BucketIndex;
use segmirror_contract::digest::digest_of;

const LINK: &str = "east";
const TOPIC_ID: &str = "MZ3ezZJvTAWUZ0oR9yzcCQ";

pub(crate) fn sample(version: u64) -> LinkMeta {
    LinkMeta::new(
        LINK,
        version,
        120,
        vec![TopicMeta {
            name: "orders".into(),
            topic_id: TOPIC_ID.into(),
            partitions: 3,
            configs: BTreeMap::from([("retention.ms".to_string(), "86400000".to_string())]),
        }],
        "app-.*",
        vec![
            GroupOffset {
                group: "app-b".into(),
                topic: "orders".into(),
                partition: 0,
                offset: 40,
                leader_epoch: None,
                metadata: String::new(),
                commit_timestamp: 1,
            },
            GroupOffset {
                group: "app-a".into(),
                topic: "orders".into(),
                partition: 2,
                offset: 7,
                leader_epoch: Some(0),
                metadata: "m".into(),
                commit_timestamp: 2,
            },
        ],
    )
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let url = StoreUrl::parse(dir.path().join("bucket").to_str().unwrap()).unwrap();
    let store = Store::open(&url, &Default::default()).unwrap();
    (dir, store)
}

fn prefix() -> KeyPrefix {
    KeyPrefix::new("m").unwrap()
}

#[tokio::test]
async fn a_version_round_trips_and_the_newest_manifest_wins() {
    let (_dir, store) = store();
    assert_eq!(read_latest(&store, &prefix(), LINK).await.unwrap(), None);
    publish(&store, &prefix(), &sample(1), "test").await.unwrap();
    let mut second = sample(2);
    second.offsets.offsets[0].offset = 50;
    publish(&store, &prefix(), &second, "test").await.unwrap();
    let read = read_latest(&store, &prefix(), LINK).await.unwrap().unwrap();
    assert_eq!(read, second);
    assert_eq!(read.offsets.offsets[0].group, "app-a", "sorted by group");
    assert!(second.same_content(&read) && !sample(1).same_content(&read));
    let mut moved = read.clone();
    moved.topics.metadata_end_offset += 100;
    assert!(moved.same_content(&read), "the metadata log's end alone is not content");

    // The index sets metadata keys apart, and a listing of versions leaves their data out.
    let index = BucketIndex::build(&prefix(), SegmentSource::list(&store, "m").await.unwrap());
    assert!(index.foreign.is_empty(), "{:?}", index.foreign);
    assert_eq!(index.meta.len(), 5, "two versions of two objects and one manifest");
    let versions = store.list_versions(&prefix(), "m/east").await.unwrap();
    let keys: Vec<&str> = versions.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["m/east/_meta/manifest.json", "m/east/link@changes.json"]);
    assert_eq!(
        index.link_changes.len(),
        1,
        "each publication rewrites the link's change notice"
    );
}

#[tokio::test]
async fn a_tampered_object_or_manifest_is_refused_naming_the_key_and_field() {
    let (dir, store) = store();
    publish(&store, &prefix(), &sample(1), "test").await.unwrap();
    let root = dir.path().join("bucket");
    let offsets_path = root.join("m/east/_meta/data/00000000000000000001/offsets.json");

    // Same size, other bytes: the SHA-256 check names the object.
    let original = std::fs::read(&offsets_path).unwrap();
    let tampered = String::from_utf8(original.clone())
        .unwrap()
        .replace("\"offset\":40", "\"offset\":99");
    assert_eq!(tampered.len(), original.len());
    std::fs::write(&offsets_path, &tampered).unwrap();
    let err = read_latest(&store, &prefix(), LINK).await.unwrap_err().to_string();
    assert!(
        err.contains("offsets.json") && err.to_lowercase().contains("sha"),
        "{err}"
    );

    // A consistent manifest over a hostile document: the field is named.
    let hostile = String::from_utf8(original)
        .unwrap()
        .replace("\"offset\":40", "\"offset\":-4");
    store
        .put_bytes("m/east/_meta/data/00000000000000000001/offsets.json", hostile.clone())
        .await
        .unwrap();
    let manifest_path = root.join("m/east/_meta/manifest.json");
    let mut manifest: MetaManifest = serde_json::from_slice(&std::fs::read(&manifest_path).unwrap()).unwrap();
    let digest = digest_of(hostile.as_bytes());
    manifest.offsets.size = digest.size;
    manifest.offsets.sha256 = digest.sha256;
    std::fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let err = read_latest(&store, &prefix(), LINK).await.unwrap_err().to_string();
    assert!(
        err.contains("offsets.json") && err.contains("offsets[1].offset"),
        "{err}"
    );

    // A manifest pointing outside its version's keys, or of another link.
    let mut moved = manifest.clone();
    moved.topics.key = "m/east/orders/0/../../x".into();
    std::fs::write(&manifest_path, serde_json::to_vec(&moved).unwrap()).unwrap();
    let err = read_latest(&store, &prefix(), LINK).await.unwrap_err().to_string();
    assert!(err.contains("manifest.json") && err.contains("topics.key"), "{err}");
    let mut foreign = manifest.clone();
    foreign.link = "west".into();
    std::fs::write(&manifest_path, serde_json::to_vec(&foreign).unwrap()).unwrap();
    let err = read_latest(&store, &prefix(), LINK).await.unwrap_err().to_string();
    assert!(err.contains("link") && err.contains("west"), "{err}");

    // Too large before parsing.
    std::fs::write(&manifest_path, vec![b' '; MAX_META_MANIFEST_BYTES as usize + 1]).unwrap();
    let err = read_latest(&store, &prefix(), LINK).await.unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
}
