//! `error_line` over chains whose messages embed their sources' text.

use anyhow::Context as _;

use crate::error_line;

#[derive(Debug)]
struct Embeds(std::io::Error);

impl std::fmt::Display for Embeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot open catalog /x: {}", self.0)
    }
}

impl std::error::Error for Embeds {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn each_cause_is_named_once() {
    let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
    // A source that embeds its cause, under a context: `{:#}` names "no such file" twice.
    let e = Err::<(), _>(Embeds(io())).context("opening catalog /x").unwrap_err();
    assert_eq!(format!("{e:#}").matches("no such file").count(), 2);
    assert_eq!(
        error_line(&e),
        "opening catalog /x: cannot open catalog /x: no such file"
    );
    // A chain of distinct causes is kept whole, in order.
    let e = Err::<(), _>(io())
        .context("reading x")
        .context("loading y")
        .unwrap_err();
    assert_eq!(error_line(&e), "loading y: reading x: no such file");
    // A context that repeats its source's whole text keeps the longer one.
    let e = Err::<(), _>(io()).context("reading x: no such file").unwrap_err();
    assert_eq!(error_line(&e), "reading x: no such file");
}
