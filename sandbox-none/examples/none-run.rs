//! Run a command with the unconfined backend on the `trusted` lane, in the current
//! directory: `cargo run -p sandbox-none --example none-run -- PROGRAM [ARGS...]`.

use sandbox_core::{Lane, NetworkMode, SandboxExt, SandboxOpts};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = SandboxOpts::new(std::env::current_dir()?, argv);
    opts.lane = Lane::Trusted;
    opts.network = NetworkMode::Full;
    let outcome = sandbox_none::sandbox().execute(opts).await?;
    print!("{}", outcome.stdout.text());
    eprint!("{}", outcome.stderr.text());
    eprintln!("status: {:?}", outcome.status);
    std::process::exit(outcome.status.shell_code());
}
