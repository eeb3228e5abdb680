//! The environment: scrubbed to a minimal base plus what the caller names.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::CaseResult;
use crate::context::{Context, Failure, PASSED_VAR, SECRET_VAR};

/// A host secret does not arrive; named, passed-through and base variables do; nothing
/// else of the host's environment leaks.
pub async fn scrubbed(ctx: Arc<Context>) -> CaseResult {
    let secret = std::env::var(SECRET_VAR).map_err(|_| {
        Failure::Broken(format!(
            "{SECRET_VAR} is not set on the host: call sandbox_conformance::prepare_host_env() \
             before starting the runtime"
        ))
    })?;
    let passed = std::env::var(PASSED_VAR)
        .map_err(|_| Failure::Broken(format!("{PASSED_VAR} is not set on the host")))?;
    let ws = ctx.workspace("env")?;
    let set_value = "set by the caller, with spaces and = signs";
    let mut opts = ctx.opts(ws.path(), ["env"]);
    opts.env.pass.push(PASSED_VAR.into());
    opts.env
        .set
        .push(("SANDBOX_CONFORMANCE_SET".into(), set_value.into()));
    let p = ctx.probe_run(opts).await?;
    ensure!(p.succeeded(), "env failed: {}", p.describe());
    let env: BTreeMap<String, String> = p
        .field("env")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .ok_or_else(|| Failure::Broken(format!("no env in the report: {}", p.describe())))?;

    ensure!(
        !env.contains_key(SECRET_VAR) && !env.values().any(|v| v.contains(&secret)),
        "the host's secret {SECRET_VAR} reached the command"
    );
    ensure!(
        env.get(PASSED_VAR) == Some(&passed),
        "{PASSED_VAR}, named to pass through, arrived as {:?}",
        env.get(PASSED_VAR)
    );
    ensure!(
        env.get("SANDBOX_CONFORMANCE_SET").map(String::as_str) == Some(set_value),
        "a variable set by the caller arrived as {:?}",
        env.get("SANDBOX_CONFORMANCE_SET")
    );
    for base in ["PATH", "HOME", "LANG"] {
        ensure!(
            env.contains_key(base),
            "the base variable {base} is missing"
        );
    }
    let allowed = [
        "PATH",
        "HOME",
        "LANG",
        PASSED_VAR,
        "SANDBOX_CONFORMANCE_SET",
    ];
    let leaked: Vec<String> = std::env::vars()
        .filter(|(k, v)| !allowed.contains(&k.as_str()) && !v.is_empty())
        .filter(|(k, v)| env.get(k) == Some(v))
        .map(|(k, _)| k)
        .collect();
    ensure!(
        leaked.is_empty(),
        "host variables leaked into the command unasked: {leaked:?}"
    );
    Ok(())
}
