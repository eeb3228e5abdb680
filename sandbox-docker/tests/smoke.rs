mod common;
use common::*;
use sandbox_core::{Backend, SandboxExt, SandboxOpts, Status};
use sandbox_docker::WorkspaceMode;

#[tokio::test]
async fn smoke() {
    let _g = SERIAL.lock().await;
    let (_d, ws) = dir();
    let b = backend(WorkspaceMode::Bind);
    let opts = SandboxOpts::new(
        &ws,
        sh("echo out; echo err >&2; busybox id; pwd; echo hi > f; exit 3"),
    );
    let o = b.sandbox().execute(opts).await.unwrap();
    eprintln!(
        "{:?}\n{}\n{}\n{:#?}",
        o.status,
        o.stdout.text(),
        o.stderr.text(),
        o.policy
    );
    assert_eq!(o.status, Status::Exited { code: 3 });
    eprintln!("{:?}", std::fs::read_to_string(ws.join("f")));
    assert_clean();
}
