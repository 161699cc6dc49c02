//! Free loopback ports for brokers.
//!
//! A port is taken from the kernel (bind `127.0.0.1:0`) and remembered for the life of the process, so that two
//! brokers started by parallel test threads never get the same port, and a stopped broker's ports are not handed to
//! another broker before it restarts on them. Another process may still grab a port between our probe and the
//! broker's bind; the broker then fails to start with a clear "Address already in use" in its log.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback TCP port that is free now and was not returned before by this process.
pub fn free_port() -> Result<u16> {
    let mut guard = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let used = guard.get_or_insert_with(HashSet::new);
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0")?;
        let port = listener.local_addr().context("local address of a probe socket")?.port();
        if used.insert(port) {
            return Ok(port);
        }
    }
    bail!("no new free loopback port after 100 attempts")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
        for port in ports {
            TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
        }
    }
}
