//! Link metadata documents: every field is checked, and metadata keys parse exactly as built.

use std::collections::BTreeMap;

use super::*;

const LINK: &str = "east";
const TOPIC_ID: &str = "MZ3ezZJvTAWUZ0oR9yzcCQ";

fn sample(version: u64) -> LinkMeta {
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

fn prefix() -> KeyPrefix {
    KeyPrefix::new("m").unwrap()
}

/// A field's name and a change that makes it invalid.
type Spoiler = (&'static str, Box<dyn Fn(&mut LinkMeta)>);

#[test]
fn every_field_is_checked() {
    let cases: Vec<Spoiler> = vec![
        ("topics[0].name", Box::new(|m| m.topics.topics[0].name = "a/b".into())),
        (
            "topics[0].topic_id",
            Box::new(|m| m.topics.topics[0].topic_id = "zero".into()),
        ),
        ("topics[0].partitions", Box::new(|m| m.topics.topics[0].partitions = 0)),
        (
            "topics[0].configs",
            Box::new(|m| {
                m.topics.topics[0].configs.insert("a b".into(), "1".into());
            }),
        ),
        ("format", Box::new(|m| m.topics.format = "segmirror.topics.v9".into())),
        ("link", Box::new(|m| m.offsets.link = "west".into())),
        (
            "offsets[0].group",
            Box::new(|m| m.offsets.offsets[0].group = String::new()),
        ),
        (
            "offsets[1].partition",
            Box::new(|m| m.offsets.offsets[1].partition = -1),
        ),
        (
            "offsets[0].leader_epoch",
            Box::new(|m| m.offsets.offsets[0].leader_epoch = Some(-2)),
        ),
        (
            "offsets[0].metadata",
            Box::new(|m| m.offsets.offsets[0].metadata = "x".repeat(40_000)),
        ),
        (
            "offsets[1].group",
            Box::new(|m| {
                let first = m.offsets.offsets[0].clone();
                m.offsets.offsets[1] = first;
            }),
        ),
        ("version", Box::new(|m| m.offsets.version = 9)),
    ];
    assert!(sample(1).validate(LINK).is_ok());
    for (field, spoil) in cases {
        let mut meta = sample(1);
        spoil(&mut meta);
        let err = meta.validate(LINK).unwrap_err();
        assert!(err.contains(field), "{field}: {err}");
    }
}

#[test]
fn meta_keys_parse_exactly_as_built() {
    let p = prefix();
    assert_eq!(
        parse_meta_key(&p, &manifest_key(&p, LINK)),
        Some(MetaKey::Manifest { link: LINK.into() })
    );
    assert_eq!(
        parse_meta_key(&p, &data_key(&p, LINK, 7, OFFSETS_NAME)),
        Some(MetaKey::Data {
            link: LINK.into(),
            version: 7,
            name: OFFSETS_NAME
        })
    );
    for bad in [
        "m/east/_meta/data/7/offsets.json",
        "m/east/_meta/data/00000000000000000007/other.json",
        "m/east/_meta/0/00000000000000000000.log",
        "m/../_meta/manifest.json",
        "x/east/_meta/manifest.json",
    ] {
        assert_eq!(parse_meta_key(&p, bad), None, "{bad}");
    }
    assert!(crate::manifest::is_data_dir(&p, "m/east/_meta/data"));
    assert!(!crate::manifest::is_data_dir(&p, "m/east/_meta"));
}
