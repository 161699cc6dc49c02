pub mod apply;
pub mod apply_direct;
pub mod demo;
pub mod failover;
pub mod generate;
pub mod link;
pub mod offsets;
pub mod promote;
pub mod seed;
pub mod serve;
pub mod ship;
pub mod ship_bucket;
pub mod status;
pub mod topics;
pub mod verify;

/// `--parallel N` of `seed` and `apply`: at least one partition at a time (0 is refused, naming the flag, rather
/// than quietly read as 1).
pub(crate) fn parse_parallel(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
