//! The door stage of a run's start: the one way into the command's network that a plan can
//! ask for (the egress proxy of network mode `proxy`, host ports, published ports), made by
//! the host's side (`sandbox-proxy`) and handed to the backend in the form its sandbox takes.
//!
//! No backend crate names the proxy: each backend's start gets its door from here, in one
//! of the ways that exist, and every way serves the same proxy with the same record.
//!
//! - **Handed over** ([`hand_over`]): the sandbox makes its listeners in the command's own
//!   network namespace, between fork and exec or in its init, and sends them to the host on
//!   a socket pair. For a backend whose process makes the namespace (bwrap, landlock): the
//!   pipeline calls it before the backend's `prepare`, which gets the sandbox's end.
//! - **In a namespace the host enters** ([`InNamespace`]): the host makes the listeners
//!   itself in a running container's network namespace, before its command starts
//!   (docker).
//!
//! - **Mediated** ([`mediate`]): no namespace at all (a default container or pod). The
//!   proxy listens on the host's loopback and serves only the connections the run's
//!   supervisor announces; the supervisor makes each of them itself when the command calls
//!   `connect` to the proxy's address, and puts it in the command's place
//!   ([`crate::process::Mediation`]). For a backend whose capability says
//!   [`DoorPlace::Mediated`](sandbox_core::DoorPlace): network `proxy` alone.
//!
//! A run with secrets gets its secrets ready first ([`prepare_secrets`]): the run's
//! authority, made once, and the bundle the command trusts it through, written to a
//! run-private directory and named in the plan as a read-only path, so every backend
//! places it the way it places any read-only path (bwrap binds it, landlock grants it,
//! docker binds or copies it) before anything runs, and the plan's bundle variables name
//! it. Both ways of the door then serve the proxy with that same authority.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_core::record::{Door, Proxy};
use sandbox_core::secret::CA_BUNDLE_VARS;
use sandbox_core::{EffectivePolicy, NetworkMode, Plan, Published, SandboxError, PROXY_PORT};
pub use sandbox_proxy::publish::PublishRun;
pub use sandbox_proxy::{ProxyRun, Secrets};

use crate::process::DoorEnd;

/// The door for `plan` handed over by the sandbox: the host's side running (the proxy, the
/// published ports), and the sandbox's end. `None` when the plan asks for no door.
/// `secrets`: the run's, from [`prepare_secrets`].
pub fn hand_over(
    plan: &Plan,
    secrets: Option<Arc<Secrets>>,
) -> Result<Option<(ProxyRun, DoorEnd)>, SandboxError> {
    Ok(sandbox_proxy::start_for_plan(plan, secrets)?.map(|h| {
        (
            h.run,
            DoorEnd {
                sock: h.child_end,
                ports: h.ports,
            },
        )
    }))
}

/// The door for `plan` mediated by the run's supervisor: the proxy served on the host's
/// loopback, and where the supervisor sends the command's connections to it. `None` when
/// the plan asks for no door.
pub fn mediate(
    plan: &Plan,
    secrets: Option<Arc<Secrets>>,
) -> Result<Option<(ProxyRun, Arc<crate::process::Mediation>)>, SandboxError> {
    if plan.network != NetworkMode::Proxy && plan.host_ports.is_empty() && plan.publish.is_empty() {
        return Ok(None);
    }
    let served = sandbox_proxy::serve_mediated(plan, secrets)?;
    let routes = served
        .routes
        .iter()
        .map(|&(port, real)| {
            let dialled = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
            (dialled, real)
        })
        .collect();
    let mediation = crate::process::Mediation::new(routes, Arc::new(Announced(served.expected)));
    Ok(Some((served.run, Arc::new(mediation))))
}

/// The proxy's list of announced connections, as the supervisor announces them.
#[derive(Debug)]
struct Announced(sandbox_proxy::Expected);

impl crate::process::Admissions for Announced {
    fn expect(&self, from: std::net::SocketAddr) {
        self.0.expect(from);
    }
    fn forget(&self, from: std::net::SocketAddr) {
        self.0.forget(from);
    }
}

/// The record of a mediated door: the proxy at the address the command dials, what it
/// allows, and the host ports.
pub fn mediated_record(plan: &Plan) -> Door {
    Door::Mediated {
        proxy: proxy_record(plan),
        host_ports: plan.host_ports.clone(),
    }
}

fn proxy_record(plan: &Plan) -> Proxy {
    Proxy {
        port: PROXY_PORT,
        allow: plan
            .allowlist
            .patterns()
            .iter()
            .map(|p| p.as_str().to_string())
            .collect(),
        upstream: plan.upstream_proxy.as_ref().map(|u| u.to_string()),
    }
}

/// The record of a run with a door: the proxy and what it allows, the host ports, the
/// published ports.
pub fn record(plan: &Plan) -> Door {
    Door::WaysOut {
        proxy: (plan.network == NetworkMode::Proxy).then(|| proxy_record(plan)),
        host_ports: plan.host_ports.clone(),
        published: plan.publish.iter().map(|p| p.port).collect(),
    }
}

/// The door for `plan` made by the host inside a namespace it enters (a container's): the
/// published ports' host listeners are bound first, before anything runs, so a port in use
/// refuses the run; the rest is made once the namespace exists.
#[derive(Debug)]
pub struct InNamespace {
    bound: Vec<(TcpListener, Published)>,
    ports: Vec<u16>,
    secrets: Option<Arc<Secrets>>,
}

impl InNamespace {
    /// What `plan` asks for, with the published ports' host side bound now. `secrets`: the
    /// run's, from [`prepare_secrets`] (made before the container, which holds the bundle).
    pub fn bind(plan: &Plan, secrets: Option<Arc<Secrets>>) -> Result<Self, SandboxError> {
        Ok(Self {
            bound: sandbox_proxy::publish::bind_for_plan(plan)?,
            ports: sandbox_proxy::inside_ports(plan),
            secrets,
        })
    }

    /// Whether listeners must be made inside (the proxy, host ports): the command must
    /// then wait until they are.
    pub fn needs_listeners(&self) -> bool {
        !self.ports.is_empty()
    }

    /// Make the listeners inside `netns` (on a blocking thread: entering a namespace
    /// moves the calling thread) and serve them for `plan`; `None` when there are none.
    pub async fn serve(
        &self,
        plan: &Plan,
        netns: OwnedFd,
    ) -> Result<Option<ProxyRun>, SandboxError> {
        if self.ports.is_empty() {
            return Ok(None);
        }
        let ports = self.ports.clone();
        let listeners =
            tokio::task::spawn_blocking(move || sandbox_proxy::listen_in_namespace(netns, &ports))
                .await
                .map_err(|e| SandboxError::io("making the proxy's listeners", e.into()))?
                .map_err(|e| {
                    SandboxError::io("making the proxy's listeners in the sandbox's namespace", e)
                })?;
        sandbox_proxy::serve_for_plan(plan, self.secrets.clone(), listeners).map(Some)
    }

    /// Whether any port is published.
    pub fn publishes(&self) -> bool {
        !self.bound.is_empty()
    }

    /// Serve the published ports with sockets made in `netns`; tell the plan's sink and the
    /// policy where they are. `None` when nothing is published.
    pub fn publish(
        self,
        plan: &Plan,
        netns: OwnedFd,
        policy: &mut EffectivePolicy,
    ) -> Result<Option<PublishRun>, SandboxError> {
        if self.bound.is_empty() {
            return Ok(None);
        }
        let maker = Arc::new(sandbox_proxy::publish::NetnsSockets(netns));
        let run = sandbox_proxy::publish::serve(self.bound, sandbox_proxy::publish::ready(maker))
            .map_err(|e| SandboxError::io("serving the published ports", e))?;
        if let Some(r) = &run {
            policy.published = r.published().to_vec();
            policy.enforced.push(Door::Published {
                ports: r.published().to_vec(),
            });
            if let Some(sink) = &plan.on_published {
                (sink.0)(r.published());
            }
        }
        Ok(run)
    }
}

/// Where the host keeps its roots (Debian's and its derivatives' bundle). Absent, the run's
/// bundle holds the caller's authorities and the run's alone.
const HOST_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The largest host bundle read.
const MAX_HOST_ROOTS: u64 = 16 << 20;

/// The bundle's name in its run-private directory.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

/// A run's secrets, ready before the backend places anything: the authority made once for
/// the run, and the bundle in a run-private directory that is removed when this is dropped
/// (the pipeline keeps it until the run is over; docker's run likewise).
#[derive(Debug)]
pub struct SecretsReady {
    secrets: Arc<Secrets>,
    dir: tempfile::TempDir,
    bundle: PathBuf,
}

impl SecretsReady {
    /// The secrets and their authority, for the door.
    pub fn secrets(&self) -> Arc<Secrets> {
        self.secrets.clone()
    }

    /// The bundle as the command sees it (the same path on the host and inside).
    pub fn bundle(&self) -> &Path {
        &self.bundle
    }

    /// The record: the secrets' names, their hosts, the bundle.
    pub fn record(&self) -> Door {
        Door::Secrets {
            names: self.secrets.list.iter().map(|s| s.name.clone()).collect(),
            hosts: self.secrets.hosts().to_vec(),
            bundle: self.bundle.clone(),
        }
    }

    /// What must live until the run is over: the directory (removed when dropped).
    pub fn into_keep_alive(self) -> tempfile::TempDir {
        self.dir
    }
}

/// Make `plan`'s secrets ready: the run's authority (once, here), the bundle written to a
/// run-private directory (`sandbox-bundle@OWNER-...` in the temp dir, swept with its owner
/// when a host crashes), named in the plan as a read-only path and in every bundle
/// variable of the command's environment. `None` for a run without secrets. Nothing of
/// the authority's key is written; the directory holds the bundle alone.
pub fn prepare_secrets(plan: &mut Plan) -> Result<Option<SecretsReady>, SandboxError> {
    let Some(secrets) = Secrets::for_plan(plan)? else {
        return Ok(None);
    };
    let roots = host_roots()?;
    let extra: Vec<_> = plan
        .upstream_cas
        .iter()
        .flat_map(|c| c.certs.iter())
        .map(|d| rustls_pki_types_der(d))
        .collect();
    let pem = sandbox_proxy::tls::bundle_pem(&roots, &extra, &secrets.authority);
    let dir = crate::owner::public_temp_dir("bundle")?;
    let io = |e| SandboxError::io("writing the run's certificate bundle", e);
    // Readable by the command whatever uid it runs as: the directory holds nothing but
    // certificates, which are public.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).map_err(io)?;
    let bundle = dir.path().join(BUNDLE_FILE);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&bundle)
        .map_err(io)?;
    f.write_all(pem.as_bytes()).map_err(io)?;
    // Whatever the umask made of the mode: the command may run as another uid.
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(io)?;
    for var in CA_BUNDLE_VARS {
        // Plan::new refused a caller's value for these; the run's own replaces nothing.
        plan.env.retain(|(k, _)| k != var);
        plan.env.push((var.into(), bundle.clone().into_os_string()));
    }
    plan.read_only_paths.push(bundle.clone());
    Ok(Some(SecretsReady {
        secrets,
        dir,
        bundle,
    }))
}

fn rustls_pki_types_der(der: &[u8]) -> sandbox_proxy::tls::CertificateDer<'static> {
    sandbox_proxy::tls::CertificateDer::from(der.to_vec())
}

/// The host's roots, or nothing where the host keeps none at [`HOST_ROOTS`].
fn host_roots() -> Result<Vec<u8>, SandboxError> {
    let mut bytes = Vec::new();
    match std::fs::File::open(HOST_ROOTS) {
        Ok(f) => {
            f.take(MAX_HOST_ROOTS)
                .read_to_end(&mut bytes)
                .map_err(|e| SandboxError::io("reading the host's roots", e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(SandboxError::io("reading the host's roots", e)),
    }
    Ok(bytes)
}
