//! Options checked and resolved into a [`Plan`]: the single place where bad input is turned
//! into a clear error before anything runs.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use crate::admission::{check_lane, LaneRequest};
use crate::capability::Capability;
use crate::egress::{MAX_HOST_PORTS, PROXY_PORT};
use crate::options::{OutputSink, ResourceLimits, SandboxOpts, Stdin};
use crate::outcome::{EffectivePolicy, Grant};
use crate::policy::RequestRule;
use crate::secret::{ResolvedSecret, CA_BUNDLE_VARS};
use crate::{Allowlist, Lane, NetworkMode, Resolver, SandboxError};
use std::sync::Arc;

/// The `PATH` a sandboxed command gets unless the caller sets one: the system directories,
/// never the caller's own (which may point into writable or untrusted places).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Validated, canonical options: every path absolute and resolved, the environment built,
/// the lane's grants decided. Backends turn a plan into a command line or a container spec.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Plan {
    /// The argv as given (`argv[0]` unchanged, so a program sees the name it was called by).
    pub argv: Vec<OsString>,
    /// The program to execute: canonical and absolute when the backend runs host programs,
    /// otherwise `argv[0]` as given (resolved inside the container).
    pub program: PathBuf,
    /// The canonical workspace.
    pub workspace: PathBuf,
    /// The canonical working directory, inside the workspace.
    pub cwd: PathBuf,
    /// Canonical read-only carve-outs: the caller's, inside the workspace; and the
    /// sandbox's own state directory where the workspace or a writable path holds it
    /// ([`state_dir`](crate::state_dir)).
    pub readonly_carveouts: Vec<PathBuf>,
    /// Canonical extra readable paths (the toolchain homes included).
    pub read_only_paths: Vec<PathBuf>,
    /// Credential paths inside a toolchain home that must stay unreadable
    /// ([`crate::credentials`]); a backend that cannot hide them refuses the run.
    pub hidden_paths: Vec<PathBuf>,
    /// Each extra readable path named through a symlink: `(as named, made absolute,
    /// canonical)`. A backend that shows host paths at their own paths needs nothing
    /// more; one with a root of its own (a container image) binds the target at the named
    /// path too, or the name would show the image's own entry instead.
    pub read_only_links: Vec<(PathBuf, PathBuf)>,
    /// Canonical extra writable paths.
    pub writable_paths: Vec<PathBuf>,
    /// The complete environment of the command, in order.
    pub env: Vec<(OsString, OsString)>,
    /// The network mode.
    pub network: NetworkMode,
    /// The lane.
    pub lane: Lane,
    /// The wall-clock limit.
    pub timeout: Option<Duration>,
    /// Per-stream output cap.
    pub output_limit: usize,
    /// Resource limits.
    pub limits: ResourceLimits,
    /// Standard input.
    pub stdin: Stdin,
    /// Files to read into the outcome, relative to the workspace.
    pub capture_files: Vec<PathBuf>,
    /// Whether to run against a throwaway copy (`changes` is `Discard`).
    pub snapshot: bool,
    /// What happens to the command's writes (`snapshot` folded in as `Discard`).
    pub changes: crate::Changes,
    /// Output callback.
    pub output_sink: Option<OutputSink>,
    /// Record refusals in the outcome where the backend can.
    pub report_denials: bool,
    /// The lane's grants.
    pub grants: Vec<Grant>,
    /// Whether the host process is root.
    pub host_is_root: bool,
    /// With network mode `proxy`: the parsed allowlist (never empty); empty otherwise.
    pub allowlist: Allowlist,
    /// With network mode `proxy`: the resolver the caller named, if any.
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Host ports forwarded into the command's namespace (sorted, distinct).
    pub host_ports: Vec<u16>,
    /// The command's ports to publish on the host (distinct on both sides).
    pub publish: Vec<crate::Publish>,
    /// Told where they were published.
    pub on_published: Option<crate::PublishSink>,
    /// The secrets, read and checked; their placeholders are in `env`, their values only
    /// here (redacted in `Debug`), for the proxy.
    pub secrets: Vec<ResolvedSecret>,
    /// The caller's authorities for upstream servers (`--upstream-ca`), read and checked.
    pub upstream_cas: Vec<crate::UpstreamCa>,
    /// The caller's HTTP proxy the egress proxy chains to (`--upstream-proxy`), parsed
    /// (network mode `proxy` only).
    pub upstream_proxy: Option<crate::UpstreamProxy>,
    /// The request rules, parsed (network mode `proxy` only).
    pub request_rules: Vec<RequestRule>,
    /// The copy-on-write layer over the workspace, once the start pipeline has made it
    /// (never set by a caller): how it is made and its private directory. A backend that
    /// hands a root host's trees to an unprivileged id needs both: an overlay is then
    /// mounted on idmapped layers, where a copy is a tree like any other.
    pub layer: Option<(crate::LayerMechanism, PathBuf)>,
}

fn canonical_dir(field: &'static str, path: &Path) -> Result<PathBuf, SandboxError> {
    if !path.is_absolute() {
        return Err(SandboxError::invalid(
            field,
            format!("{} is relative; an absolute path is needed", path.display()),
        ));
    }
    path.canonicalize().map_err(|e| {
        SandboxError::invalid(field, format!("{} does not exist: {e}", path.display()))
    })
}

/// Resolve `p` against the workspace and check it stays inside it.
fn inside(field: &'static str, workspace: &Path, p: &Path) -> Result<PathBuf, SandboxError> {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        workspace.join(p)
    };
    let canon = joined.canonicalize().map_err(|e| {
        SandboxError::invalid(field, format!("{} does not exist: {e}", joined.display()))
    })?;
    if !canon.starts_with(workspace) {
        return Err(SandboxError::invalid(
            field,
            format!(
                "{} is outside the workspace {}",
                p.display(),
                workspace.display()
            ),
        ));
    }
    Ok(canon)
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

fn has_nul(s: &OsStr) -> bool {
    s.as_bytes().contains(&0)
}

/// Resolve `argv[0]` the way a shell would, on `path_var`, relative names against `cwd`;
/// the result is canonical so that a symlinked interpreter still works where only its
/// target is visible.
fn resolve_program(argv0: &OsStr, path_var: &OsStr, cwd: &Path) -> Result<PathBuf, SandboxError> {
    let found = which::which_in(argv0, Some(path_var), cwd).map_err(|_| {
        let shown = Path::new(argv0).display().to_string();
        let p = Path::new(argv0);
        let candidate = if p.is_absolute() {
            Some(p.to_path_buf())
        } else if shown.contains('/') {
            Some(cwd.join(p))
        } else {
            None
        };
        match candidate {
            Some(c) if c.exists() => {
                SandboxError::invalid("argv", format!("program {shown} is not executable"))
            }
            _ => SandboxError::invalid(
                "argv",
                format!(
                    "program {shown} not found on PATH {}",
                    path_var.to_string_lossy()
                ),
            ),
        }
    })?;
    found
        .canonicalize()
        .map_err(|e| SandboxError::invalid("argv", format!("program {}: {e}", found.display())))
}

impl Plan {
    /// Check `opts` for a backend named `backend` with capability `cap`; resolve every path;
    /// build the environment; ask the lane. Touches nothing but reads of the filesystem.
    pub fn new(
        opts: &SandboxOpts,
        backend: &'static str,
        cap: &Capability,
    ) -> Result<Self, SandboxError> {
        if opts.argv.is_empty() {
            return Err(SandboxError::invalid(
                "argv",
                "is empty: name a program to run",
            ));
        }
        if let Some(a) = opts.argv.iter().find(|a| has_nul(a)) {
            return Err(SandboxError::invalid(
                "argv",
                format!("argument {a:?} contains a NUL byte"),
            ));
        }
        if opts.argv[0].is_empty() {
            return Err(SandboxError::invalid("argv", "argv[0] is empty"));
        }
        let workspace = canonical_dir("workspace", &opts.workspace)?;
        if !workspace.is_dir() {
            return Err(SandboxError::invalid(
                "workspace",
                format!("{} is not a directory", workspace.display()),
            ));
        }
        let cwd = match &opts.cwd {
            Some(c) => inside("cwd", &workspace, c)?,
            None => workspace.clone(),
        };
        if !cwd.is_dir() {
            return Err(SandboxError::invalid(
                "cwd",
                format!("{} is not a directory", cwd.display()),
            ));
        }
        let mut readonly_carveouts = opts
            .readonly_carveouts
            .iter()
            .map(|p| inside("readonly_carveouts", &workspace, p))
            .collect::<Result<Vec<_>, _>>()?;
        // Grants are judged on the resolved path, by filesystem type and by what they
        // hold, so no spelling (a symlink, a bind mount) reaches a control file.
        let grant = |field, p: &PathBuf| {
            let canon = canonical_dir(field, p)?;
            crate::grants::check(field, &canon)?;
            Ok::<_, SandboxError>(canon)
        };
        let mut read_only_paths = opts
            .read_only_paths
            .iter()
            .map(|p| grant("read_only_paths", p))
            .collect::<Result<Vec<_>, _>>()?;
        let read_only_links = opts
            .read_only_paths
            .iter()
            .zip(&read_only_paths)
            .filter_map(|(given, canon)| {
                let named = std::path::absolute(given).ok()?;
                let plain = named.components().all(|c| c != Component::ParentDir);
                (plain && named != *canon).then(|| (named, canon.clone()))
            })
            .collect();
        let writable_paths = opts
            .writable_paths
            .iter()
            .map(|p| grant("writable_paths", p))
            .collect::<Result<Vec<_>, _>>()?;
        let toolchains = opts
            .toolchains
            .iter()
            .map(|p| grant("toolchains", p))
            .collect::<Result<Vec<_>, _>>()?;
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let hidden_paths = crate::credentials::hidden_in(&toolchains, home.as_deref())?;
        if !hidden_paths.is_empty() && !cap.hide_paths {
            return Err(SandboxError::NotSupported {
                backend,
                feature: format!(
                    "unreadable credentials inside a toolchain grant ({})",
                    hidden_paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                remedy: "grant a narrower toolchain directory (`~/.cargo/bin`, not `~/.cargo`), \
                         or use a backend whose capability lists hidden paths (`sandbox doctor`)"
                    .into(),
            });
        }
        // A path granted on its own inside a hidden one would show it again.
        for p in read_only_paths
            .iter()
            .chain(&writable_paths)
            .chain(std::iter::once(&workspace))
        {
            if let Some(h) = hidden_paths.iter().find(|h| p.starts_with(h)) {
                return Err(SandboxError::invalid(
                    "toolchains",
                    format!(
                        "{} is inside {}, credentials that a toolchain grant hides; grant \
                         it without `--toolchain`, or name a narrower toolchain directory",
                        p.display(),
                        h.display()
                    ),
                ));
            }
        }
        for t in toolchains {
            if !read_only_paths.contains(&t) {
                read_only_paths.push(t);
            }
        }
        // The sandbox's own state, where a grant holds it, stays read-only (a backend that
        // confines writes and cannot carve out is refused by the lane, as for any carve-out).
        if cap.confine_writes {
            for d in crate::grants::state_carveouts(&workspace, &writable_paths) {
                if !readonly_carveouts.contains(&d) {
                    readonly_carveouts.push(d);
                }
            }
        }
        for p in &opts.capture_files {
            if p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
            {
                return Err(SandboxError::invalid(
                    "capture_files",
                    format!(
                        "{} must be a relative path inside the workspace, without `..`",
                        p.display()
                    ),
                ));
            }
        }
        if opts.timeout == Some(Duration::ZERO) {
            return Err(SandboxError::invalid("timeout", "must be more than zero"));
        }
        if opts.output_limit == 0 {
            return Err(SandboxError::invalid(
                "output_limit",
                "must be more than zero bytes",
            ));
        }
        let l = &opts.limits;
        for (name, v) in [
            ("limits.memory_bytes", l.memory_bytes),
            ("limits.cpu_seconds", l.cpu_seconds),
            ("limits.max_processes", l.max_processes),
            ("limits.open_files", l.open_files),
        ] {
            if v == Some(0) {
                return Err(SandboxError::invalid(name, "must be more than zero"));
            }
        }

        if !opts.secrets.is_empty() && !cap.secrets {
            // Why, from the capability: a secret's value is kept out only where the proxy
            // is the command's one way out.
            let why = match cap.network_proxy {
                crate::Enforcement::Unsupported => {
                    "a secret's value is put in by the egress proxy, and this backend cannot \
                     run it (it has no door for the host's proxy into its sandbox)"
                        .to_string()
                }
                crate::Enforcement::OverGrant(what) => format!(
                    "its network mode `proxy` gives the command {what}, so requests could go \
                     around the proxy that puts the value in"
                ),
                crate::Enforcement::Exact => {
                    "its proxy cannot terminate TLS for a secret's hosts".to_string()
                }
            };
            return Err(SandboxError::NotSupported {
                backend,
                feature: format!("secrets (`secrets`, `--secret`): {why}"),
                remedy: "use a backend whose capability lists secrets (`sandbox doctor` shows \
                         each backend's)"
                    .into(),
            });
        }
        if !opts.allow_requests.is_empty() && !cap.secrets {
            // Rules are judged on TLS the proxy terminates, which needs the run's bundle
            // inside the sandbox: the same machinery as secrets.
            return Err(SandboxError::NotSupported {
                backend,
                feature: "request rules (`allow_requests`, `--allow-request`)".into(),
                remedy: "use a backend whose capability lists secrets (`sandbox doctor` shows \
                         each backend's); rules need the same terminated TLS"
                    .into(),
            });
        }
        let secrets = check_secrets(opts)?;
        let upstream_cas = check_upstream_cas(opts)?;
        let upstream_proxy = check_upstream_proxy(opts)?;
        let request_rules = check_request_rules(opts)?;
        let allowlist = check_allow_hosts(opts, &terminated_hosts(&secrets, &request_rules))?;
        let host_ports = check_host_ports(opts)?;
        let publish = check_publish(opts)?;
        let env = build_env(opts, &workspace, &secrets)?;
        let path_var = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| DEFAULT_PATH.into());
        let program = if cap.host_programs {
            resolve_program(&opts.argv[0], &path_var, &cwd)?
        } else {
            PathBuf::from(&opts.argv[0])
        };

        let host_is_root = host_is_root();
        let changes = match (opts.snapshot, opts.changes) {
            (true, crate::Changes::Direct) => crate::Changes::Discard,
            (_, c) => c,
        };
        let grants = check_lane(
            opts.lane,
            backend,
            cap,
            &LaneRequest {
                network: opts.network,
                carveouts: !readonly_carveouts.is_empty(),
                limits: &opts.limits,
                changes,
                host_is_root,
            },
        )?;
        if !host_ports.is_empty() && !cap.host_ports {
            return Err(SandboxError::NotSupported {
                backend,
                feature: "host ports (`host_ports`)".into(),
                remedy: "use a backend whose capability lists host ports (`sandbox doctor` \
                         shows each backend's)"
                    .into(),
            });
        }
        if !publish.is_empty() && !cap.publish {
            return Err(SandboxError::NotSupported {
                backend,
                feature: "published ports (`publish`)".into(),
                remedy: "use a backend whose capability lists published ports (`sandbox \
                         doctor` shows each backend's)"
                    .into(),
            });
        }

        Ok(Self {
            argv: opts.argv.clone(),
            program,
            workspace,
            cwd,
            readonly_carveouts,
            read_only_paths,
            hidden_paths,
            read_only_links,
            writable_paths,
            env,
            network: opts.network,
            lane: opts.lane,
            timeout: opts.timeout,
            output_limit: opts.output_limit,
            limits: opts.limits.clone(),
            stdin: opts.stdin.clone(),
            capture_files: opts.capture_files.clone(),
            snapshot: changes == crate::Changes::Discard,
            changes,
            output_sink: opts.output_sink.clone(),
            report_denials: opts.report_denials,
            grants,
            host_is_root,
            allowlist,
            resolver: opts.resolver.clone(),
            host_ports,
            publish,
            on_published: opts.on_published.clone(),
            secrets,
            upstream_cas,
            upstream_proxy,
            request_rules,
            layer: None,
        })
    }

    /// The hosts whose TLS the proxy terminates: every secret's and every rule's host
    /// (sorted, distinct). The one place this list is made: the allowlist, the run's
    /// authority and the proxy all read it.
    pub fn terminated_hosts(&self) -> Vec<String> {
        terminated_hosts(&self.secrets, &self.request_rules)
    }

    /// The environment value of `name`, if the command gets one.
    pub fn env_var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// The effective policy for this plan on `backend`, before the run adds how limits and
    /// tree kill were enforced.
    pub fn effective_policy(&self, backend: &'static str) -> EffectivePolicy {
        EffectivePolicy {
            backend,
            lane: self.lane,
            grants: self.grants.clone(),
            network: self.network,
            workspace: self.workspace.clone(),
            readonly_carveouts: self.readonly_carveouts.clone(),
            read_only_paths: self.read_only_paths.clone(),
            hidden_paths: self.hidden_paths.clone(),
            writable_paths: self.writable_paths.clone(),
            env_names: self
                .env
                .iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect(),
            limits: Vec::new(),
            tree_kill: None,
            enforced: crate::Record::new(),
            allow_hosts: self.allowlist.clone(),
            host_ports: self.host_ports.clone(),
            published: Vec::new(),
        }
    }

    /// Move the plan onto a copy of its workspace at `copy`: the workspace, cwd and
    /// carve-outs are rewritten to the same places inside the copy.
    pub fn rebase_workspace(&mut self, copy: &Path) {
        let old = self.workspace.clone();
        let map = |p: &Path| copy.join(p.strip_prefix(&old).unwrap_or(Path::new("")));
        self.cwd = map(&self.cwd);
        // A carve-out out of the workspace (the sandbox's state in a writable path) stays.
        self.readonly_carveouts = self
            .readonly_carveouts
            .iter()
            .map(|p| {
                if p.starts_with(&old) {
                    map(p)
                } else {
                    p.clone()
                }
            })
            .collect();
        for (k, v) in self.env.iter_mut() {
            if k == "HOME" && Path::new(v.as_os_str()) == old {
                *v = copy.as_os_str().to_owned();
            }
        }
        if self.program.starts_with(&old) {
            self.program = map(&self.program);
        }
        self.workspace = copy.to_path_buf();
    }
}

/// The allowlist of a `proxy` run: required, non-empty and well-formed; refused with any
/// other mode, where it would silently mean nothing.
/// The secrets of a run: only with `proxy` (the one mode where something stands between
/// the command and the network to put the value in), distinct names, each read and checked.
fn check_secrets(opts: &SandboxOpts) -> Result<Vec<ResolvedSecret>, SandboxError> {
    if opts.secrets.is_empty() {
        return Ok(Vec::new());
    }
    if opts.network != NetworkMode::Proxy {
        return Err(SandboxError::invalid(
            "secrets",
            format!(
                "a secret needs network mode `proxy` (the proxy puts its value into requests), \
                 not `{}`",
                opts.network
            ),
        ));
    }
    let mut out: Vec<ResolvedSecret> = Vec::new();
    for spec in &opts.secrets {
        if out.iter().any(|s| s.name == spec.name) {
            return Err(SandboxError::invalid(
                "secrets",
                format!("secret `{}` is named twice", spec.name),
            ));
        }
        if RUN_VARS.contains(&spec.name.as_str()) || CA_BUNDLE_VARS.contains(&spec.name.as_str()) {
            return Err(SandboxError::invalid(
                "secrets",
                format!(
                    "secret `{}`: the run sets that variable itself; name the secret after \
                     the variable your tool reads its token from",
                    spec.name
                ),
            ));
        }
        out.push(
            spec.resolve()
                .map_err(|e| SandboxError::invalid("secrets", e.to_string()))?,
        );
    }
    Ok(out)
}

/// The caller's upstream authorities: only with `proxy` (the proxy is what verifies
/// upstream servers), each file read and holding PEM certificates only.
fn check_upstream_cas(opts: &SandboxOpts) -> Result<Vec<crate::UpstreamCa>, SandboxError> {
    if opts.upstream_cas.is_empty() {
        return Ok(Vec::new());
    }
    if opts.network != NetworkMode::Proxy {
        return Err(SandboxError::invalid(
            "upstream_cas",
            "an upstream authority needs network mode `proxy` (the proxy verifies the \
             servers it reaches for the command); use `--network proxy`",
        ));
    }
    opts.upstream_cas
        .iter()
        .map(|p| {
            crate::UpstreamCa::read(p).map_err(|why| SandboxError::invalid("upstream_cas", why))
        })
        .collect()
}

/// The caller's upstream proxy: only with `proxy` (the egress proxy is what chains to it;
/// without it the option would silently mean nothing), and only `http://HOST:PORT`.
fn check_upstream_proxy(opts: &SandboxOpts) -> Result<Option<crate::UpstreamProxy>, SandboxError> {
    let Some(url) = &opts.upstream_proxy else {
        return Ok(None);
    };
    if opts.network != NetworkMode::Proxy {
        return Err(SandboxError::invalid(
            "upstream_proxy",
            format!(
                "an upstream proxy needs network mode `proxy` (the sandbox's egress proxy is \
                 what chains to it), not `{}`; name the hosts the command may reach with \
                 `--allow-host`",
                opts.network
            ),
        ));
    }
    crate::UpstreamProxy::parse(url)
        .map(Some)
        .map_err(|e| SandboxError::invalid("upstream_proxy", e.to_string()))
}

/// The hosts whose TLS is terminated for `secrets` and `rules` (sorted, distinct):
/// [`Plan::terminated_hosts`], also for a proxy made without a plan.
pub fn terminated_hosts(secrets: &[ResolvedSecret], rules: &[RequestRule]) -> Vec<String> {
    let mut hosts: Vec<String> = secrets
        .iter()
        .flat_map(|s| s.hosts.iter().cloned())
        .chain(rules.iter().map(|r| r.host.clone()))
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The request rules of a run: only with `proxy` (the one mode where something stands
/// between the command and the network to judge requests), each well-formed.
fn check_request_rules(opts: &SandboxOpts) -> Result<Vec<RequestRule>, SandboxError> {
    if opts.allow_requests.is_empty() {
        return Ok(Vec::new());
    }
    if opts.network != NetworkMode::Proxy {
        return Err(SandboxError::invalid(
            "allow_requests",
            format!(
                "a request rule needs network mode `proxy` (the proxy judges requests), not `{}`",
                opts.network
            ),
        ));
    }
    opts.allow_requests
        .iter()
        .map(|r| {
            r.parse::<RequestRule>()
                .map_err(|e| SandboxError::invalid("allow_requests", e.to_string()))
        })
        .collect()
}

/// Variables a run sets for itself, which a secret's placeholder must not replace.
const RUN_VARS: [&str; 11] = [
    "PATH",
    "HOME",
    "LANG",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

fn check_allow_hosts(opts: &SandboxOpts, terminated: &[String]) -> Result<Allowlist, SandboxError> {
    if opts.network != NetworkMode::Proxy {
        if !opts.allow_hosts.is_empty() {
            return Err(SandboxError::invalid(
                "allow_hosts",
                format!(
                    "an allowlist applies only to network mode `proxy`, not `{}`",
                    opts.network
                ),
            ));
        }
        return Ok(Allowlist::default());
    }
    if opts.allow_hosts.is_empty() && terminated.is_empty() {
        return Err(SandboxError::invalid(
            "allow_hosts",
            "network mode `proxy` needs at least one allowed host (`crates.io`, \
             `*.githubusercontent.com`); for no network at all use `none`",
        ));
    }
    // A secret's or a rule's host is allowed by naming it there: exact names, on the
    // default ports, after the caller's own patterns.
    let mut patterns = opts.allow_hosts.clone();
    for h in terminated {
        if !patterns.contains(h) {
            patterns.push(h.clone());
        }
    }
    Allowlist::parse(&patterns).map_err(|e| SandboxError::invalid("allow_hosts", e.to_string()))
}

/// Whether this process runs as root (effective uid 0): the lane table's "host root's power
/// dropped" row, asked of the kernel on every plan (never cached).
pub fn host_is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Host ports: only with `loopback` or `proxy` (with `full` the host's loopback is already
/// the command's; with `none` there is no network to put them in), distinct, not the
/// proxy's own port, at most [`MAX_HOST_PORTS`].
fn check_host_ports(opts: &SandboxOpts) -> Result<Vec<u16>, SandboxError> {
    if opts.host_ports.is_empty() {
        return Ok(Vec::new());
    }
    if !matches!(opts.network, NetworkMode::Loopback | NetworkMode::Proxy) {
        return Err(SandboxError::invalid(
            "host_ports",
            format!(
                "host ports need network mode `loopback` or `proxy`, not `{}` (with `full` \
                 the host's loopback is already reachable; with `none` there is no network)",
                opts.network
            ),
        ));
    }
    let mut ports = opts.host_ports.clone();
    ports.sort_unstable();
    if let Some(w) = ports.windows(2).find(|w| w[0] == w[1]) {
        return Err(SandboxError::invalid(
            "host_ports",
            format!("port {} is named twice", w[0]),
        ));
    }
    if ports.contains(&0) {
        return Err(SandboxError::invalid(
            "host_ports",
            "port 0 is not a port; name one from 1 to 65535",
        ));
    }
    if opts.network == NetworkMode::Proxy && ports.contains(&PROXY_PORT) {
        return Err(SandboxError::invalid(
            "host_ports",
            format!("port {PROXY_PORT} is the proxy's own inside the sandbox"),
        ));
    }
    if ports.len() > MAX_HOST_PORTS {
        return Err(SandboxError::invalid(
            "host_ports",
            format!("{} ports; at most {MAX_HOST_PORTS}", ports.len()),
        ));
    }
    Ok(ports)
}

/// Published ports: only with `loopback` or `proxy` (with `full` the command's ports are
/// the host's own already; with `none` there is no network to serve on), ports from 1 to
/// 65535, distinct on each side, not the proxy's port nor a host port's inside, at most
/// [`MAX_HOST_PORTS`].
fn check_publish(opts: &SandboxOpts) -> Result<Vec<crate::Publish>, SandboxError> {
    let list = &opts.publish;
    if list.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |reason: String| Err(SandboxError::invalid("publish", reason));
    if !matches!(opts.network, NetworkMode::Loopback | NetworkMode::Proxy) {
        return bad(format!(
            "publishing a port needs network mode `loopback` or `proxy`, not `{}` (with \
             `full` the command's ports are the host's already; with `none` there is no \
             network to serve on)",
            opts.network
        ));
    }
    if list.len() > MAX_HOST_PORTS {
        return bad(format!("{} ports; at most {MAX_HOST_PORTS}", list.len()));
    }
    for (i, p) in list.iter().enumerate() {
        if p.port == 0 || p.host_port == Some(0) {
            return bad("port 0 is not a port; name one from 1 to 65535".into());
        }
        if list[..i].iter().any(|q| q.port == p.port) {
            return bad(format!("port {} is published twice", p.port));
        }
        if p.host_port.is_some() && list[..i].iter().any(|q| q.host_port == p.host_port) {
            return bad(format!(
                "host port {} is named twice",
                p.host_port.unwrap_or_default()
            ));
        }
        if opts.network == NetworkMode::Proxy && p.port == PROXY_PORT {
            return bad(format!(
                "port {PROXY_PORT} is the proxy's own inside the sandbox"
            ));
        }
        if opts.host_ports.contains(&p.port) {
            return bad(format!(
                "port {} is a host port inside the sandbox (`host_ports`), not the command's",
                p.port
            ));
        }
    }
    Ok(list.clone())
}

/// The proxy variables of a `proxy` run, upper and lower case, pointing at the proxy inside
/// the command's namespace. `NO_PROXY` keeps the command's own loopback direct.
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let http = format!("http://127.0.0.1:{PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{PROXY_PORT}");
    let no = "localhost,127.0.0.1,::1".to_string();
    let mut v = Vec::new();
    for (k, val) in [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &no),
    ] {
        v.push((k, val.clone()));
        v.push((lower(k), val.clone()));
    }
    v
}

fn lower(k: &'static str) -> &'static str {
    match k {
        "HTTP_PROXY" => "http_proxy",
        "HTTPS_PROXY" => "https_proxy",
        "ALL_PROXY" => "all_proxy",
        _ => "no_proxy",
    }
}

/// The minimal base (`PATH`, `HOME`, `LANG`), the proxy variables with `proxy`, then the
/// named pass-throughs, then the pairs.
///
/// With secrets: each secret's name is set to its placeholder; a caller's variable of a
/// secret's name or of a certificate bundle variable ([`CA_BUNDLE_VARS`]) is refused; and
/// no variable or argument may hold a secret's value.
fn build_env(
    opts: &SandboxOpts,
    workspace: &Path,
    secrets: &[ResolvedSecret],
) -> Result<Vec<(OsString, OsString)>, SandboxError> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), workspace.as_os_str().to_owned()),
        (
            "LANG".into(),
            std::env::var_os("LANG").unwrap_or_else(|| "C.UTF-8".into()),
        ),
    ];
    if opts.network == NetworkMode::Proxy {
        for (k, v) in proxy_env() {
            env.push((k.into(), v.into()));
        }
    }
    let mut put = |k: &str, v: OsString| {
        if let Some(slot) = env.iter_mut().find(|(name, _)| name == k) {
            slot.1 = v;
        } else {
            env.push((k.into(), v));
        }
    };
    for name in &opts.env.pass {
        if !valid_env_name(name) {
            return Err(SandboxError::invalid(
                "env.pass",
                format!("`{name}` is not a valid variable name"),
            ));
        }
        if let Some(v) = std::env::var_os(name) {
            put(name, v);
        }
    }
    for (name, value) in &opts.env.set {
        if !valid_env_name(name) {
            return Err(SandboxError::invalid(
                "env.set",
                format!("`{name}` is not a valid variable name"),
            ));
        }
        if has_nul(value) {
            return Err(SandboxError::invalid(
                "env.set",
                format!("the value of `{name}` contains a NUL byte"),
            ));
        }
        put(name, value.clone());
    }
    if !opts.allow_requests.is_empty() {
        // A rule's host is terminated like a secret's: the bundle variables are the run's.
        check_secret_env(opts, secrets)?;
    }
    if !secrets.is_empty() {
        check_secret_env(opts, secrets)?;
        for s in secrets {
            env.push((s.name.clone().into(), s.placeholder.clone().into()));
        }
        for (k, v) in &env {
            if let Some(s) = secrets.iter().find(|s| holds(v.as_bytes(), &s.value)) {
                return Err(SandboxError::invalid(
                    "env",
                    format!(
                        "the variable {} holds the value of secret `{}`, which never enters \
                         the sandbox; drop it (the command gets `{}` with a placeholder)",
                        k.to_string_lossy(),
                        s.name,
                        s.name
                    ),
                ));
            }
        }
        for (i, a) in opts.argv.iter().enumerate() {
            if let Some(s) = secrets.iter().find(|s| holds(a.as_bytes(), &s.value)) {
                return Err(SandboxError::invalid(
                    "argv",
                    format!(
                        "argument {i} holds the value of secret `{}`, which never enters the \
                         sandbox; pass `${}` (its placeholder) instead",
                        s.name, s.name
                    ),
                ));
            }
        }
    }
    Ok(env)
}

/// A caller's variable that would collide with what a run with secrets sets.
fn check_secret_env(opts: &SandboxOpts, secrets: &[ResolvedSecret]) -> Result<(), SandboxError> {
    let named = opts
        .env
        .set
        .iter()
        .map(|(k, _)| ("env.set", k.as_str()))
        .chain(opts.env.pass.iter().map(|k| ("env.pass", k.as_str())));
    for (field, k) in named {
        if secrets.iter().any(|s| s.name == k) {
            return Err(SandboxError::invalid(
                field,
                format!(
                    "`{k}` is a secret's name: the command gets a placeholder there, never the \
                     value; drop the variable"
                ),
            ));
        }
        if CA_BUNDLE_VARS.contains(&k) {
            return Err(SandboxError::invalid(
                field,
                format!(
                    "`{k}` is set by a run with secrets to the run's certificate bundle, which \
                     holds the host's roots and the run's own authority; another value would \
                     make tools refuse the hosts whose secrets the proxy injects"
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `hay` carries `secret`'s value. A value shorter than 8 bytes is looked for only
/// as the whole of `hay`, so that a short value does not refuse every `PATH` holding it.
fn holds(hay: &[u8], secret: &crate::Secret) -> bool {
    let v = secret.expose();
    if v.len() < 8 {
        return hay == v;
    }
    hay.windows(v.len()).any(|w| w == v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap() -> Capability {
        Capability {
            change_layer: None,
            ..Capability::everything()
        }
    }

    fn ws() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn secret_opts(d: &tempfile::TempDir) -> SandboxOpts {
        let tok = d.path().join("tok");
        std::fs::write(&tok, "ghp_realvalue123\n").unwrap();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.network = NetworkMode::Proxy;
        opts.secrets = vec![crate::SecretSpec::parse(&format!(
            "GH_TOKEN=file:{}@API.github.com",
            tok.display()
        ))
        .unwrap()];
        opts
    }

    #[test]
    fn a_secret_gives_the_command_a_placeholder_and_allows_its_hosts() {
        let d = ws();
        let opts = secret_opts(&d);
        let plan = Plan::new(&opts, "t", &cap()).unwrap();
        let ph = plan
            .env_var("GH_TOKEN")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        assert!(ph.starts_with(crate::secret::PLACEHOLDER_PREFIX), "{ph}");
        assert_eq!(plan.secrets[0].placeholder, ph);
        assert_eq!(plan.secrets[0].value.expose(), b"ghp_realvalue123");
        assert!(plan
            .env
            .iter()
            .all(|(_, v)| !v.to_string_lossy().contains("realvalue")));
        assert!(!format!("{plan:?}").contains("realvalue"));
        let target = crate::policy::Target::parse("api.github.com").unwrap();
        assert!(plan.allowlist.check(&target, 443).is_some());
        let other = crate::policy::Target::parse("gist.github.com").unwrap();
        assert!(plan.allowlist.check(&other, 443).is_none());
    }

    #[test]
    fn a_request_rule_allows_and_terminates_its_host_beside_the_secrets_hosts() {
        let d = ws();
        let mut opts = secret_opts(&d);
        opts.allow_requests = vec![
            "GET https://uploads.example.com/v1/**".into(),
            "POST https://api.github.com/repos/*/issues".into(),
        ];
        let plan = Plan::new(&opts, "t", &cap()).unwrap();
        assert_eq!(plan.request_rules.len(), 2);
        assert_eq!(
            plan.terminated_hosts(),
            ["api.github.com", "uploads.example.com"]
        );
        let target = crate::policy::Target::parse("uploads.example.com").unwrap();
        assert!(plan.allowlist.check(&target, 443).is_some());
        // Rules alone make a proxy run with an allowlist.
        let mut o = SandboxOpts::new(d.path(), ["true"]);
        o.network = NetworkMode::Proxy;
        o.allow_requests = vec!["GET https://h.example/**".into()];
        let plan = Plan::new(&o, "t", &cap()).unwrap();
        assert_eq!(plan.terminated_hosts(), ["h.example"]);
    }

    #[test]
    fn a_request_rule_is_refused_before_anything_runs_with_the_reason() {
        let d = ws();
        let mut base = SandboxOpts::new(d.path(), ["true"]);
        base.network = NetworkMode::Proxy;
        let refused = |rule: &str, c: &Capability, mode: NetworkMode, want: &str| {
            let mut o = base.clone();
            o.network = mode;
            o.allow_requests = vec![rule.into()];
            let e = Plan::new(&o, "tbackend", c).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        };
        let good = "GET https://h.example/a";
        let proxy = NetworkMode::Proxy;
        let no = Capability {
            secrets: false,
            ..cap()
        };
        refused(good, &no, proxy, "request rules");
        refused(good, &no, proxy, "tbackend");
        refused(
            good,
            &cap(),
            NetworkMode::Full,
            "needs network mode `proxy`",
        );
        refused(
            "FETCH https://h.example/",
            &cap(),
            proxy,
            "unknown method `FETCH`",
        );
        refused(
            "GET http://h.example/",
            &cap(),
            proxy,
            "not an https:// URL",
        );
        refused(
            "GET https://*.example/",
            &cap(),
            proxy,
            "not an exact host name",
        );
        refused(
            "GET https://10.0.0.1/",
            &cap(),
            proxy,
            "not an exact host name",
        );
        refused("GET https://h.example/a//b", &cap(), proxy, "empty segment");
        refused(
            "GET https://h.example/a;b",
            &cap(),
            proxy,
            "no place in a pattern",
        );
        let mut o = base.clone();
        o.allow_requests = vec![good.into()];
        o.env.pass = vec!["SSL_CERT_FILE".into()];
        let e = Plan::new(&o, "t", &cap()).unwrap_err().to_string();
        assert!(e.contains("certificate bundle"), "{e}");
    }

    #[test]
    fn a_secret_is_refused_where_it_could_not_be_kept_out() {
        let d = ws();
        let refused = |opts: &SandboxOpts, c: &Capability, want: &str| {
            let e = Plan::new(opts, "t", c).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
            assert!(!e.contains("realvalue"), "the value leaked: {e}");
        };
        let base = secret_opts(&d);
        let no_secrets = Capability {
            secrets: false,
            ..cap()
        };
        refused(&base, &no_secrets, "cannot enforce secrets");
        // Why, from the capability: no proxy at all, or one that is not the only way out.
        let no_door = Capability {
            secrets: false,
            network_proxy: crate::Enforcement::Unsupported,
            ..cap()
        };
        refused(&base, &no_door, "it has no door for the host's proxy");
        let open = Capability {
            secrets: false,
            network_proxy: crate::Enforcement::OverGrant("the host's whole network"),
            ..cap()
        };
        refused(&base, &open, "could go around the proxy");
        for mode in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
            let mut o = base.clone();
            o.network = mode;
            refused(&o, &cap(), "needs network mode `proxy`");
        }
        let mut o = base.clone();
        o.env.set = vec![("GH_TOKEN".into(), "x".into())];
        refused(&o, &cap(), "is a secret's name");
        let mut o = base.clone();
        o.env.pass = vec!["SSL_CERT_FILE".into()];
        refused(&o, &cap(), "certificate bundle");
        let mut o = base.clone();
        o.env.set = vec![("OTHER".into(), "Bearer ghp_realvalue123".into())];
        refused(&o, &cap(), "holds the value of secret `GH_TOKEN`");
        let mut o = base.clone();
        o.argv = vec!["echo".into(), "ghp_realvalue123".into()];
        refused(&o, &cap(), "argument 1 holds the value");
        let mut o = base.clone();
        o.secrets.push(o.secrets[0].clone());
        refused(&o, &cap(), "named twice");
        let mut o = base.clone();
        o.secrets[0].name = "HTTPS_PROXY".into();
        refused(&o, &cap(), "sets that variable itself");
    }

    #[test]
    fn an_upstream_authority_is_read_and_checked_before_anything_runs() {
        let d = ws();
        let file = |name: &str, text: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let cert = "-----BEGIN CERTIFICATE-----\nAAECAw==\n-----END CERTIFICATE-----\n";
        let good = file("ca.pem", &format!("# corp\n{cert}{cert}"));
        let mut o = secret_opts(&d);
        o.upstream_cas = vec![good.clone()];
        let plan = Plan::new(&o, "t", &cap()).unwrap();
        assert_eq!(plan.upstream_cas.len(), 1);
        assert_eq!(plan.upstream_cas[0].path, good);
        assert_eq!(
            plan.upstream_cas[0].certs,
            [vec![0, 1, 2, 3], vec![0, 1, 2, 3]]
        );
        let refused = |path: PathBuf, want: &str| {
            let mut o = secret_opts(&d);
            o.upstream_cas = vec![path];
            let e = Plan::new(&o, "t", &cap()).unwrap_err().to_string();
            assert!(
                e.contains("upstream_cas") && e.contains(want),
                "{want}: {e}"
            );
        };
        refused(d.path().join("missing.pem"), "cannot read");
        refused(
            file("text.pem", "not a certificate\n"),
            "holds no PEM certificate",
        );
        refused(
            file(
                "key.pem",
                &format!(
                    "{cert}-----BEGIN PRIVATE KEY-----\nAAECAw==\n-----END PRIVATE KEY-----\n"
                ),
            ),
            "certificates only",
        );
        refused(
            file(
                "bad.pem",
                "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
            ),
            "not valid PEM",
        );
        let mut o = SandboxOpts::new(d.path(), ["true"]);
        o.upstream_cas = vec![good];
        let e = Plan::new(&o, "t", &cap()).unwrap_err().to_string();
        assert!(e.contains("needs network mode `proxy`"), "{e}");
    }

    #[test]
    fn an_upstream_proxy_is_parsed_and_checked_before_anything_runs() {
        let d = ws();
        let mut o = SandboxOpts::new(d.path(), ["true"]);
        o.network = NetworkMode::Proxy;
        o.allow_hosts = vec!["crates.io".into()];
        o.upstream_proxy = Some("http://proxy.corp.example:3128".into());
        let plan = Plan::new(&o, "t", &cap()).unwrap();
        assert_eq!(
            plan.upstream_proxy.map(|p| p.to_string()).as_deref(),
            Some("proxy.corp.example:3128")
        );
        let refused = |o: &SandboxOpts, want: &str| {
            let e = Plan::new(o, "t", &cap()).unwrap_err().to_string();
            assert!(
                e.contains("upstream_proxy") && e.contains(want),
                "{want}: {e}"
            );
            e
        };
        for (url, want) in [
            ("https://proxy:3128", "scheme `https` is not supported"),
            ("socks5h://proxy:1080", "scheme `socks5h` is not supported"),
            ("proxy:3128", "names no scheme"),
            ("http://proxy", "names no port"),
            ("http://proxy:99999", "not a port from 1 to 65535"),
            ("http://proxy:3128/x", "has a path, query or fragment"),
            ("http://no_such!host:3128", "is not a host name"),
        ] {
            let mut o = o.clone();
            o.upstream_proxy = Some(url.into());
            refused(&o, want);
        }
        let mut creds = o.clone();
        creds.upstream_proxy = Some("http://alice:hunter2@proxy:3128".into());
        let e = refused(&creds, "credentials in the URL are not supported");
        assert!(!e.contains("hunter2"), "{e}");
        for mode in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
            let mut o = SandboxOpts::new(d.path(), ["true"]);
            o.network = mode;
            o.upstream_proxy = Some("http://proxy:3128".into());
            refused(&o, "needs network mode `proxy`");
            refused(&o, "`--allow-host`");
        }
    }

    #[test]
    fn publish_needs_loopback_or_proxy_distinct_ports_and_the_capability() {
        use crate::Publish;
        let d = ws();
        let p = |port, host_port| Publish { port, host_port };
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.publish = vec![p(8080, None)];
        let refused = |opts: &SandboxOpts, c: &Capability, want: &str| {
            let e = Plan::new(opts, "t", c).unwrap_err();
            assert!(e.to_string().contains(want), "{want}: {e}");
        };
        for mode in [NetworkMode::None, NetworkMode::Full] {
            opts.network = mode;
            refused(&opts, &cap(), "needs network mode `loopback` or `proxy`");
        }
        opts.network = NetworkMode::Loopback;
        assert_eq!(
            Plan::new(&opts, "t", &cap()).unwrap().publish,
            [p(8080, None)]
        );
        for (bad, want) in [
            (vec![p(0, None)], "port 0"),
            (vec![p(80, Some(0))], "port 0"),
            (vec![p(80, None), p(80, Some(81))], "published twice"),
            (vec![p(80, Some(9)), p(81, Some(9))], "named twice"),
        ] {
            opts.publish = bad;
            refused(&opts, &cap(), want);
        }
        opts.publish = vec![p(5432, None)];
        opts.host_ports = vec![5432];
        refused(&opts, &cap(), "a host port inside");
        opts.host_ports.clear();
        opts.network = NetworkMode::Proxy;
        opts.allow_hosts = vec!["crates.io".into()];
        opts.publish = vec![p(PROXY_PORT, None)];
        refused(&opts, &cap(), "the proxy's own");
        opts.publish = vec![p(8080, Some(18080))];
        let mut c = cap();
        c.publish = false;
        let e = Plan::new(&opts, "t", &c).unwrap_err();
        assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
    }

    #[test]
    fn publish_specs_parse_as_port_or_port_and_host_port() {
        use crate::Publish;
        assert_eq!(
            "8080".parse::<Publish>(),
            Ok(Publish {
                port: 8080,
                host_port: None
            })
        );
        assert_eq!(
            "3000:13000".parse::<Publish>(),
            Ok(Publish {
                port: 3000,
                host_port: Some(13000)
            })
        );
        for bad in ["", "0", "65536", "80:", ":80", "80:0", "a:1", "1:2:3", "-1"] {
            assert!(bad.parse::<Publish>().is_err(), "{bad}");
        }
    }

    #[test]
    fn proxy_needs_a_well_formed_non_empty_allowlist_and_nothing_else_takes_one() {
        let d = ws();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.network = NetworkMode::Proxy;
        let e = Plan::new(&opts, "t", &cap()).unwrap_err();
        assert!(
            matches!(&e, SandboxError::InvalidConfig { field: "allow_hosts", reason } if reason.contains("at least one")),
            "{e}"
        );
        for bad in ["crates.io:0", "crates.io:65536", "*.com", "https://x.org"] {
            opts.allow_hosts = vec!["ok.example".into(), bad.into()];
            let e = Plan::new(&opts, "t", &cap()).unwrap_err();
            assert!(
                matches!(&e, SandboxError::InvalidConfig { field: "allow_hosts", reason } if reason.contains(bad)),
                "{bad}: {e}"
            );
        }
        opts.allow_hosts = vec!["crates.io".into(), "*.crates.io:8443".into()];
        let plan = Plan::new(&opts, "t", &cap()).unwrap();
        assert_eq!(plan.allowlist.patterns().len(), 2);
        assert_eq!(
            plan.env_var("HTTPS_PROXY").unwrap(),
            "http://127.0.0.1:3128"
        );
        assert_eq!(
            plan.env_var("all_proxy").unwrap(),
            "socks5h://127.0.0.1:3128"
        );
        assert!(plan.env_var("NO_PROXY").is_some());
        for mode in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
            opts.network = mode;
            let e = Plan::new(&opts, "t", &cap()).unwrap_err();
            assert!(
                matches!(
                    e,
                    SandboxError::InvalidConfig {
                        field: "allow_hosts",
                        ..
                    }
                ),
                "{mode}: {e}"
            );
        }
        opts.allow_hosts.clear();
        opts.network = NetworkMode::Loopback;
        let plan = Plan::new(&opts, "t", &cap()).unwrap();
        assert!(plan.env_var("HTTP_PROXY").is_none());
    }

    #[test]
    fn host_ports_need_loopback_or_proxy_distinct_and_nonzero() {
        let d = ws();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.host_ports = vec![5432];
        for mode in [NetworkMode::None, NetworkMode::Full] {
            opts.network = mode;
            let e = Plan::new(&opts, "t", &cap()).unwrap_err();
            assert!(
                matches!(&e, SandboxError::InvalidConfig { field: "host_ports", reason } if reason.contains("loopback")),
                "{mode}: {e}"
            );
        }
        opts.network = NetworkMode::Loopback;
        for bad in [vec![0], vec![5432, 5432]] {
            opts.host_ports = bad.clone();
            let e = Plan::new(&opts, "t", &cap()).unwrap_err();
            assert!(
                matches!(
                    e,
                    SandboxError::InvalidConfig {
                        field: "host_ports",
                        ..
                    }
                ),
                "{bad:?}: {e}"
            );
        }
        opts.host_ports = vec![8080, 5432];
        assert_eq!(
            Plan::new(&opts, "t", &cap()).unwrap().host_ports,
            [5432, 8080]
        );
        let mut c = cap();
        c.host_ports = false;
        let e = Plan::new(&opts, "t", &c).unwrap_err();
        assert!(matches!(e, SandboxError::NotSupported { .. }), "{e}");
        opts.network = NetworkMode::Proxy;
        opts.allow_hosts = vec!["x.org".into()];
        opts.host_ports = vec![3128];
        assert!(Plan::new(&opts, "t", &cap()).is_err());
    }

    #[test]
    fn empty_argv_is_refused() {
        let d = ws();
        let opts = SandboxOpts::new(d.path(), Vec::<String>::new());
        let e = Plan::new(&opts, "t", &cap()).unwrap_err();
        assert!(
            matches!(e, SandboxError::InvalidConfig { field: "argv", .. }),
            "{e}"
        );
    }

    #[test]
    fn missing_and_relative_workspace_are_refused() {
        let opts = SandboxOpts::new("/nonexistent/ws", ["true"]);
        let e = Plan::new(&opts, "t", &cap()).unwrap_err();
        assert!(matches!(
            e,
            SandboxError::InvalidConfig {
                field: "workspace",
                ..
            }
        ));
        let opts = SandboxOpts::new("relative/ws", ["true"]);
        let e = Plan::new(&opts, "t", &cap()).unwrap_err();
        assert!(e.to_string().contains("relative"), "{e}");
    }

    #[test]
    fn cwd_outside_the_workspace_is_refused_even_through_dotdot() {
        let d = ws();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.cwd = Some("..".into());
        let e = Plan::new(&opts, "t", &cap()).unwrap_err();
        assert!(
            matches!(e, SandboxError::InvalidConfig { field: "cwd", .. }),
            "{e}"
        );
    }

    #[test]
    fn a_read_path_named_through_a_link_keeps_its_name() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().canonicalize().unwrap().join("link");
        std::os::unix::fs::symlink("real", &link).unwrap();
        let mut opts = SandboxOpts::new(d.path(), ["/bin/true"]);
        opts.read_only_paths = vec![link.clone(), real.clone()];
        let p = Plan::new(&opts, "t", &cap()).unwrap();
        assert_eq!(p.read_only_paths, [real.clone(), real.clone()]);
        assert_eq!(p.read_only_links, [(link, real)]);
    }

    #[test]
    fn program_is_resolved_to_a_canonical_absolute_path() {
        let d = ws();
        let opts = SandboxOpts::new(d.path(), ["true"]);
        let p = Plan::new(&opts, "t", &cap()).unwrap();
        assert!(p.program.is_absolute());
        assert_eq!(p.program, p.program.canonicalize().unwrap());
        assert_eq!(p.argv[0], "true");
    }

    #[test]
    fn unknown_program_is_not_found() {
        let d = ws();
        let opts = SandboxOpts::new(d.path(), ["definitely-not-a-program-xyz"]);
        let e = Plan::new(&opts, "t", &cap()).unwrap_err();
        assert!(e.is_not_found(), "{e}");
    }

    #[test]
    fn environment_is_the_base_plus_what_is_named() {
        let d = ws();
        std::env::set_var("SANDBOX_PLAN_TEST_SECRET", "s3cret");
        std::env::set_var("SANDBOX_PLAN_TEST_PASSED", "ok");
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.env.pass.push("SANDBOX_PLAN_TEST_PASSED".into());
        opts.env.set.push(("FOO".into(), "bar baz".into()));
        let p = Plan::new(&opts, "t", &cap()).unwrap();
        let names: Vec<_> = p.env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            names,
            ["PATH", "HOME", "LANG", "SANDBOX_PLAN_TEST_PASSED", "FOO"]
        );
        assert!(p.env_var("SANDBOX_PLAN_TEST_SECRET").is_none());
    }

    #[test]
    fn bad_env_names_are_refused() {
        let d = ws();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.env.set.push(("A=B".into(), "x".into()));
        assert!(Plan::new(&opts, "t", &cap()).is_err());
    }

    #[test]
    fn carveouts_must_be_inside_and_exist() {
        let d = ws();
        std::fs::create_dir(d.path().join(".git")).unwrap();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.readonly_carveouts.push(".git".into());
        let p = Plan::new(&opts, "t", &cap()).unwrap();
        assert_eq!(
            p.readonly_carveouts,
            [d.path().canonicalize().unwrap().join(".git")]
        );
        opts.readonly_carveouts = vec!["/etc".into()];
        assert!(Plan::new(&opts, "t", &cap()).is_err());
        opts.readonly_carveouts = vec!["missing".into()];
        assert!(Plan::new(&opts, "t", &cap()).is_err());
    }

    #[test]
    fn capture_files_cannot_escape() {
        let d = ws();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.capture_files.push("../x".into());
        assert!(Plan::new(&opts, "t", &cap()).is_err());
        opts.capture_files = vec!["/etc/passwd".into()];
        assert!(Plan::new(&opts, "t", &cap()).is_err());
    }

    #[test]
    fn zero_limits_and_timeout_are_refused() {
        let d = ws();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.timeout = Some(Duration::ZERO);
        assert!(Plan::new(&opts, "t", &cap()).is_err());
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.limits.max_processes = Some(0);
        assert!(Plan::new(&opts, "t", &cap()).is_err());
    }

    #[test]
    fn rebase_moves_every_workspace_path() {
        let d = ws();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let mut opts = SandboxOpts::new(d.path(), ["true"]);
        opts.cwd = Some("sub".into());
        let mut p = Plan::new(&opts, "t", &cap()).unwrap();
        // The sandbox's state in a writable path elsewhere stays where it is.
        let state = PathBuf::from("/elsewhere/.cache/sandbox");
        p.readonly_carveouts = vec![d.path().canonicalize().unwrap().join("sub"), state.clone()];
        p.rebase_workspace(Path::new("/copy"));
        assert_eq!(p.workspace, Path::new("/copy"));
        assert_eq!(p.cwd, Path::new("/copy/sub"));
        assert_eq!(
            p.readonly_carveouts,
            vec![PathBuf::from("/copy/sub"), state]
        );
        assert_eq!(p.env_var("HOME"), Some(OsStr::new("/copy")));
    }
}
