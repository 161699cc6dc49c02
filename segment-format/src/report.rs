//! Findings: what a validation pass reports. A validator never stops at the first
//! defect; it returns every finding, each naming the file, position and offset.

use std::path::{Path, PathBuf};

use crate::error::{Defect, Error};

/// How bad a finding is. `Warning`s are states a healthy broker leaves behind
/// (e.g. a partial batch at the tail of the active segment); `Error`s are corruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// Serialize a path as text, replacing bytes that are not UTF-8 with U+FFFD
/// (`Path::to_string_lossy`). Serde's own `Path` serializer fails on such a
/// name, and a report must not fail (nor a `json!` panic) because a log dir
/// holds a file Kafka never created; the text form of the report names it
/// with `Path::display`, which does the same replacement.
pub fn serialize_path_lossy<S: serde::Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

/// One defect found in one file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// In JSON: lossy text (see [`serialize_path_lossy`]).
    #[serde(serialize_with = "serialize_path_lossy")]
    pub path: PathBuf,
    /// Byte position in `path`, where the defect has one.
    pub position: Option<u64>,
    /// Kafka offset concerned, where known.
    pub offset: Option<i64>,
    pub defect: Defect,
}

impl Finding {
    pub fn error(path: impl AsRef<Path>, position: Option<u64>, offset: Option<i64>, defect: Defect) -> Self {
        Finding {
            severity: Severity::Error,
            path: path.as_ref().to_path_buf(),
            position,
            offset,
            defect,
        }
    }

    pub fn warning(path: impl AsRef<Path>, position: Option<u64>, offset: Option<i64>, defect: Defect) -> Self {
        Finding {
            severity: Severity::Warning,
            path: path.as_ref().to_path_buf(),
            position,
            offset,
            defect,
        }
    }

    /// Turn a crate error into an error finding. I/O errors and bad names become
    /// [`Defect::Other`] with the message.
    pub fn from_error(err: &Error) -> Self {
        match err {
            Error::Corrupt {
                path,
                position,
                offset,
                defect,
            } => Finding::error(path, Some(*position), *offset, defect.clone()),
            Error::Incomplete {
                path,
                position,
                offset,
                needed,
                available,
            } => Finding::error(
                path,
                Some(*position),
                *offset,
                Defect::Other {
                    message: format!("incomplete: need {needed} bytes, {available} available"),
                },
            ),
            Error::BadName { path, reason } | Error::BadInput { path, reason } => Finding::error(
                path,
                None,
                None,
                Defect::Other {
                    message: reason.clone(),
                },
            ),
            Error::Io { path, source } => Finding::error(
                path,
                None,
                None,
                Defect::Other {
                    message: format!("I/O error: {source}"),
                },
            ),
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sev = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{sev}: {}", self.path.display())?;
        if let Some(p) = self.position {
            write!(f, ": byte {p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " (offset {o})")?;
        }
        write!(f, ": {}", self.defect)
    }
}
