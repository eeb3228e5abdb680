//! The kernel surface: the calls core's one syscall table denies are refused on every
//! backend that confines, whichever kernel answers them (the host's, or a runtime's own).

use std::sync::Arc;

use super::CaseResult;
use crate::{Context, Forbidden};

/// A nested user namespace (by `unshare` and by `clone`'s flags), io_uring, ptrace, the
/// keyring and `clone3` (whose flags no filter can read) are refused: each is a call the
/// unconfined probe reaches here, even as an ordinary user.
pub async fn surface_refused(ctx: Arc<Context>) -> CaseResult {
    let ws = ctx.workspace("kernel-surface")?;
    let mut f = Forbidden::new(&ctx);
    for call in [
        "unshare",
        "clone-newuser",
        "io_uring_setup",
        "ptrace",
        "keyctl",
        "clone3",
    ] {
        let p = ctx.probe_in(ws.path(), ["syscall", call]).await?;
        p.report()?;
        let denied = p.field("denied") == Some(&serde_json::Value::Bool(true));
        f.check(&format!("`{call}` was reached"), !denied, || p.describe());
    }
    f.finish()
}
