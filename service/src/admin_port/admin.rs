//! The admin API's link operations, behind one trait so that the HTTP routes (`super::App`) stay a thin
//! translation of paths and JSON, and the lead can point them at the link lifecycle of `catalog::link` as it grows.
//!
//! Two implementations: [`CatalogAdmin`] on the applier (the catalog is where a link lives; pausing the link this
//! process serves also stops its session) and [`ShipperAdmin`] on the shipper (no catalog: its one link, paused
//! in memory for the run).

use std::path::PathBuf;
use std::sync::Arc;

use segmirror_catalog::{Catalog, Entity, Error as CatalogError, Link, LinkState};
use serde::Serialize;
use tokio::sync::watch;

use super::figures::LinkMeter;

/// A refusal: the HTTP status and a message for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminError {
    pub status: u16,
    pub message: String,
}

impl AdminError {
    pub fn new(status: u16, message: impl Into<String>) -> AdminError {
        AdminError {
            status,
            message: message.into(),
        }
    }
}

impl From<CatalogError> for AdminError {
    fn from(e: CatalogError) -> AdminError {
        let status = match &e {
            CatalogError::NotFound { .. } => 404,
            CatalogError::Promoted { .. }
            | CatalogError::AlreadyExists { .. }
            | CatalogError::LinkTransition { .. }
            | CatalogError::NameOfDeletedLink { .. } => 409,
            _ => 500,
        };
        AdminError::new(status, e.to_string())
    }
}

/// A link as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkView {
    pub name: String,
    /// `active`, `paused` or `promoted`.
    pub state: String,
    /// `shipper` or `applier`: which side answered.
    pub role: &'static str,
    pub topics_regex: Option<String>,
    pub groups_regex: Option<String>,
    /// Whether this process runs the link (it serves one link; a catalog may record more).
    pub served: bool,
    /// Live figures of the link this process serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
}

/// The operations of the admin API. Blocking: the server calls them on a blocking thread.
pub trait LinkAdmin: Send + Sync + 'static {
    fn links(&self) -> Result<Vec<LinkView>, AdminError>;
    fn link(&self, name: &str) -> Result<LinkView, AdminError>;
    fn pause(&self, name: &str) -> Result<LinkView, AdminError>;
    fn resume(&self, name: &str) -> Result<LinkView, AdminError>;
    fn set_topics_regex(&self, name: &str, regex: &str) -> Result<LinkView, AdminError>;
}

/// The in-memory pause of a link without a record (`true` while paused). A recorded link is paused through its
/// record, which `crate::link_gate` reads while running.
pub type PauseGate = watch::Sender<bool>;

/// The applier's admin: the catalog's links; the served one's pause also reaches the running session.
pub struct CatalogAdmin {
    pub catalog_path: PathBuf,
    pub served: String,
    pub gate: Arc<PauseGate>,
    pub meter: Arc<LinkMeter>,
    /// Whether the served link's sessions can be paused (`tail-apply` always, `--cluster` too since `run_cluster_gated`).
    pub pausable: bool,
}

impl CatalogAdmin {
    fn open(&self) -> Result<Catalog, AdminError> {
        Catalog::open(&self.catalog_path)
            .map_err(|e| AdminError::new(500, format!("opening catalog {}: {e}", self.catalog_path.display())))
    }

    fn view(&self, link: Link) -> LinkView {
        let served = link.name == self.served;
        LinkView {
            state: link.state.to_string(),
            role: "applier",
            topics_regex: Some(link.topics_regex),
            groups_regex: link.groups_regex,
            served,
            connected: served.then(|| self.meter.connected()),
            sessions: served.then(|| self.meter.sessions()),
            errors: served.then(|| self.meter.errors()),
            name: link.name,
        }
    }

    fn set_state(&self, name: &str, state: LinkState) -> Result<LinkView, AdminError> {
        if name == self.served && !self.pausable {
            return Err(AdminError::new(
                409,
                format!("link {name:?} is served with --cluster: pausing its sessions is not supported yet"),
            ));
        }
        let mut catalog = self.open()?;
        let link = match state {
            LinkState::Paused | LinkState::Active => crate::link_records::set_state(&mut catalog, name, state)?,
            other => {
                return Err(AdminError::new(
                    409,
                    format!("link {name:?}: the admin API does not set {other}"),
                ))
            }
        };
        if name == self.served {
            self.meter.set_paused(state == LinkState::Paused);
            self.gate.send_replace(state == LinkState::Paused);
        }
        Ok(self.view(link))
    }
}

impl LinkAdmin for CatalogAdmin {
    fn links(&self) -> Result<Vec<LinkView>, AdminError> {
        Ok(self.open()?.links()?.into_iter().map(|l| self.view(l)).collect())
    }

    fn link(&self, name: &str) -> Result<LinkView, AdminError> {
        Ok(self.view(self.open()?.link(name)?))
    }

    fn pause(&self, name: &str) -> Result<LinkView, AdminError> {
        self.set_state(name, LinkState::Paused)
    }

    fn resume(&self, name: &str) -> Result<LinkView, AdminError> {
        self.set_state(name, LinkState::Active)
    }

    fn set_topics_regex(&self, name: &str, regex: &str) -> Result<LinkView, AdminError> {
        // What `segmirror link alter --topics-regex` accepts, checked by the same function: the shipper's own
        // reading of the list (comma-separated whole-name regexes), so the API cannot record one it would refuse.
        crate::link_records::check_topics_regex(regex)
            .map_err(|e| AdminError::new(400, format!("topics_regex {regex:?}: {e}")))?;
        let link = self.open()?.set_topics_regex(name, regex)?;
        Ok(self.view(link))
    }
}

/// The shipper's admin: its one link, paused in memory (a restart starts it active).
pub struct ShipperAdmin {
    pub link: String,
    pub topics: String,
    pub gate: Arc<PauseGate>,
    pub meter: Arc<LinkMeter>,
    /// `false` for `ship --store`, whose upload loop has no pause yet (pause and resume answer 409).
    pub pausable: bool,
}

impl ShipperAdmin {
    fn view(&self) -> LinkView {
        LinkView {
            name: self.link.clone(),
            state: if self.meter.paused() { "paused" } else { "active" }.to_string(),
            role: "shipper",
            topics_regex: Some(self.topics.clone()),
            groups_regex: None,
            served: true,
            connected: Some(self.meter.connected()),
            sessions: Some(self.meter.sessions()),
            errors: Some(self.meter.errors()),
        }
    }

    fn check(&self, name: &str) -> Result<(), AdminError> {
        if name == self.link {
            return Ok(());
        }
        Err(AdminError::new(
            404,
            format!(
                "{} (this shipper runs link {:?})",
                CatalogError::NotFound {
                    entity: Entity::Link(name.to_string())
                },
                self.link
            ),
        ))
    }

    fn set_paused(&self, name: &str, paused: bool) -> Result<LinkView, AdminError> {
        self.check(name)?;
        if !self.pausable {
            return Err(AdminError::new(
                409,
                "this shipper has no link record to pause: record the link on this host (`segmirror link create`), or stop the process",
            ));
        }
        self.meter.set_paused(paused);
        self.gate.send_replace(paused);
        Ok(self.view())
    }
}

impl LinkAdmin for ShipperAdmin {
    fn links(&self) -> Result<Vec<LinkView>, AdminError> {
        Ok(vec![self.view()])
    }

    fn link(&self, name: &str) -> Result<LinkView, AdminError> {
        self.check(name)?;
        Ok(self.view())
    }

    fn pause(&self, name: &str) -> Result<LinkView, AdminError> {
        self.set_paused(name, true)
    }

    fn resume(&self, name: &str) -> Result<LinkView, AdminError> {
        self.set_paused(name, false)
    }

    fn set_topics_regex(&self, name: &str, _regex: &str) -> Result<LinkView, AdminError> {
        self.check(name)?;
        Err(AdminError::new(
            409,
            "this shipper's topics are its --topics for the whole run: change the link's topics_regex on the \
             applier's admin API (the catalog) or restart the shipper with the new --topics",
        ))
    }
}
