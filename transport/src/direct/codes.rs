//! The direct protocol's enumerated codes that both the payloads and the errors speak of: which end a side is
//! ([`Role`]) and why a side refused its peer ([`RefuseReason`]). Kept apart from `payload` so that the error type
//! can name them without the payload codecs and the errors importing each other.

use std::fmt;

/// Which end of the replication a side is. Independent of who dialled: in push
/// mode the shipper dials, in pull mode the applier dials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Shipper,
    Applier,
}

impl Role {
    pub const fn code(self) -> u8 {
        match self {
            Role::Shipper => 1,
            Role::Applier => 2,
        }
    }

    pub const fn from_code(code: u8) -> Option<Role> {
        match code {
            1 => Some(Role::Shipper),
            2 => Some(Role::Applier),
            _ => None,
        }
    }

    /// The role a compatible peer has.
    pub const fn peer(self) -> Role {
        match self {
            Role::Shipper => Role::Applier,
            Role::Applier => Role::Shipper,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Shipper => "shipper",
            Role::Applier => "applier",
        })
    }
}

/// Why a side refused its peer in the handshake (the `reason` of a Refuse frame).
/// Codes a newer peer may add decode as [`RefuseReason::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefuseReason {
    /// The protocol version ranges do not overlap.
    Version,
    /// The link names differ.
    Link,
    /// The shipper's source cluster id is not the one the applier's mirror follows.
    SourceCluster,
    /// Both sides claim the same role.
    Role,
    /// A feature one side requires is not supported by the other.
    Features,
    /// The peer broke the handshake's rules (bad magic, a field missing).
    Protocol,
    /// Another session already serves this link (planned: one session per link).
    Busy,
    Other(u16),
}

impl RefuseReason {
    pub const fn code(self) -> u16 {
        match self {
            RefuseReason::Version => 1,
            RefuseReason::Link => 2,
            RefuseReason::SourceCluster => 3,
            RefuseReason::Role => 4,
            RefuseReason::Features => 5,
            RefuseReason::Protocol => 6,
            RefuseReason::Busy => 7,
            RefuseReason::Other(code) => code,
        }
    }

    pub const fn from_code(code: u16) -> RefuseReason {
        match code {
            1 => RefuseReason::Version,
            2 => RefuseReason::Link,
            3 => RefuseReason::SourceCluster,
            4 => RefuseReason::Role,
            5 => RefuseReason::Features,
            6 => RefuseReason::Protocol,
            7 => RefuseReason::Busy,
            other => RefuseReason::Other(other),
        }
    }
}

impl fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::Version => f.write_str("protocol version mismatch"),
            RefuseReason::Link => f.write_str("link name mismatch"),
            RefuseReason::SourceCluster => f.write_str("source cluster mismatch"),
            RefuseReason::Role => f.write_str("role conflict"),
            RefuseReason::Features => f.write_str("required feature missing"),
            RefuseReason::Protocol => f.write_str("protocol violation"),
            RefuseReason::Busy => f.write_str("link busy"),
            RefuseReason::Other(code) => write!(f, "reason code {code}"),
        }
    }
}
