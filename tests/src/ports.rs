//! Free loopback ports for brokers.
//!
//! A port is chosen **below the kernel's ephemeral range** (Linux: 32768–60999 by default), where the kernel never
//! picks the local port of an outgoing connection. Why: a port taken from the kernel (bind `127.0.0.1:0`) is an
//! ephemeral one, and a broker that stops and restarts on its port can find it held by some client's connection in
//! between (seen in CI: "Address already in use" as a promoted target restarted). Within this process a port is
//! remembered for the life of the process, so that two brokers started by parallel test threads never get the same
//! port and a stopped broker's ports are not handed to another broker before it restarts on them. Across processes
//! (parallel test binaries), a port is claimed by an advisory lock on a file named after it in the temporary
//! directory, held until the process exits (the kernel releases it then, even after a crash).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

/// The ports handed out: below the ephemeral range, above the well-known and common service ports.
const FIRST_PORT: u16 = 20_000;
const LAST_PORT: u16 = 32_000;

/// The ports this process handed out, and the claim of each.
static HANDED_OUT: Mutex<Option<(HashSet<u16>, Vec<File>)>> = Mutex::new(None);

/// A loopback TCP port that is free now, was not returned before by this process, and is claimed by no other
/// process using this function.
pub fn free_port() -> Result<u16> {
    let mut guard = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (used, claims) = guard.get_or_insert_with(|| (HashSet::new(), Vec::new()));
    let dir = std::env::temp_dir().join("segmirror-test-ports");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let span = u32::from(LAST_PORT - FIRST_PORT) + 1;
    // Parallel processes start their search in different places, so that they rarely meet on one claim.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = (std::process::id().wrapping_mul(7919) ^ nanos) % span;
    for i in 0..span {
        let port = FIRST_PORT + ((start + i) % span) as u16;
        if used.contains(&port) {
            continue;
        }
        let path = dir.join(format!("{port}.lock"));
        let claim = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        if claim.try_lock().is_err() {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
            continue;
        }
        used.insert(port);
        claims.push(claim);
        return Ok(port);
    }
    bail!("no free loopback port in {FIRST_PORT}..={LAST_PORT}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
        for port in ports {
            assert!((FIRST_PORT..=LAST_PORT).contains(&port), "{port}");
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        }
    }

    #[test]
    fn a_port_claimed_by_another_process_is_not_handed_out() {
        // Claimed as another process would: the lock of its file held by another open file description.
        let port = free_port().unwrap();
        let path = std::env::temp_dir()
            .join("segmirror-test-ports")
            .join(format!("{port}.lock"));
        let other = OpenOptions::new().write(true).open(&path).unwrap();
        assert!(other.try_lock().is_err(), "the claim of {port} is held");
    }
}
