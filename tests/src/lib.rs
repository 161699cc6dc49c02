//! Test harness of segmirror: real Apache Kafka brokers and real clients, driven from `cargo test`.
//!
//! Why: segmirror copies a broker's on-disk segments byte for byte, so the only convincing test is a stock Kafka
//! that loads what we wrote and stock clients that read it back with identical offsets, timestamps, headers and
//! transaction outcomes. This crate starts single-node KRaft brokers (Kafka jars fetched from Maven Central by
//! `scripts/install-test-deps.sh`, no Docker), runs Kafka's own tools against them, produces and consumes with the
//! Python `confluent-kafka` client and `kcat`, and fills topics with data of every on-disk shape segmirror must
//! handle (all codecs, idempotent and transactional producers with aborts, compacted and retention-trimmed logs,
//! both timestamp types, several segments per partition).
//!
//! Everything is blocking and local to 127.0.0.1. A missing dependency fails the test with a message to run
//! `scripts/test-all.sh`; nothing is skipped silently. See `tests/README.md`.

pub mod broker;
pub mod clients;
pub mod cluster;
pub mod dump;
pub mod epoch_probe;
pub mod http;
pub mod install;
pub mod mirror;
pub mod ondisk;
pub mod ports;
pub mod s3;
pub mod segmirror_cli;
pub mod serve;
pub mod service;
pub mod shapes;
pub mod tools;
pub mod unclean;
pub mod wait;

pub use broker::{BrokerConfig, KafkaBroker, NodeRole, CLEAN_SHUTDOWN_FILE};
pub use clients::{
    admin, consume_all, consume_topics, kcat_consume, kcat_produce, python_produce, Header, Isolation, OpenTransaction,
    OutRecord, ProducePlan, ProduceStep, Record, TimestampType, TopicInfo,
};
pub use cluster::{ClusterConfig, KafkaCluster, PartitionState};
pub use install::KafkaInstall;
pub use shapes::{produce_all_shapes, Shape, ShapeOptions, ShapeTopic};
pub use tools::{dump_log_segments, KafkaTools, TopicDescription, TopicSpec};
