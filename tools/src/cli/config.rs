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
//! tail applier (`tail-apply`, kept as a hidden alias): decided here, on the raw arguments, because the batch
//! `apply` and the tail applier share flag names (`--mirror`, `--link`) with different requirements. Giving the
//! tail applier a flag of the batch `apply` (`--store`, ...) is a usage error of one line.
//!
//! `apply --help` shows both modes ([`apply_with_both_modes`]): one usage line per mode with its own required
//! flags, and every flag of each under a heading naming its mode. Asking for help is never rerouted, so `apply
//! --listen ADDR --help` shows the same page rather than the hidden command's. The tail applier's flags are known
//! to the store apply's parser only for that page: given without `--listen`/`--connect` they are refused, as before.

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

/// `apply --help`'s heading over the store apply's own flags.
const STORE_HEADING: &str = "The store apply (--store URL; --follow keeps it running)";

/// `apply --help`'s heading over the tail applier's own flags.
const TAIL_HEADING: &str = "The tail applier (--listen ADDR or --connect HOST:PORT)";

/// The group of `--listen`/`--connect` added to `apply` ([`apply_with_both_modes`]).
const DIRECTION: &str = "tail_direction";

/// The tail applier's usage line: what it requires (also shown by its own usage errors, under the name the
/// operator typed rather than the hidden `tail-apply`).
const TAIL_USAGE: &str = "segmirror apply <--listen <ADDR>|--connect <HOST:PORT>> --mirror <DIR> --link <NAME> \
<--plaintext|--tls-cert <FILE> --tls-key <FILE> --tls-ca <FILE>> [OPTIONS]";

/// `ship --store`'s usage line (the command `store-ship` it is routed to is hidden).
const STORE_SHIP_USAGE: &str = "segmirror ship --store <URL> --log-dir <DIR>... \
<--source-bootstrap <HOST:PORT>|--upto log-end> [OPTIONS]";

/// `apply`'s usage lines, one per mode: what each mode requires.
fn apply_usage() -> String {
    format!(
        "segmirror apply --store <URL> --mirror <DIR> [--link <NAME>] [--follow] [OPTIONS]\n       {TAIL_USAGE}\n       \
         segmirror apply --config <FILE> [OPTIONS]   (a file with `listen` or `connect`: the tail applier)"
    )
}

/// `root` with its `apply` subcommand showing both modes (see the module doc): the tail applier's flags that the
/// store apply lacks are added under [`TAIL_HEADING`] (each requiring `--listen` or `--connect`, which always
/// reroute to `tail-apply` before parsing, so the store apply still refuses them), the store apply's own under
/// [`STORE_HEADING`], `--store` required only without `--listen`/`--connect`, and one usage line per mode. What
/// each mode accepts is unchanged: only what `apply --help` shows.
pub fn apply_with_both_modes(root: clap::Command) -> clap::Command {
    let Some(tail) = root.find_subcommand("tail-apply").cloned() else {
        return root;
    };
    let root = root
        .mut_subcommand("tail-apply", |t| t.override_usage(TAIL_USAGE))
        // `ship --store`'s help and usage errors name the command typed too, not the hidden `store-ship`.
        .mut_subcommand("store-ship", |t| t.override_usage(STORE_SHIP_USAGE));
    root.mut_subcommand("apply", |mut apply| {
        // The store apply's own flags first (`mut_arg` moves a flag to the end: their heading then comes first).
        for flag in BATCH_APPLY_FLAGS {
            let id = apply
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .map(|a| a.get_id().clone());
            if let Some(id) = id {
                apply = apply.mut_arg(id, |a| a.help_heading(STORE_HEADING));
            }
        }
        let own: BTreeSet<String> = apply
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(String::from)
            .collect();
        let added: Vec<clap::Arg> = tail
            .get_arguments()
            .filter(|a| !a.is_global_set() && a.get_long().is_some_and(|l| !own.contains(l)))
            .map(|a| {
                let is_direction = matches!(a.get_long(), Some("listen" | "connect"));
                let a = a.clone().help_heading(TAIL_HEADING).required(false);
                if is_direction {
                    a
                } else {
                    a.requires(DIRECTION)
                }
            })
            .collect();
        apply
            .args(added)
            .group(
                clap::ArgGroup::new(DIRECTION)
                    .args(["listen", "connect"])
                    .multiple(false),
            )
            .override_usage(apply_usage())
            .mut_arg("store", |a| a.required(false).required_unless_present(DIRECTION))
            .mut_arg("link", |a| {
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                a.help(format!(
                    "{help}. Required by the tail applier: the link's name, the same at both ends"
                ))
            })
    })
}

/// Whether the command line asks for help (`-h`/`--help` before any `--`).
fn asks_for_help(args: &[OsString]) -> bool {
    args.iter()
        .filter_map(|a| a.to_str())
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
}

/// The global flags that take a value (skipped when looking for the subcommand).
const GLOBAL_VALUE_FLAGS: &[&str] = &["--log-format"];

/// The command line with `apply --listen|--connect` turned into the tail applier and a `--config` file's keys
/// added (see the module doc). Arguments that are not valid UTF-8 are passed through untouched.
pub fn expand(args: Vec<OsString>) -> anyhow::Result<Vec<OsString>> {
    let Some(sub) = subcommand_index(&args) else {
        return Ok(args);
    };
    let mut args = args;
    let given = flags_given(&args[sub + 1..]);
    let config = config_path(&args[sub + 1..]);
    if args[sub].to_str() == Some("ship") && given.contains("store") {
        // The continuous shipper through a bucket: a command of its own (`cmd::store_ship`), flags only.
        if config.is_some() {
            bail!("ship --store takes flags only; --config is for the direct link's ship");
        }
        args[sub] = OsString::from("store-ship");
        return Ok(args);
    }
    let table = match &config {
        Some(path) => Some(load(path)?),
        None => None,
    };
    let name = args[sub].to_str().unwrap_or_default().to_string();
    let keys: Vec<&[(&str, Kind)]> = match name.as_str() {
        "ship" => vec![LINK_KEYS, SHIP_KEYS],
        "tail-apply" => vec![LINK_KEYS, TAIL_APPLY_KEYS],
        // Help shows both modes (`apply_with_both_modes`), whatever else is given.
        "apply" if asks_for_help(&args[sub + 1..]) => return Ok(args),
        "apply" => {
            let file_link = table
                .as_ref()
                .is_some_and(|t| t.contains_key("listen") || t.contains_key("connect"));
            let tail = given.contains("listen") || given.contains("connect") || file_link;
            if !tail {
                if config.is_some() {
                    bail!("apply --config is for the tail applier (a file with `listen` or `connect`); the store apply takes flags only");
                }
                return Ok(args);
            }
            if let Some(flag) = BATCH_APPLY_FLAGS.iter().find(|f| given.contains(**f)) {
                bail!(
                    "apply --{flag}: a flag of the store apply, but --listen/--connect make apply the tail applier, which takes none of {}",
                    BATCH_APPLY_FLAGS.iter().map(|f| format!("--{f}")).collect::<Vec<_>>().join(", ")
                );
            }
            args[sub] = OsString::from("tail-apply");
            vec![LINK_KEYS, TAIL_APPLY_KEYS]
        }
        _ => return Ok(args),
    };
    if let (Some(path), Some(table)) = (config, table) {
        let all_given = flags_given(&args);
        args.extend(to_args(&path, &table, &keys, &all_given)?);
    }
    Ok(args)
}

/// Where the subcommand is: the first argument after the program that is not a global flag or its value.
fn subcommand_index(args: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while let Some(arg) = args.get(i) {
        let s = arg.to_str()?;
        if GLOBAL_VALUE_FLAGS.contains(&s) {
            i += 2;
        } else if s.starts_with('-') {
            i += 1;
        } else {
            return Some(i);
        }
    }
    None
}

/// The long flags present (`--name` or `--name=value`), without their dashes.
fn flags_given(args: &[OsString]) -> BTreeSet<String> {
    args.iter()
        .filter_map(|a| a.to_str())
        .take_while(|a| *a != "--")
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split_once('=').map_or(a, |(name, _)| name).to_string())
        .collect()
}

/// The value of `--config FILE` / `--config=FILE`, if given.
fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let s = arg.to_str()?;
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    None
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
        let out = expand(os(&["segmirror", "apply", "--listen", "0:1", "--mirror", "m"])).unwrap();
        assert_eq!(strs(&out)[1], "tail-apply");
        let out = expand(os(&["segmirror", "--log-format", "json", "apply", "--connect=h:1"])).unwrap();
        assert_eq!(strs(&out)[3], "tail-apply");
        // The store apply is left alone.
        let plain = os(&["segmirror", "apply", "--store", "file:///s", "--mirror", "m"]);
        assert_eq!(expand(plain.clone()).unwrap(), plain);
        let err = expand(os(&["segmirror", "apply", "--listen", "0:1", "--store", "file:///s"])).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("--store") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn ship_with_a_store_is_the_store_shipper_and_takes_no_config_file() {
        let out = expand(os(&["segmirror", "ship", "--store", "s3://b", "--log-dir", "k"])).unwrap();
        assert_eq!(strs(&out)[1], "store-ship");
        let out = expand(os(&["segmirror", "ship", "--store=/b"])).unwrap();
        assert_eq!(strs(&out)[1], "store-ship");
        let err = expand(os(&["segmirror", "ship", "--store", "/b", "--config", "x.toml"])).unwrap_err();
        assert!(err.to_string().contains("flags only"), "{err}");
        // Without --store, ship is the direct link's.
        let out = expand(os(&["segmirror", "ship", "--connect", "h:1"])).unwrap();
        assert_eq!(strs(&out)[1], "ship");
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
            .unwrap(),
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
            .unwrap(),
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
        let msg = format!(
            "{:#}",
            expand(os(&["segmirror", "ship", "--config", path.to_str().unwrap()])).unwrap_err()
        );
        assert!(msg.contains("service.toml") && msg.contains("TOML"), "{msg}");
    }
}
