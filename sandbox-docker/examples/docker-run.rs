//! Run a command in a container of IMAGE, with the current directory as the workspace, or
//! check the engine: `cargo run -p sandbox-docker --example docker-run -- IMAGE PROGRAM
//! [ARGS...]`, or `... -- --preflight IMAGE`.

use sandbox_core::{Backend, SandboxExt, SandboxOpts};
use sandbox_docker::{DockerBackend, DockerConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--preflight") {
        let image = args.get(1).cloned().unwrap_or_default();
        let backend = DockerBackend::new(DockerConfig::new(image))?;
        match backend.sandbox().preflight().await {
            Ok(p) => println!("{p:#?}"),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(3);
            }
        }
        return Ok(());
    }
    if args.len() < 2 {
        eprintln!("usage: docker-run IMAGE PROGRAM [ARGS...] | --preflight IMAGE");
        std::process::exit(2);
    }
    let image = args.remove(0);
    let backend = DockerBackend::new(DockerConfig::new(image))?;
    let opts = SandboxOpts::new(std::env::current_dir()?, args);
    let outcome = backend.sandbox().execute(opts).await?;
    print!("{}", outcome.stdout.text());
    eprint!("{}", outcome.stderr.text());
    eprintln!("status: {:?}", outcome.status);
    std::process::exit(outcome.status.shell_code());
}
