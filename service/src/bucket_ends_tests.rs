use segmirror_transport::manifest::KeyPrefix;

use super::{newest_versions_since, CachedEnds, Newest, ReadManifests};
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

/// A scrape never waits for the bucket: the first one has no figures and starts a read; later reads look at the
/// link's change notice first and, while it is unchanged, keep what they had without listing (here the manifests
/// are gone from the bucket and the figures stay); a new notice makes the next read list again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_never_waits_for_the_bucket_and_an_unchanged_notice_lists_nothing() {
    let w = World::new(10);
    w.ship().await;
    let prefix = KeyPrefix::root();
    let tp = (TOPIC.to_string(), 0);
    let cached = CachedEnds::new(w.store.clone(), prefix.clone(), tokio::runtime::Handle::current())
        .with_max_age(std::time::Duration::ZERO);
    assert_eq!(cached.get(LINK), None, "nothing read yet: the figures are absent");
    cached.settled().await;
    let end = |c: &CachedEnds| c.get(LINK).map(|ends| ends.get(&tp).map(|n| n.end_offset));
    assert_eq!(end(&cached), Some(Some(10)));
    cached.settled().await;

    for object in w.store.list_all("").await.unwrap().objects {
        if object.key.contains("/manifests/") {
            w.store.delete(&object.key).await.unwrap();
        }
    }
    for _ in 0..3 {
        assert_eq!(
            end(&cached),
            Some(Some(10)),
            "the notice did not change: nothing listed"
        );
        cached.settled().await;
    }

    segmirror_transport::bucket::link_changes::announce(&w.store, &prefix, LINK, "someone")
        .await
        .unwrap();
    let _ = cached.get(LINK);
    cached.settled().await;
    assert_eq!(end(&cached), Some(None), "listed again: no manifest is left");
}
