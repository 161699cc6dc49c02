//! placeholder until the writer lands
#[derive(clap::Args)]
pub struct Args {}
pub fn run(_: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("not yet")
}
