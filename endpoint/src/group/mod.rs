//! The classic consumer-group coordinator (placeholder: the coordinator is being written).

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The leader epoch the client committed with, -1 when none.
    pub leader_epoch: i32,
    pub metadata: String,
}

/// Where committed offsets are kept durably (the service implements it over the catalog). Blocking calls.
pub trait OffsetStore: Send + Sync + 'static {
    /// Record `offsets` for `group`, all or nothing.
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String>;
    /// Every offset `group` committed.
    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String>;
    /// The groups with committed offsets.
    fn groups(&self) -> Result<Vec<String>, String>;
}
