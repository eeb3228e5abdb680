//! Run a command with the landlock backend on the `fast` lane, in the current directory:
//! `cargo run -p sandbox-landlock --example landlock-run -- PROGRAM [ARGS...]`.
//! `SANDBOX_NETWORK=loopback|full` picks the network, `SANDBOX_LANE=strict|fast|trusted`
//! the lane; the effective policy is printed.

use sandbox_core::{Lane, SandboxExt, SandboxOpts};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = SandboxOpts::new(std::env::current_dir()?, argv);
    opts.lane = Lane::Fast;
    if let Ok(l) = std::env::var("SANDBOX_LANE") {
        opts.lane = l.parse()?;
    }
    if let Ok(n) = std::env::var("SANDBOX_NETWORK") {
        opts.network = n.parse()?;
    }
    let outcome = sandbox_landlock::sandbox().execute(opts).await?;
    print!("{}", outcome.stdout.text());
    eprint!("{}", outcome.stderr.text());
    for n in outcome.policy.enforced.iter() {
        eprintln!("note: {n}");
    }
    eprintln!("status: {:?} in {:?}", outcome.status, outcome.wall_time);
    std::process::exit(outcome.status.shell_code());
}
