use segmirror_transport::manifest::KeyPrefix;

use super::{newest_versions_since, Newest, ReadManifests};
use crate::serve_bucket::tests::{World, LINK, TOPIC};

#[tokio::test]
async fn a_manifest_listed_as_before_is_not_read_again_and_a_changed_one_is() {
    let w = World::new(10);
    w.ship().await;
    let (store, end) = (&w.store, 10);
    let prefix = KeyPrefix::root();
    let tp = (TOPIC.to_string(), 0);
    let (ends, read) = newest_versions_since(store, &prefix, LINK, &ReadManifests::new())
        .await
        .unwrap();
    assert_eq!(ends.get(&tp).map(|n| n.end_offset), Some(end));
    let (object, version) = read.get(&tp).cloned().unwrap();

    // What was read from the same listed object is taken as it is (a figure no manifest holds proves it).
    let mut known = ReadManifests::new();
    let remembered = Newest {
        end_offset: 999,
        ..version
    };
    known.insert(tp.clone(), (object.clone(), remembered));
    let (ends, _) = newest_versions_since(store, &prefix, LINK, &known).await.unwrap();
    assert_eq!(ends.get(&tp), Some(&remembered));

    // Another entity tag: the manifest is read again.
    let mut changed = object;
    changed.e_tag = Some("\"another\"".into());
    known.insert(tp.clone(), (changed, remembered));
    let (ends, _) = newest_versions_since(store, &prefix, LINK, &known).await.unwrap();
    assert_eq!(ends.get(&tp).map(|n| n.end_offset), Some(end));
}
