//! Writes the seed corpus of every target into `corpus/<target>/` (or the
//! directory given as the first argument) and replays each seed through its
//! target body, so a seed that already breaks a property fails here, not in a
//! fuzzing run. `cargo run --example seeds` from `fuzz/`.

use std::path::PathBuf;

fn main() -> std::io::Result<()> {
    let root = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("corpus"), PathBuf::from);
    for (target, seeds) in segment_format_fuzz::seeds::all() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), seed)?;
            segment_format_fuzz::run(target, seed);
        }
        println!("{target}: {} seeds in {}", seeds.len(), dir.display());
    }
    Ok(())
}
