//! `--config FILE` of the long-running services, and `apply --listen|--connect`.
//!
//! A service's config file (TOML) holds any of its flags, each under the flag's own name without the dashes
//! (`log-dir = ["/var/lib/kafka/data"]`, `tls-cert = "ship.pem"`, `plaintext = true`); docs/config.md lists them.
//! A flag on the command line overrides the file's key of the same name (for a repeated flag such as `--log-dir`,
//! the command line's list replaces the file's); a flag of an exclusive pair (`--connect`/`--listen`,
//! `--plaintext`/`--tls-*`) overrides every key of the pair. Relative paths in the file are relative to the file's
//! directory, so a file and its certificates can be moved together. An unknown key, or a value of the wrong type,
//! is an error naming the key and the file (exit 2).
//!
//! Why the file becomes command-line arguments (added before clap parses them) rather than a second parser:
//! clap keeps being the one place that checks values, requirements and conflicts, so a setting is valid in the file
//! exactly when it is valid as a flag, and a flag added to a service is configurable once its key is listed here.
//!
//! `segmirror apply` with `--listen`/`--connect` (or a `--config` whose file has `listen` or `connect`) runs the
//! tail applier (`tail-apply`, kept as a hidden alias), and `segmirror ship --store` the bucket's shipper
//! (`store-ship`): clap reads the command line once to see which flags are given ([`expand`]), and the mode's own
//! command then parses it under the name typed ([`Mode::command`]). Two commands rather than one, because the
//! batch `apply` and the tail applier share flag names (`--mirror`, `--link`) with different requirements. Giving
//! the tail applier a flag of the batch `apply` (`--store`, ...) is a usage error of one line.
//!
//! `apply --help` and `ship --help` show both of their modes ([`both_modes`]): one usage line per mode with its own
//! required flags, and every flag of each under a heading naming its mode. Asking for help is never rerouted, so
//! `apply --listen ADDR --help` shows the same page rather than the hidden command's. The other mode's flags are
//! known to a command's parser only for that page: given without the flag that routes to that mode (`--listen`,
//! `--connect`; `--store`), they are refused, as before.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

/// How a key's value becomes arguments.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A string: `--key VALUE`.
    Text,
    /// A path: `--key PATH`, relative to the config file's directory.
    Path,
    /// A boolean switch: `--key` when true.
    Switch,
    /// A non-negative integer: `--key N`.
    Count,
    /// A list of paths: `--key P` per entry.
    Paths,
}

/// Keys every service takes: the link, its security, and the global log format.
const LINK_KEYS: &[(&str, Kind)] = &[
    ("link", Kind::Text),
    ("connect", Kind::Text),
    ("listen", Kind::Text),
    ("plaintext", Kind::Switch),
    ("tls-cert", Kind::Path),
    ("tls-key", Kind::Path),
    ("tls-ca", Kind::Path),
    ("tls-server-name", Kind::Text),
    ("log-format", Kind::Text),
    ("metrics-addr", Kind::Text),
];

/// Keys of `segmirror ship` besides [`LINK_KEYS`].
const SHIP_KEYS: &[(&str, Kind)] = &[
    ("log-dir", Kind::Paths),
    ("topics", Kind::Text),
    ("upto", Kind::Text),
    ("max-bandwidth", Kind::Count),
    ("source-bootstrap", Kind::Text),
    ("cluster", Kind::Switch),
    ("catalog", Kind::Path),
    ("metadata-log-dir", Kind::Path),
    ("groups", Kind::Text),
    ("meta-interval-ms", Kind::Count),
];

/// Keys of the tail applier besides [`LINK_KEYS`].
const TAIL_APPLY_KEYS: &[(&str, Kind)] = &[
    ("mirror", Kind::Path),
    ("source-cluster-id", Kind::Text),
    ("catalog", Kind::Path),
    ("retain-deleted-for", Kind::Count),
    ("cluster", Kind::Switch),
];

/// Flags of the batch `apply` that the tail applier does not take.
const BATCH_APPLY_FLAGS: &[&str] = &[
    "store",
    "prefix",
    "deep",
    "wait",
    "follow",
    "poll-interval-ms",
    "parallel",
    "json",
    "s3-endpoint",
    "s3-region",
    "allow-http",
];

/// One table of a command's config keys.
type Keys = &'static [(&'static str, Kind)];

/// Exclusive groups: a flag of one on the command line overrides every key of it in the file.
const GROUPS: &[&[&str]] = &[&["connect", "listen"], &["plaintext", "tls-cert", "tls-key", "tls-ca"]];

/// The config keys of `command` (`ship`, `tail-apply`): kept equal to the command's flags by a test in `main.rs`.
#[cfg(test)]
pub(crate) fn config_keys(command: &str) -> Vec<&'static str> {
    let tables: &[&[(&str, Kind)]] = match command {
        "ship" => &[LINK_KEYS, SHIP_KEYS],
        "tail-apply" => &[LINK_KEYS, TAIL_APPLY_KEYS],
        _ => &[],
    };
    tables.iter().flat_map(|t| t.iter()).map(|(k, _)| *k).collect()
}

/// [`BATCH_APPLY_FLAGS`], for the same test.
#[cfg(test)]
pub(crate) fn batch_apply_flags() -> &'static [&'static str] {
    BATCH_APPLY_FLAGS
}

/// `apply`'s usage line of the tail applier: what it requires (also shown by its own usage errors, under the name
/// the operator typed rather than the hidden `tail-apply`).
const TAIL_USAGE: &str = "segmirror apply <--listen <ADDR>|--connect <HOST:PORT>> --mirror <DIR> --link <NAME> \
<--plaintext|--tls-cert <FILE> --tls-key <FILE> --tls-ca <FILE>> [OPTIONS]";

/// `ship --store`'s usage line (the command `store-ship` it is routed to is hidden).
const STORE_SHIP_USAGE: &str = "segmirror ship --store <URL> --log-dir <DIR>... \
<--source-bootstrap <HOST:PORT>|--upto log-end> [OPTIONS]";

/// A command of two modes as its help shows it: the flags only it takes under `own_heading`, the flags only the
/// other mode's (hidden) command takes added under `other_heading`, each requiring one of `triggers` (the flags
/// that route a command line to the other mode before parsing, so the command itself still refuses them), and one
/// usage line per mode.
struct TwoModes {
    name: &'static str,
    own_heading: &'static str,
    /// The hidden command parsing the other mode.
    other: &'static str,
    other_heading: &'static str,
    /// The other mode's flags that route to it; grouped as `group`.
    triggers: &'static [&'static str],
    group: &'static str,
    usage: String,
    /// Appended to the help of `--link`, which both modes take with other rules.
    link_note: &'static str,
}

/// `apply`: the store apply, and the tail applier of `--listen`/`--connect`; `ship`: the direct link, and the
/// bucket's of `--store`.
fn two_modes() -> [TwoModes; 2] {
    [
        TwoModes {
            name: "apply",
            own_heading: "The store apply (--store URL; --follow keeps it running)",
            other: "tail-apply",
            other_heading: "The tail applier (--listen ADDR or --connect HOST:PORT)",
            triggers: &["listen", "connect"],
            group: "tail_direction",
            usage: format!(
                "segmirror apply --store <URL> --mirror <DIR> [--link <NAME>] [--follow] [OPTIONS]\n       \
                 {TAIL_USAGE}\n       \
                 segmirror apply --config <FILE> [OPTIONS]   (a file with `listen` or `connect`: the tail applier)"
            ),
            link_note: "Required by the tail applier: the link's name, the same at both ends",
        },
        TwoModes {
            name: "ship",
            own_heading: "The direct link (--connect HOST:PORT or --listen ADDR)",
            other: "store-ship",
            other_heading: "Through a bucket (--store URL)",
            triggers: &["store"],
            group: "store_mode",
            usage: format!(
                "segmirror ship <--connect <HOST:PORT>|--listen <ADDR>> --link <NAME> --log-dir <DIR>... \
                 <--plaintext|--tls-cert <FILE> --tls-key <FILE> --tls-ca <FILE>> [OPTIONS]\n       \
                 {STORE_SHIP_USAGE}\n       segmirror ship --config <FILE> [OPTIONS]"
            ),
            link_note: "With --store: optional (default `default`), the first key component in the bucket",
        },
    ]
}

/// `root` with `apply` and `ship` showing both of their modes (see the module doc and [`TwoModes`]), and the hidden
/// commands' usage errors naming the command typed. What each mode accepts is unchanged: only what `--help` shows.
pub fn both_modes(root: clap::Command) -> clap::Command {
    let mut root = root
        .mut_subcommand("tail-apply", |t| t.override_usage(TAIL_USAGE))
        .mut_subcommand("store-ship", |t| t.override_usage(STORE_SHIP_USAGE));
    for mode in two_modes() {
        let Some(other) = root.find_subcommand(mode.other).cloned() else {
            continue;
        };
        root = root.mut_subcommand(mode.name, |cmd| with_other_mode(cmd, &other, mode));
    }
    root
}

fn with_other_mode(mut cmd: clap::Command, other: &clap::Command, mode: TwoModes) -> clap::Command {
    let longs = |c: &clap::Command| -> BTreeSet<String> {
        c.get_arguments()
            .filter(|a| !a.is_global_set())
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "help")
            .map(String::from)
            .collect()
    };
    let (own, theirs) = (longs(&cmd), longs(other));
    // This mode's own flags first (`mut_arg` moves a flag to the end: their heading then comes first).
    for long in own.difference(&theirs) {
        let id = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()))
            .map(|a| a.get_id().clone());
        if let Some(id) = id {
            cmd = cmd.mut_arg(id, |a| a.help_heading(mode.own_heading));
        }
    }
    let added: Vec<clap::Arg> = other
        .get_arguments()
        .filter(|a| !a.is_global_set() && a.get_long().is_some_and(|l| !own.contains(l)))
        .map(|a| {
            let trigger = a.get_long().is_some_and(|l| mode.triggers.contains(&l));
            let a = a.clone().help_heading(mode.other_heading).required(false);
            if trigger {
                a
            } else {
                a.requires(mode.group)
            }
        })
        .collect();
    let link_note = mode.link_note;
    cmd.args(added)
        .group(clap::ArgGroup::new(mode.group).args(mode.triggers).multiple(false))
        .override_usage(mode.usage)
        .mut_arg("link", |a| {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            a.help(format!("{help}. {link_note}"))
        })
}

/// A command line's hidden command, run under the name typed: the direct applier for `apply --listen|--connect` (or
/// `apply --config` with a file holding `listen` or `connect`), the bucket's shipper for `ship --store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `apply` run by the direct applier's definition (the hidden `tail-apply`).
    ApplyDirect,
    /// `ship` run by the bucket shipper's definition (the hidden `store-ship`).
    ShipBucket,
}

impl Mode {
    /// The command typed.
    pub fn typed(self) -> &'static str {
        match self {
            Mode::ApplyDirect => "apply",
            Mode::ShipBucket => "ship",
        }
    }

    /// `root` with the typed command's definition replaced by the hidden one's, under the typed name: clap then
    /// checks the arguments against the mode's own flags and requirements, and its usage errors name the command
    /// typed.
    pub fn command(self, root: clap::Command) -> clap::Command {
        let hidden = match self {
            Mode::ApplyDirect => "tail-apply",
            Mode::ShipBucket => "store-ship",
        };
        let Some(runs) = root.find_subcommand(hidden).cloned() else {
            return root;
        };
        root.mut_subcommand(self.typed(), |_| runs.name(self.typed()))
    }
}

/// A command line ready for clap: the arguments (with a config file's keys added) and the mode that parses them.
#[derive(Debug)]
pub struct Routed {
    pub args: Vec<OsString>,
    /// `None`: the command typed parses them.
    pub mode: Option<Mode>,
}

/// The long flags given on the command line to `cmd` (its arguments in `matches`), without their dashes.
fn given_to(cmd: &clap::Command, matches: &clap::ArgMatches) -> BTreeSet<String> {
    cmd.get_arguments()
        .filter(|a| matches.value_source(a.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine))
        .filter_map(|a| a.get_long())
        .map(String::from)
        .collect()
}

/// The command line with a `--config` file's keys added, and its mode (see the module doc), both read from clap's
/// own first reading of the arguments (`root` is the command `main` parses with, [`both_modes`]). That reading
/// ignores errors (a missing required flag): the real parse, by the mode's command, reports them. A command line
/// that asks for help (or the version) is not routed, so `apply --listen ADDR --help` shows the same page as
/// `apply --help`. Arguments that are not valid UTF-8 are passed through untouched.
pub fn expand(root: &clap::Command, args: Vec<OsString>) -> anyhow::Result<Routed> {
    let unrouted = |args| Ok(Routed { args, mode: None });
    let Ok(matches) = root.clone().ignore_errors(true).try_get_matches_from(args.iter()) else {
        return unrouted(args);
    };
    let Some((name, sub)) = matches.subcommand() else {
        return unrouted(args);
    };
    let Some(cmd) = root.find_subcommand(name) else {
        return unrouted(args);
    };
    let given = given_to(cmd, sub);
    let config = sub.try_get_one::<PathBuf>("config").ok().flatten().cloned();
    if name == "ship" && given.contains("store") {
        // The continuous shipper through a bucket: a command of its own (`cmd::ship_bucket`), flags only.
        if config.is_some() {
            bail!("ship --store takes flags only; --config is for the direct link's ship");
        }
        return Ok(Routed {
            args,
            mode: Some(Mode::ShipBucket),
        });
    }
    let table = match &config {
        Some(path) => Some(load(path)?),
        None => None,
    };
    let (keys, mode): (Vec<Keys>, Option<Mode>) = match name {
        "ship" => (vec![LINK_KEYS, SHIP_KEYS], None),
        "tail-apply" => (vec![LINK_KEYS, TAIL_APPLY_KEYS], None),
        "apply" => {
            let file_link = table
                .as_ref()
                .is_some_and(|t| t.contains_key("listen") || t.contains_key("connect"));
            let tail = given.contains("listen") || given.contains("connect") || file_link;
            if !tail {
                if config.is_some() {
                    bail!("apply --config is for the tail applier (a file with `listen` or `connect`); the store apply takes flags only");
                }
                return unrouted(args);
            }
            if let Some(flag) = BATCH_APPLY_FLAGS.iter().find(|f| given.contains(**f)) {
                bail!(
                    "apply --{flag}: a flag of the store apply, but --listen/--connect make apply the tail applier, which takes none of {}",
                    BATCH_APPLY_FLAGS.iter().map(|f| format!("--{f}")).collect::<Vec<_>>().join(", ")
                );
            }
            (vec![LINK_KEYS, TAIL_APPLY_KEYS], Some(Mode::ApplyDirect))
        }
        _ => return unrouted(args),
    };
    let mut args = args;
    if let (Some(path), Some(table)) = (config, table) {
        let all_given: BTreeSet<String> = given.union(&given_to(root, &matches)).cloned().collect();
        args.extend(to_args(&path, &table, &keys, &all_given)?);
    }
    Ok(Routed { args, mode })
}

/// The file's table; an error names the file (and TOML's own line and column).
fn load(path: &Path) -> anyhow::Result<toml::Table> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config file {}", path.display()))?;
    text.parse::<toml::Table>()
        .with_context(|| format!("config file {} is not valid TOML", path.display()))
}

/// The arguments the file's keys stand for, leaving out what the command line gives.
fn to_args(
    path: &Path,
    table: &toml::Table,
    keys: &[&[(&str, Kind)]],
    given: &BTreeSet<String>,
) -> anyhow::Result<Vec<OsString>> {
    let base = path.parent().unwrap_or(Path::new(""));
    let overridden = |key: &str| {
        given.contains(key)
            || GROUPS
                .iter()
                .any(|g| g.contains(&key) && g.iter().any(|k| given.contains(*k)))
    };
    let mut out = Vec::new();
    for (key, value) in table {
        let Some(kind) = keys
            .iter()
            .flat_map(|k| k.iter())
            .find(|(k, _)| k == key)
            .map(|(_, kind)| *kind)
        else {
            let known: Vec<&str> = keys.iter().flat_map(|k| k.iter()).map(|(k, _)| *k).collect();
            bail!(
                "config file {}: unknown key `{key}` (this command's keys: {})",
                path.display(),
                known.join(", ")
            );
        };
        let wrong = |expected: &str| {
            anyhow::anyhow!(
                "config file {}: key `{key}` must be {expected}, not {}",
                path.display(),
                value.type_str()
            )
        };
        let flag = OsString::from(format!("--{key}"));
        // Validated even when overridden: a broken file is an error whatever the command line says.
        let mut pending: Vec<OsString> = Vec::new();
        let mut switch = false;
        match (kind, value) {
            (Kind::Text, toml::Value::String(s)) => pending.push(s.into()),
            (Kind::Path, toml::Value::String(s)) => pending.push(base.join(s).into()),
            (Kind::Count, toml::Value::Integer(n)) if *n >= 0 => pending.push(n.to_string().into()),
            (Kind::Switch, toml::Value::Boolean(b)) => switch = *b,
            (Kind::Paths, toml::Value::Array(items)) => {
                for item in items {
                    let toml::Value::String(s) = item else {
                        return Err(wrong("a list of paths (strings)"));
                    };
                    pending.push(base.join(s).into());
                }
            }
            (Kind::Text | Kind::Path, _) => return Err(wrong("a string")),
            (Kind::Count, _) => return Err(wrong("a non-negative integer")),
            (Kind::Switch, _) => return Err(wrong("true or false")),
            (Kind::Paths, _) => return Err(wrong("a list of paths")),
        }
        if overridden(key) {
            continue;
        }
        if switch {
            out.push(flag.clone());
        }
        for v in pending {
            out.push(flag.clone());
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    /// `args` expanded against the command `main` parses with.
    fn expand(args: Vec<OsString>) -> anyhow::Result<Routed> {
        super::expand(&both_modes(<crate::Cli as clap::CommandFactory>::command()), args)
    }

    fn strs(args: &[OsString]) -> Vec<String> {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    fn file(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("service.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn apply_with_a_direction_is_the_tail_applier_and_refuses_store_flags() {
        let args = os(&["segmirror", "apply", "--listen", "0:1", "--mirror", "m"]);
        let out = expand(args.clone()).unwrap();
        assert_eq!(
            (out.args, out.mode),
            (args, Some(Mode::ApplyDirect)),
            "the command line is left as typed"
        );
        let out = expand(os(&["segmirror", "--log-format", "json", "apply", "--connect=h:1"])).unwrap();
        assert_eq!(out.mode, Some(Mode::ApplyDirect));
        // The store apply is left alone, and so is a request for help.
        let plain = os(&["segmirror", "apply", "--store", "file:///s", "--mirror", "m"]);
        let out = expand(plain.clone()).unwrap();
        assert_eq!((out.args, out.mode), (plain, None));
        let out = expand(os(&["segmirror", "apply", "--listen", "0:1", "--help"])).unwrap();
        assert_eq!(out.mode, None);
        let err = expand(os(&["segmirror", "apply", "--listen", "0:1", "--store", "file:///s"])).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("--store") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn ship_with_a_store_is_the_store_shipper_and_takes_no_config_file() {
        let out = expand(os(&["segmirror", "ship", "--store", "s3://b", "--log-dir", "k"])).unwrap();
        assert_eq!(out.mode, Some(Mode::ShipBucket));
        let out = expand(os(&["segmirror", "ship", "--store=/b"])).unwrap();
        assert_eq!(out.mode, Some(Mode::ShipBucket));
        let err = expand(os(&["segmirror", "ship", "--store", "/b", "--config", "x.toml"])).unwrap_err();
        assert!(err.to_string().contains("flags only"), "{err}");
        // Without --store, ship is the direct link's.
        let out = expand(os(&["segmirror", "ship", "--connect", "h:1"])).unwrap();
        assert_eq!((strs(&out.args)[1].as_str(), out.mode), ("ship", None));
    }

    #[test]
    fn file_keys_become_flags_and_flags_override_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(
            dir.path(),
            "link = \"l1\"\nlisten = \"0.0.0.0:9400\"\nplaintext = true\nlog-dir = [\"a\", \"/abs/b\"]\nmax-bandwidth = 1000\ntopics = \"t.*\"\n",
        );
        let p = path.to_str().unwrap();
        let out = strs(
            &expand(os(&[
                "segmirror",
                "ship",
                "--config",
                p,
                "--link",
                "l2",
                "--connect",
                "h:1",
            ]))
            .unwrap()
            .args,
        );
        let tail = &out[7..];
        assert!(!tail.contains(&"l1".to_string()), "--link overrides: {out:?}");
        assert!(
            !tail.contains(&"--listen".to_string()),
            "--connect overrides listen: {out:?}"
        );
        assert!(tail.contains(&"--plaintext".to_string()));
        let a = dir.path().join("a").to_string_lossy().into_owned();
        assert!(
            tail.windows(2).any(|w| w == ["--log-dir".to_string(), a.clone()]),
            "relative to the file: {out:?}"
        );
        assert!(tail.windows(2).any(|w| w == ["--log-dir", "/abs/b"]), "{out:?}");
        assert!(tail.windows(2).any(|w| w == ["--max-bandwidth", "1000"]), "{out:?}");
        // A --log-dir on the command line replaces the file's list; --tls-cert overrides plaintext.
        let out = strs(
            &expand(os(&[
                "segmirror",
                "ship",
                "--config",
                p,
                "--log-dir",
                "x",
                "--tls-cert",
                "c",
            ]))
            .unwrap()
            .args,
        );
        assert_eq!(out.iter().filter(|a| *a == "--log-dir").count(), 1, "{out:?}");
        assert!(!out.contains(&"--plaintext".to_string()), "{out:?}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = file(dir.path(), "link = \"l\"\nmirror = \"m\"\n");
        let p = path.to_str().unwrap();
        // `mirror` is the applier's key, not the shipper's.
        let msg = expand(os(&["segmirror", "ship", "--config", p]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("unknown key `mirror`") && msg.contains(p), "{msg}");
        assert!(expand(os(&["segmirror", "tail-apply", "--config", p])).is_ok());
        let path = file(dir.path(), "max-bandwidth = \"fast\"\n");
        let msg = expand(os(&["segmirror", "ship", "--config", path.to_str().unwrap()]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`max-bandwidth`") && msg.contains("service.toml"), "{msg}");
        let path = file(dir.path(), "link = \n");
        let msg = match expand(os(&["segmirror", "ship", "--config", path.to_str().unwrap()])) {
            Ok(_) => panic!("an invalid file was read"),
            Err(e) => format!("{e:#}"),
        };
        assert!(msg.contains("service.toml") && msg.contains("TOML"), "{msg}");
    }
}
