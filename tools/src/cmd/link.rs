//! `segmirror link create | list | describe | alter | pause | resume | promote | delete`: replication links as
//! records in a catalog, with a lifecycle.
//!
//! Both hosts of a link keep a record of it under the same name: the target host in its mirror's catalog (which
//! `apply` also creates implicitly), the source host in the catalog of its data directory, which `ship`, `ship
//! --store` and `seed` read. Each record's state gates the side that reads it (paused: nothing moves; promoted
//! or deleted: refused), and the shipper takes the record's topics regex, re-read while it runs.
//!
//! Why the lifecycle is in `segmirror_service::link_records` (over `segmirror_catalog::link_lifecycle`) and not
//! here: the admin HTTP API changes the same records; both front ends call the same plain functions, so a rule
//! cannot differ between them. This module parses and prints.
//!
//! Exit status: 0; 2 on a usage error, an unknown link, or a transition the lifecycle refuses (the message names
//! the link's state).

use std::path::PathBuf;
use std::process::ExitCode;

use segmirror_catalog::{Catalog, Event, Link, LinkState, Transport};
use segmirror_service::link_records::{self, NewLink};
use serde::Serialize;

use crate::cli::catalog::{catalog_path, mirror_catalog_path, CATALOG_HELP};

/// Which catalog `segmirror link` works on, shown under its `--help`.
const LINK_HELP: &str = "\
Which catalog: --catalog PATH; else --mirror DIR's catalog (the target host's, as `apply --mirror DIR` uses); else \
the data directory's catalog.sqlite ($SEGMIRROR_HOME, else $XDG_DATA_HOME/segmirror, else ~/.local/share/segmirror), \
which is also where `ship`, `ship --store` and `seed` look for the source host's record of their --link. \
Lifecycle: active -> paused -> active; active|paused -> promoted (terminal); any -> deleted (a tombstone: its name \
can be reused only once nothing of the old link is recorded under it, and the new link gets a new id).";

/// How many events `describe` shows.
const DESCRIBE_EVENTS: usize = 10;

#[derive(clap::Args)]
#[command(after_help = format!("{LINK_HELP}\n\n{CATALOG_HELP}"))]
pub struct Args {
    /// The catalog holding the link records. See below for the default.
    #[arg(long, value_name = "PATH", global = true, conflicts_with = "mirror")]
    catalog: Option<PathBuf>,
    /// Use the catalog of this mirror root (the target host's).
    #[arg(long, value_name = "DIR", global = true)]
    mirror: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum TransportArg {
    /// The direct protocol: `segmirror ship` <-> `segmirror apply --listen|--connect` (--address HOST:PORT).
    Direct,
    /// An object store: `seed`/`ship --store` -> `apply [--follow]` (--address URL).
    Store,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Record a new link (state active, a new id).
    Create {
        /// The link's name ([A-Za-z0-9._-], as in bucket keys and on the direct protocol).
        name: String,
        /// The source end, as you name it (a cluster name, a bootstrap address); shown, never interpreted.
        #[arg(long, value_name = "TEXT", default_value = "")]
        source: String,
        /// The target end, as you name it.
        #[arg(long, value_name = "TEXT", default_value = "")]
        target: String,
        /// How the link carries data.
        #[arg(long, value_enum)]
        transport: TransportArg,
        /// The applier's HOST:PORT (direct) or the store URL (store: a path, file:///..., s3://bucket[/prefix]).
        #[arg(long, value_name = "ADDR|URL")]
        address: String,
        /// Topics the link carries: a comma-separated list of regular expressions, each matching a whole topic
        /// name (internal topics never). A running `ship` re-reads it.
        #[arg(long, value_name = "REGEX", default_value = ".*")]
        topics_regex: String,
        /// Consumer groups whose offsets the link carries (a regular expression); none without it.
        #[arg(long, value_name = "REGEX")]
        consumer_groups_regex: Option<String>,
        /// Print the link as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every link of the catalog (deleted ones included), as a table or JSON.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One link: every field and its last events.
    Describe {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a live link's regexes (a running `ship` picks the topics up within a second).
    Alter {
        name: String,
        #[arg(long, value_name = "REGEX")]
        topics_regex: Option<String>,
        #[arg(long, value_name = "REGEX", conflicts_with = "no_consumer_groups")]
        consumer_groups_regex: Option<String>,
        /// Carry no consumer groups' offsets any more.
        #[arg(long)]
        no_consumer_groups: bool,
    },
    /// active -> paused: nothing is shipped or installed until `resume` (running services stop within a second).
    Pause { name: String },
    /// paused -> active: the link catches up from where it stopped.
    Resume { name: String },
    /// active|paused -> promoted, terminal: nothing is installed again and shipping to it is refused. Only the
    /// state: the command that installs the mirror into the target broker is printed.
    Promote { name: String },
    /// -> deleted: a tombstone; every service of the link refuses it.
    Delete { name: String },
    /// Mirror a recreated source topic's partition anew. When the source topic is deleted and recreated (another
    /// topic id), the applier stops that partition alone (paused, `status` says why) and keeps the old lineage's
    /// copy. This archives that copy under the mirror's `.archive/` and mirrors the new topic from its start; a
    /// running applier takes it up within seconds. Give the applier's catalog (--mirror or --catalog).
    ResetPartition {
        name: String,
        topic: String,
        partition: i32,
    },
}

/// A link as `list --json`/`describe --json` print it.
#[derive(Serialize)]
struct LinkDoc<'a> {
    #[serde(flatten)]
    link: &'a Link,
    transport: Transport,
    address: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    partitions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<Vec<Event>>,
}

impl<'a> LinkDoc<'a> {
    fn new(link: &'a Link) -> Self {
        LinkDoc {
            link,
            transport: link.transport(),
            address: link.address(),
            partitions: None,
            events: None,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = match &args.mirror {
        Some(mirror) => mirror_catalog_path(args.catalog.clone(), mirror)?.0,
        None => catalog_path(args.catalog.clone())?,
    };
    let mut catalog = link_records::open(&path, matches!(args.command, Command::Create { .. }))?;
    match args.command {
        Command::Create {
            name,
            source,
            target,
            transport,
            address,
            topics_regex,
            consumer_groups_regex,
            json,
        } => {
            let transport = match transport {
                TransportArg::Direct => Transport::Direct,
                TransportArg::Store => Transport::Store,
            };
            let new = NewLink {
                name,
                source,
                target,
                transport,
                address,
                topics_regex,
                groups_regex: consumer_groups_regex,
            };
            let link = link_records::create(&mut catalog, new)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&LinkDoc::new(&link))?);
            } else {
                println!("created link {} (id {}) in {}", link.name, link.id, path.display());
            }
        }
        Command::List { json } => {
            let links = catalog.links()?;
            if json {
                let docs: Vec<_> = links.iter().map(LinkDoc::new).collect();
                println!("{}", serde_json::to_string_pretty(&docs)?);
            } else {
                print_table(&links);
            }
        }
        Command::Describe { name, json } => {
            let (link, partitions, events) = link_records::describe(&catalog, &name, DESCRIBE_EVENTS)?;
            if json {
                let mut doc = LinkDoc::new(&link);
                doc.partitions = Some(partitions);
                doc.events = Some(events);
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                print_described(&link, partitions, &events);
            }
        }
        Command::Alter {
            name,
            topics_regex,
            consumer_groups_regex,
            no_consumer_groups,
        } => {
            let groups = match (&consumer_groups_regex, no_consumer_groups) {
                (Some(g), _) => Some(Some(g.as_str())),
                (None, true) => Some(None),
                (None, false) => None,
            };
            let link = link_records::alter(&mut catalog, &name, topics_regex.as_deref(), groups)?;
            println!(
                "link {}: topics {:?}, consumer groups {}",
                link.name,
                link.topics_regex,
                link.groups_regex
                    .as_deref()
                    .map_or("none".to_string(), |g| format!("{g:?}"))
            );
        }
        Command::Pause { name } => transition(&mut catalog, &name, LinkState::Paused)?,
        Command::Resume { name } => transition(&mut catalog, &name, LinkState::Active)?,
        Command::Delete { name } => transition(&mut catalog, &name, LinkState::Deleted)?,
        Command::ResetPartition { name, topic, partition } => {
            let key = segmirror_catalog::PartitionKey::new(&name, &topic, partition);
            let (p, pending) = link_records::reset_partition(&mut catalog, &path, &key)?;
            println!(
                "{key}: the mirror's copy of source topic id {} is archived and source topic id {pending} mirrored \
                 from its start when the applier next hears from the shipper (a running applier: within seconds)",
                p.source_topic_id
            );
        }
        Command::Promote { name } => {
            transition(&mut catalog, &name, LinkState::Promoted)?;
            let catalog_arg = match &args.catalog {
                Some(c) => format!(" --catalog {}", c.display()),
                None => String::new(),
            };
            let mirror = args
                .mirror
                .as_ref()
                .map_or("MIRROR_DIR".to_string(), |m| m.display().to_string());
            println!(
                "nothing is installed under link {name} again. To make the mirror the target cluster's topics, stop \
                 the target broker and run:\n  segmirror promote --mirror {mirror} --log-dir TARGET_LOG_DIR --link \
                 {name}{catalog_arg}"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Moves `name` to `to` and says what happened (`from -> to`, or that it already was there).
fn transition(catalog: &mut Catalog, name: &str, to: LinkState) -> anyhow::Result<()> {
    let (from, link) = link_records::transition(catalog, name, to)?;
    if from == link.state {
        println!("link {name}: already {}", link.state);
    } else {
        println!("link {name}: {from} -> {}", link.state);
    }
    Ok(())
}

fn print_table(links: &[Link]) {
    if links.is_empty() {
        println!("no links");
        return;
    }
    println!(
        "{:<20} {:<9} {:<9} {:<30} {:<16} {:<16} {:<20} GROUPS",
        "NAME", "STATE", "TRANSPORT", "ADDRESS", "SOURCE", "TARGET", "TOPICS"
    );
    for l in links {
        println!(
            "{:<20} {:<9} {:<9} {:<30} {:<16} {:<16} {:<20} {}",
            l.name,
            l.state.as_str(),
            transport_name(l.transport()),
            or_dash(l.address()),
            or_dash(&l.source),
            or_dash(&l.target),
            l.topics_regex,
            l.groups_regex.as_deref().unwrap_or("-")
        );
    }
}

fn print_described(link: &Link, partitions: usize, events: &[Event]) {
    println!("name:            {}", link.name);
    println!("id:              {}", link.id);
    println!("state:           {}", link.state);
    println!("transport:       {}", transport_name(link.transport()));
    println!("address:         {}", or_dash(link.address()));
    println!("source:          {}", or_dash(&link.source));
    println!("target:          {}", or_dash(&link.target));
    println!("topics regex:    {}", link.topics_regex);
    println!("groups regex:    {}", link.groups_regex.as_deref().unwrap_or("-"));
    println!("created at ms:   {}", link.created_at_ms);
    if let Some(at) = link.deleted_at_ms {
        println!("deleted at ms:   {at}");
    }
    println!("partitions:      {partitions}");
    for e in events {
        println!("event {:>6} {} {} {}", e.id, e.at_ms, e.kind, e.detail);
    }
}

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Direct => "direct",
        Transport::Store => "store",
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}
