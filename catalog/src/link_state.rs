//! A link's state: the one vocabulary the catalog's rows, its errors and every gate share (the allowed moves are
//! [`crate::link_lifecycle`]'s). Why a module of its own: errors name states, and the link's SQL and its
//! lifecycle both need them, so the word list sits below all three.

use crate::text_enum;

text_enum! {
    /// Lifecycle of a link. The allowed moves are [`crate::link_lifecycle`]'s.
    pub enum LinkState {
        /// Shipped and applied.
        Active => "active",
        /// A temporary disconnect: nothing is shipped or installed until resumed; the mirror stays read-only.
        Paused => "paused",
        /// Terminal: the mirror became a real cluster; nothing is installed again and shipping to it is refused.
        Promoted => "promoted",
        /// Terminal: a tombstone. Its partitions and events stay recorded; nothing ships or installs under it.
        Deleted => "deleted",
    }
}
