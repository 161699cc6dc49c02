//! `failover --json`: the report (`segmirror_service::failover::report`) as one JSON document on stdout.
//!
//! Why stdout is taken over for the whole run ([`StdoutForJson`]) rather than each line routed: the steps print
//! tables through shared code (`topics create`, `offsets commit`, `promote`), and the hooks run with `sh -c`
//! inherit the process's stdout; anything of theirs on stdout would make the document unparsable. While the
//! failover runs, file descriptor 1 is a copy of stderr (the human lines and the hooks' output still reach the
//! terminal), and the document alone is written to the original stdout at the end.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use segmirror_service::failover::report::Report;

/// Holds file descriptor 1 for the JSON document while the failover runs (see the module doc). Dropped without
/// [`StdoutForJson::write`] (an error before the document), it gives stdout back all the same.
pub struct StdoutForJson {
    saved: Option<OwnedFd>,
}

impl StdoutForJson {
    /// From now on, what is written to stdout (by this process or a child it starts) goes to stderr.
    pub fn take() -> std::io::Result<StdoutForJson> {
        std::io::stdout().flush()?;
        let saved = std::io::stdout().as_fd().try_clone_to_owned()?;
        redirect(std::io::stderr().as_raw_fd())?;
        Ok(StdoutForJson { saved: Some(saved) })
    }

    /// Give stdout back and write `report` there, alone, on one line.
    pub fn write(mut self, report: &Report) -> anyhow::Result<()> {
        self.restore()?;
        let mut out = std::io::stdout().lock();
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
        out.flush()?;
        Ok(())
    }

    fn restore(&mut self) -> std::io::Result<()> {
        match self.saved.take() {
            Some(saved) => {
                std::io::stdout().flush()?;
                redirect(saved.as_raw_fd())
            }
            None => Ok(()),
        }
    }
}

impl Drop for StdoutForJson {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

/// Make file descriptor 1 a copy of `fd`.
fn redirect(fd: std::os::fd::RawFd) -> std::io::Result<()> {
    // SAFETY: dup2 takes two descriptor numbers and touches no memory; `fd` is open (stderr, or the copy of stdout
    // this module owns), and fd 1 is owned by the process's `Stdout`, which is flushed before each switch, so no
    // buffered byte meant for one file reaches the other.
    if unsafe { libc::dup2(fd, libc::STDOUT_FILENO) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
