//! The Docker engine restarting mid-run, **simulated**: the engine here is shared with
//! other work and runs as a plain process, so it is never restarted for real. The backend
//! talks to the engine through a socket this test owns (`DOCKER_HOST`), which forwards to
//! the real one; "the restart" severs every connection through it and refuses new ones
//! for a while, then forwards again. What is checked: `wait` and `kill` return an error
//! (never a made-up status) within a generous bound instead of hanging, and the container
//! is gone afterwards, as the real engine lists it.
//!
//! (A real restart also stops the container, unless the engine keeps containers alive
//! across restarts; the simulation leaves it running, the harder case for the backend.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure by design

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use sandbox_core::{Backend, Sandbox, SandboxOpts};
use sandbox_docker::WorkspaceMode;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::AbortHandle;

/// The real engine.
const ENGINE: &str = "/var/run/docker.sock";
/// Generous: the machine is shared and slow. Not a timing assertion, a hang detector.
const BOUND: Duration = Duration::from_secs(240);

/// A forwarding socket that can "go down" and "come back".
struct Proxy {
    path: PathBuf,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Proxy {
    fn start(path: &Path) -> Self {
        let p = Proxy {
            path: path.to_path_buf(),
            tasks: Arc::default(),
        };
        p.listen();
        p
    }

    fn listen(&self) {
        let _ = std::fs::remove_file(&self.path);
        let listener = UnixListener::bind(&self.path).unwrap();
        let tasks = self.tasks.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let conn = tokio::spawn(async move {
                    if let Ok(mut outbound) = UnixStream::connect(ENGINE).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(conn.abort_handle());
            }
        });
        self.tasks.lock().unwrap().push(accept.abort_handle());
    }

    /// The engine goes away: every connection is cut, and new ones are refused (no socket).
    fn sever(&self) {
        let _ = std::fs::remove_file(&self.path);
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// The engine is back.
    fn restore(&self) {
        self.listen();
    }
}

/// Our containers of `role`, as the real engine lists them (`-H` wins over the
/// `DOCKER_HOST` that points at the proxy).
fn on_engine(role: &str) -> Vec<String> {
    docker_cli(&[
        "-H",
        &format!("unix://{ENGINE}"),
        "ps",
        "-aq",
        "--filter",
        &format!(
            "label={}={}",
            sandbox_docker::LABEL_OWNER,
            sandbox_docker::owner()
        ),
        "--filter",
        &format!("label={}={role}", sandbox_docker::LABEL_ROLE),
    ])
}

/// The proxy, with `DOCKER_HOST` pointing at it for the rest of this test binary (one
/// test at a time holds `SERIAL`).
fn proxied(dir: &Path) -> Proxy {
    let sock = dir.join("docker.sock");
    let proxy = Proxy::start(&sock);
    // Only this binary's tests read it, and they hold SERIAL.
    std::env::set_var("DOCKER_HOST", format!("unix://{}", sock.display()));
    proxy
}

/// Start a long command through the proxy; its sandbox once it prints.
async fn started(ws: &Path) -> Arc<Box<sandbox_core::DynSandbox>> {
    let b = backend(WorkspaceMode::Bind);
    let sb = Arc::new(b.sandbox());
    sb.run(SandboxOpts::new(ws, sh("echo started; sleep 600")))
        .await
        .unwrap();
    let t = Instant::now();
    while !sb.logs().await.unwrap().stdout.text().contains("started") {
        assert!(t.elapsed() < BOUND, "the command never started");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        on_engine("run").len(),
        1,
        "the run's container is not on the engine"
    );
    sb
}

async fn engine_restart_mid_run(kill: bool) {
    let _g = SERIAL.lock().await;
    image(); // built through the real socket, before the proxy takes over
    let (_d, ws) = dir();
    let (_p, pdir) = dir();
    let proxy = proxied(&pdir);
    let sb = started(&ws).await;

    proxy.sever();
    let verb = {
        let sb = sb.clone();
        tokio::spawn(async move {
            if kill {
                sb.kill().await.map(|()| None)
            } else {
                sb.wait().await.map(Some)
            }
        })
    };
    // Down for a while (longer than a few quick retries would cover; a real restart
    // takes seconds to tens of seconds), then back.
    tokio::time::sleep(Duration::from_secs(12)).await;
    proxy.restore();
    let r = tokio::time::timeout(BOUND, verb)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} hung across the engine restart",
                if kill { "kill" } else { "wait" }
            )
        })
        .unwrap();
    match r {
        Err(e) => {
            let msg = e.to_string();
            eprintln!("{}: {msg}", if kill { "kill" } else { "wait" });
            assert!(
                msg.contains("engine"),
                "the error does not name the engine: {msg}"
            );
        }
        Ok(o) => panic!("an outcome across an engine restart, where none can be known: {o:?}"),
    }
    // `wait` again: the same error, at once.
    assert!(sb.wait().await.is_err());
    // Nothing of the run is left on the real engine.
    assert_eq!(on_engine("run"), Vec::<String>::new());
    std::env::remove_var("DOCKER_HOST");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_across_an_engine_restart_is_an_error_and_leaves_nothing() {
    engine_restart_mid_run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_across_an_engine_restart_is_an_error_and_leaves_nothing() {
    engine_restart_mid_run(true).await;
}
