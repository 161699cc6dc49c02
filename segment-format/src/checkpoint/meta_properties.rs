//! `meta.properties`, the identity of a log directory, read as
//! `MetaProperties.Builder` does and written as `Properties.store` does.

use std::path::Path;

use super::{checkpoint_error, read_file};
use crate::durable::write_atomically;
use crate::error::{ParseError, Result};
use crate::java_text::{escape_property, java_trim, parse_java_properties};
use crate::partition_metadata::Uuid;

/// `meta.properties` version (`MetaPropertiesVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaPropertiesVersion {
    /// ZooKeeper era: `broker.id`, everything optional.
    V0,
    /// KRaft: `cluster.id` and `node.id` required.
    V1,
}

impl MetaPropertiesVersion {
    pub fn number(self) -> i32 {
        match self {
            MetaPropertiesVersion::V0 => 0,
            MetaPropertiesVersion::V1 => 1,
        }
    }
}

/// The identity of a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub version: MetaPropertiesVersion,
    pub cluster_id: Option<String>,
    /// `node.id` (v1) or `broker.id` (v0).
    pub node_id: Option<i32>,
    pub directory_id: Option<Uuid>,
}

fn meta_error(message: String) -> ParseError {
    checkpoint_error(0, format!("meta.properties: {message}"))
}

impl MetaProperties {
    /// Parse as `PropertiesUtils.readPropertiesFile` + `MetaProperties.Builder` do.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let props = parse_java_properties(bytes);
        let get = |key: &str| props.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let version_str = get("version").unwrap_or("0");
        let version = match java_trim(version_str).parse::<i32>() {
            Ok(0) => MetaPropertiesVersion::V0,
            Ok(1) => MetaPropertiesVersion::V1,
            Ok(n) => return Err(meta_error(format!("unknown version number {n}"))),
            Err(_) => return Err(meta_error(format!("invalid version string '{version_str}'"))),
        };
        let int_prop = |key: &str| -> Result<Option<i32>, ParseError> {
            match get(key) {
                None => Ok(None),
                Some(v) => v
                    .parse::<i32>()
                    .map(Some)
                    .map_err(|_| meta_error(format!("unable to read {key} '{v}' as a base-10 number"))),
            }
        };
        let node_id = match version {
            MetaPropertiesVersion::V0 => int_prop("broker.id")?,
            MetaPropertiesVersion::V1 => {
                Some(int_prop("node.id")?.ok_or_else(|| meta_error("node.id was not found".into()))?)
            }
        };
        let cluster_id = get("cluster.id").map(str::to_string);
        if version == MetaPropertiesVersion::V1 && cluster_id.is_none() {
            return Err(meta_error("cluster.id was not found".into()));
        }
        let directory_id = match get("directory.id") {
            None => None,
            Some(v) => Some(
                v.parse::<Uuid>()
                    .map_err(|e| meta_error(format!("unable to read directory.id as a Uuid: {e}")))?,
            ),
        };
        Ok(MetaProperties {
            version,
            cluster_id,
            node_id,
            directory_id,
        })
    }

    /// Properties text in a fixed key order (`MetaProperties.toProperties`; Java's
    /// `Properties.store` order is unspecified and its date comment is omitted).
    pub fn encode(&self) -> String {
        let mut out = String::from("#\n");
        let mut put = |k: &str, v: &str| {
            out.push_str(&escape_property(k, true));
            out.push('=');
            out.push_str(&escape_property(v, false));
            out.push('\n');
        };
        put("version", &self.version.number().to_string());
        if let Some(c) = &self.cluster_id {
            put("cluster.id", c);
        }
        if let Some(n) = self.node_id {
            let key = match self.version {
                MetaPropertiesVersion::V0 => "broker.id",
                MetaPropertiesVersion::V1 => "node.id",
            };
            put(key, &n.to_string());
        }
        if let Some(d) = &self.directory_id {
            put("directory.id", &d.to_string());
        }
        out
    }

    pub fn read(path: &Path) -> Result<Self> {
        Self::parse(&read_file(path)?).map_err(|e| e.at(path))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.encode().as_bytes())
    }
}
