//! A link's metadata over the direct protocol (feature bit 8, `docs/direct-protocol.md` §6 LinkMeta): the same two
//! documents a bucket carries ([`segmirror_contract::link_meta`]: `topics.json`, `offsets.json`, one type each, serialised
//! the same way), cut into LinkMeta frames and put together again.
//!
//! Why pieces: a frame holds at most 8 MiB, and a cluster with many groups has larger offset documents (the
//! bucket allows 256 MiB). Every piece names the whole document's size and SHA-256, so the receiver refuses an
//! oversized document at its first piece, grows its buffer only by bytes that arrived, and checks the digest (as a
//! seal's) before it parses a byte as JSON. The documents are then validated exactly as a bucket's are
//! ([`LinkMeta::validate`]), so a refusal names the document and the field.
//!
//! - [`EncodedLinkMeta`]: the shipper's side, serialised and hashed once per version (off the runtime: its caller
//!   runs it in `spawn_blocking`), then cut into pieces per session.
//! - [`MetaAssembler`]: the applier's side, one per session: pieces in order, topics then offsets, each document
//!   from position 0 with no gap, one version at a time.

use bytes::{Bytes, BytesMut};

use super::error::{DirectError, Result};
use super::frame::MAX_PAYLOAD_LEN;
use super::payload::{LinkMetaPiece, MetaPart};
use segmirror_contract::link_meta::{LinkMeta, OffsetsDoc, TopicsDoc};

/// Bytes of a document per LinkMeta frame: 1 MiB. Small beside the chunks' 8 MiB so that a metadata version never
/// holds a partition's next chunk back for long; a version of a few KiB (the usual) is one frame per document.
pub const META_PIECE_BYTES: usize = 1 << 20;

/// One version of a link's metadata, serialised and hashed, ready to be cut into LinkMeta frames.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedLinkMeta {
    pub version: u64,
    pub topics: Bytes,
    pub topics_sha256: [u8; 32],
    pub offsets: Bytes,
    pub offsets_sha256: [u8; 32],
}

impl EncodedLinkMeta {
    /// Serialises `meta` (validated first, against its own link) as the bucket does.
    pub fn encode(meta: &LinkMeta) -> std::result::Result<EncodedLinkMeta, String> {
        meta.validate(&meta.topics.link)?;
        let topics = Bytes::from(serde_json::to_vec(&meta.topics).map_err(|e| format!("topics.json: {e}"))?);
        let offsets = Bytes::from(serde_json::to_vec(&meta.offsets).map_err(|e| format!("offsets.json: {e}"))?);
        for (part, doc) in [(MetaPart::Topics, &topics), (MetaPart::Offsets, &offsets)] {
            if doc.len() as u64 > part.max_size() {
                return Err(format!(
                    "{}: {} bytes, over the maximum of {} bytes",
                    part.name(),
                    doc.len(),
                    part.max_size()
                ));
            }
        }
        Ok(EncodedLinkMeta {
            version: meta.topics.version,
            topics_sha256: sha256(&topics),
            offsets_sha256: sha256(&offsets),
            topics,
            offsets,
        })
    }

    /// The frames' payloads: the topics document, then the offsets document, each in pieces of at most
    /// `piece_bytes` (an empty document is one empty piece).
    pub fn pieces(&self, piece_bytes: usize) -> Vec<LinkMetaPiece> {
        let piece_bytes = piece_bytes.clamp(1, MAX_PAYLOAD_LEN as usize / 2);
        let mut out = Vec::new();
        for (part, doc, sha256) in [
            (MetaPart::Topics, &self.topics, self.topics_sha256),
            (MetaPart::Offsets, &self.offsets, self.offsets_sha256),
        ] {
            let mut position = 0;
            loop {
                let end = (position + piece_bytes).min(doc.len());
                out.push(LinkMetaPiece {
                    version: self.version,
                    part,
                    size: doc.len() as u64,
                    sha256,
                    position: position as u64,
                    bytes: doc.slice(position..end),
                });
                position = end;
                if position >= doc.len() {
                    break;
                }
            }
        }
        out
    }
}

/// The document being put together.
#[derive(Debug)]
struct Partial {
    version: u64,
    part: MetaPart,
    size: u64,
    sha256: [u8; 32],
    bytes: BytesMut,
}

/// Puts a session's LinkMeta pieces together into versions (see the module doc). Any piece out of that order,
/// a digest that does not match or a document that does not validate is a protocol error naming the version, the
/// document and the field; the session then ends (a shipper that keeps the rules never causes one).
#[derive(Debug)]
pub struct MetaAssembler {
    link: String,
    partial: Option<Partial>,
    /// The version's topics document, complete and checked, while its offsets arrive.
    topics: Option<(u64, TopicsDoc)>,
}

impl MetaAssembler {
    /// For a session on `link`: every document must name it.
    pub fn new(link: &str) -> MetaAssembler {
        MetaAssembler {
            link: link.to_string(),
            partial: None,
            topics: None,
        }
    }

    /// Takes the next piece; a complete version once its last piece is in.
    pub fn accept(&mut self, piece: LinkMetaPiece) -> Result<Option<LinkMeta>> {
        let bad = |reason: String| DirectError::Protocol {
            reason: format!("LinkMeta version {} {}: {reason}", piece.version, piece.part.name()),
        };
        // The frame decoder checked these already; a caller handing pieces in directly gets the same rule.
        if piece.size > piece.part.max_size()
            || piece
                .position
                .checked_add(piece.bytes.len() as u64)
                .is_none_or(|e| e > piece.size)
        {
            return Err(bad(format!(
                "{} bytes at position {} of a {}-byte document (at most {} bytes)",
                piece.bytes.len(),
                piece.position,
                piece.size,
                piece.part.max_size()
            )));
        }
        let expected_part = if self.topics.is_some() {
            MetaPart::Offsets
        } else {
            MetaPart::Topics
        };
        let partial = match self.partial.take() {
            None => {
                if piece.part != expected_part {
                    return Err(bad(format!("expected {} first", expected_part.name())));
                }
                if let Some((version, _)) = &self.topics {
                    if *version != piece.version {
                        return Err(bad(format!("the topics document before it is of version {version}")));
                    }
                }
                if piece.position != 0 {
                    return Err(bad(format!("first piece at position {}, not 0", piece.position)));
                }
                Partial {
                    version: piece.version,
                    part: piece.part,
                    size: piece.size,
                    sha256: piece.sha256,
                    // Grown by the bytes that arrive, never reserved by the declared size.
                    bytes: BytesMut::with_capacity(piece.bytes.len()),
                }
            }
            Some(p) => {
                if (p.version, p.part, p.size, p.sha256) != (piece.version, piece.part, piece.size, piece.sha256) {
                    return Err(bad(format!(
                        "does not continue the {} of version {} ({} bytes) still incomplete",
                        p.part.name(),
                        p.version,
                        p.size
                    )));
                }
                if piece.position != p.bytes.len() as u64 {
                    return Err(bad(format!(
                        "piece at position {}, the document has {} bytes so far",
                        piece.position,
                        p.bytes.len()
                    )));
                }
                p
            }
        };
        let mut partial = partial;
        partial.bytes.extend_from_slice(&piece.bytes);
        if (partial.bytes.len() as u64) < partial.size {
            self.partial = Some(partial);
            return Ok(None);
        }
        let computed = sha256(&partial.bytes);
        if computed != partial.sha256 {
            return Err(bad(format!(
                "SHA-256 mismatch: the frames name {}, the {} bytes received hash to {}",
                hex(&partial.sha256),
                partial.size,
                hex(&computed)
            )));
        }
        let invalid = |reason: String| bad(format!("invalid: {reason}"));
        match partial.part {
            MetaPart::Topics => {
                let doc: TopicsDoc = serde_json::from_slice(&partial.bytes).map_err(|e| invalid(e.to_string()))?;
                doc.validate(&self.link).map_err(invalid)?;
                if doc.version != partial.version {
                    return Err(invalid(format!(
                        "version: {}, the frames say {}",
                        doc.version, partial.version
                    )));
                }
                self.topics = Some((partial.version, doc));
                Ok(None)
            }
            MetaPart::Offsets => {
                let doc: OffsetsDoc = serde_json::from_slice(&partial.bytes).map_err(|e| invalid(e.to_string()))?;
                doc.validate(&self.link).map_err(invalid)?;
                if doc.version != partial.version {
                    return Err(invalid(format!(
                        "version: {}, the frames say {}",
                        doc.version, partial.version
                    )));
                }
                let (_, topics) = self.topics.take().expect("offsets are expected only after topics");
                Ok(Some(LinkMeta { topics, offsets: doc }))
            }
        }
    }
}

/// The SHA-256 the rest of the crate computes (aws-lc).
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    digest.as_ref().try_into().expect("SHA-256 is 32 bytes")
}

fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
