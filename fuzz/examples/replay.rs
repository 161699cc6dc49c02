//! Replays inputs (files, or every file of the directories given) through one
//! target body without libFuzzer or sanitizers, and prints the slowest ones:
//! `cargo run --release --example replay -- <target> <path>...`. Used to
//! reproduce a finding under a debugger and to look for slow inputs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(target) = args.next() else {
        eprintln!("usage: replay <target> <file or dir>...");
        std::process::exit(2);
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for arg in args {
        let path = PathBuf::from(arg);
        if path.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                files.push(entry?.path());
            }
        } else {
            files.push(path);
        }
    }
    let mut times: Vec<(Duration, PathBuf)> = Vec::with_capacity(files.len());
    let start = Instant::now();
    for file in files {
        let data = std::fs::read(&file)?;
        let t = Instant::now();
        segment_format_fuzz::run(&target, &data);
        times.push((t.elapsed(), file));
    }
    let total = start.elapsed();
    times.sort_by_key(|t| std::cmp::Reverse(t.0));
    println!("{target}: {} inputs in {total:?}", times.len());
    if !times.is_empty() {
        let at = |q: f64| times[((times.len() - 1) as f64 * (1.0 - q)) as usize].0;
        let slowest_tenth: Duration = times.iter().take(times.len().div_ceil(10)).map(|t| t.0).sum();
        println!(
            "  median {:?}, 90th percentile {:?}, 99th {:?}; the slowest tenth take {:?} of {:?} in all",
            at(0.5),
            at(0.9),
            at(0.99),
            slowest_tenth,
            times.iter().map(|t| t.0).sum::<Duration>()
        );
    }
    for (t, file) in times.iter().take(5) {
        println!("  {t:?}  {}", file.display());
    }
    Ok(())
}
