//! The warm pool: the next container, created and started ahead of time with the policy
//! of the last run, idle behind a tiny waiter until a command comes.
//!
//! # Why a waiter on standard input
//!
//! A container's argv is fixed when it is created, and creating and starting it is most of
//! what a run costs. A pooled container is created with our waiter as its program (under
//! the engine's init, exactly like a fresh one) and its standard input attached; a run
//! that takes it writes the argv there, length-prefixed, then the command's own input
//! (see `waiter/main.rs`). The waiter reads exactly the argv and `execvp`s it, so the
//! command *is* the init's child, with the waiter's pid, stdio and limits: the tree kill
//! (the init dies, the pid namespace with it), signals and exit statuses are those of a
//! fresh container. The engine's exec API was the alternative and is not used: an exec'd
//! process is not the init's child, the container does not stop when it ends (its
//! descendants would live on until a separate kill), its output stream stays open as long
//! as any descendant holds it, and the engine has no way to wait for it but polling.
//!
//! The argv reaches the waiter only over our attach connection to the engine; nothing in
//! the container can write to its standard input. Standard input is therefore always a
//! pipe in a pooled container: a command run with [`Stdin::Null`](sandbox_core::Stdin)
//! reads end-of-file from it at once, as it would from `/dev/null`. The waiter itself
//! stays visible at `/.sandbox-waiter`, read-only: a copy of a program the command could
//! bring along anyway.
//!
//! # Exactly the same policy, or no pool
//!
//! A pooled container is keyed by its whole create-container body (the run's body with the
//! waiter as its program, the waiter's read-only mount, and the image named by its id),
//! serialised: a run takes one only when its own body is identical, field for field. A
//! body is made by the same pure [`spec`](crate::spec) function as every run's; nothing
//! here decides policy. Runs that need a copy, idmapped staging or a layer (which are
//! per run) never use the pool: a pooled container's binds were fixed before they existed.
//!
//! # Lifetime
//!
//! A pool belongs to one [`DockerBackend`](crate::DockerBackend) value (and its clones);
//! when the last one is dropped its containers are removed before the drop returns, and
//! the ones still idle at process exit are removed by an `atexit` handler. If the process
//! dies without either, the waiters read end-of-file when the engine drops our attach
//! connection and end, and [`cleanup_leftovers`](crate::cleanup_leftovers) removes the
//! stopped containers by their owner label like any other. A pooled container is used
//! once: each command still gets a fresh container, removed after it.
//!
//! A policy gets a pooled container only once it has come back: its second run (fresh)
//! starts the pool, the third is served from it. A backend value used for one command
//! never pays for a container it would remove unused.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

use bollard::models::{ContainerCreateBody, Mount, MountTypeEnum};
use bollard::query_parameters::{AttachContainerOptionsBuilder, CreateContainerOptionsBuilder};
use bollard::Docker;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::client::Connection;
use crate::create::check_warnings;
use crate::error::DockerError;
use crate::{labels, resources};

/// What the runs of one backend value share.
#[derive(Debug)]
pub(crate) struct Engine {
    pub connection: Connection,
    /// The warm pool, or why there is none on this host.
    pub pool: Result<Pool, String>,
}

/// The waiter, built by `build.rs`; empty where it could not be built (no pool then).
static WAITER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sandbox-waiter"));

/// Where the waiter is mounted in a pooled container.
const WAITER_PATH: &str = "/.sandbox-waiter";

/// How many different policies keep a container ready at once.
const KEYS: usize = 4;

/// Pooled containers not yet taken by a run, by id, with their pool: what a pool's drop
/// and the `atexit` handler remove.
static IDLE: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
static NEXT_POOL: AtomicU64 = AtomicU64::new(1);
static AT_EXIT: Once = Once::new();

/// A started container running the waiter, attached.
pub(crate) struct Warm {
    pub id: String,
    /// Standard input only: the output is attached by the run that takes the container,
    /// on its own runtime (output crossing from the pool's runtime to the run's would
    /// cost a thread hand-off per chunk).
    pub input: Pin<Box<dyn AsyncWrite + Send>>,
    /// The engine's create warnings that are only recorded.
    pub notes: sandbox_core::Record,
    /// The streams are driven by the pool's runtime: it lives as long as they do.
    /// Set when a run takes it (never inside the pool runtime's own tasks, so that it is
    /// never dropped from its own threads).
    _rt: Option<Arc<PoolRuntime>>,
}

impl Warm {
    /// The runtime that drives this container's input: hold it until the run's output ends
    /// (the input is moot after that).
    pub(crate) fn keep_runtime(&mut self) -> Option<Arc<PoolRuntime>> {
        self._rt.take()
    }

    /// Hand the container `argv`: after this the command runs. The run owns the container
    /// from here on.
    pub(crate) async fn deliver(&mut self, argv: &[Vec<u8>]) -> std::io::Result<()> {
        idle_forget(&self.id);
        self.input.write_all(&frame(argv)).await?;
        self.input.flush().await
    }
}

/// The waiter's input for `argv` (see `waiter/main.rs`).
pub(crate) fn frame(argv: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"SBXW".to_vec();
    out.extend_from_slice(&(argv.len() as u32).to_le_bytes());
    for a in argv {
        out.extend_from_slice(&(a.len() as u32).to_le_bytes());
        out.extend_from_slice(a);
    }
    out
}

type Ready = oneshot::Receiver<Option<Warm>>;

/// The pool's own runtime, on a thread of its own: pooled containers are made and their
/// attach streams driven there, whatever runtime (or none) the caller's tasks run on, so
/// a pooled container can serve a run from any runtime, and the pool's drop can wait for
/// what is in flight without blocking the runtime it is dropped on.
#[derive(Debug)]
pub(crate) struct PoolRuntime(Option<tokio::runtime::Runtime>);

impl PoolRuntime {
    fn handle(&self) -> Option<&tokio::runtime::Handle> {
        self.0.as_ref().map(|r| r.handle())
    }
}

impl Drop for PoolRuntime {
    fn drop(&mut self) {
        // Dropped from async code too, where a blocking shutdown would panic.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The warm pool of one backend value.
pub(crate) struct Pool {
    id: u64,
    /// The waiter on the host, bind-mounted into every pooled container.
    waiter: PathBuf,
    _dir: tempfile::TempDir,
    /// One container ready (or on its way) per policy key, oldest first.
    ready: Mutex<Vec<(String, Ready)>>,
    closed: Arc<AtomicBool>,
    /// Made on the first refill.
    rt: std::sync::OnceLock<Arc<PoolRuntime>>,
    /// The pool runtime's own engine connection.
    docker: Arc<tokio::sync::OnceCell<Docker>>,
    /// Keys seen once: a pool is kept only for a policy that comes back, so a backend
    /// value used for one command (the command-line tool) never makes a container it
    /// would then have to remove.
    seen: Mutex<HashSet<String>>,
    /// Fills in flight, awaited by the drop.
    fills: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// `argv[0]`s found in the image under a key, outside every mount: the image is
    /// immutable and named by id in the key, so they stay found.
    programs: Mutex<HashSet<(String, Vec<u8>)>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("id", &self.id).finish()
    }
}

impl Pool {
    /// A pool, or why there is none here: no waiter for this target, or a temp directory
    /// that cannot hold executables.
    pub(crate) fn new() -> Result<Self, String> {
        if WAITER.is_empty() {
            return Err("no static waiter was built for this target".into());
        }
        let dir = sandbox_host::owner::temp_dir("docker-pool").map_err(|e| e.to_string())?;
        let noexec = nix::sys::statvfs::statvfs(dir.path())
            .map(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC))
            .unwrap_or(true);
        if noexec {
            return Err(format!("{} cannot hold executables", dir.path().display()));
        }
        let waiter = dir.path().join("waiter");
        std::fs::write(&waiter, WAITER)
            .and_then(|()| {
                std::fs::set_permissions(&waiter, std::fs::Permissions::from_mode(0o555))
            })
            .map_err(|e| format!("writing the waiter: {e}"))?;
        AT_EXIT.call_once(|| {
            if let Err(e) = sandbox_host::sys::at_exit(remove_idle_at_exit) {
                // The pool still removes its containers when dropped; only a host that
                // never drops it leaves them, for the next run's sweep.
                tracing::warn!("sandbox-docker: no removal of idle containers at exit: {e}");
            }
        });
        Ok(Self {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            waiter,
            _dir: dir,
            ready: Mutex::new(Vec::new()),
            closed: Arc::new(AtomicBool::new(false)),
            rt: std::sync::OnceLock::new(),
            docker: Arc::new(tokio::sync::OnceCell::new()),
            fills: Mutex::new(Vec::new()),
            seen: Mutex::new(HashSet::new()),
            programs: Mutex::new(HashSet::new()),
        })
    }

    /// `body` with the waiter as its program, mounted read-only, and its standard input
    /// attached: a container that waits for its argv. Pooled containers are made so, and
    /// so is a fresh one whose command must wait for something made after the start (the
    /// egress proxy's listeners, see `egress.rs`).
    pub(crate) fn waiting(&self, body: &ContainerCreateBody) -> ContainerCreateBody {
        let mut b = body.clone();
        b.entrypoint = Some(vec![WAITER_PATH.to_string()]);
        b.cmd = None;
        b.attach_stdin = Some(true);
        b.open_stdin = Some(true);
        b.stdin_once = Some(true);
        let host = b.host_config.get_or_insert_with(Default::default);
        host.mounts.get_or_insert_with(Vec::new).push(Mount {
            target: Some(WAITER_PATH.into()),
            source: Some(self.waiter.to_string_lossy().into_owned()),
            typ: Some(MountTypeEnum::BIND),
            read_only: Some(true),
            ..Default::default()
        });
        b
    }

    /// The body of a pooled container for a run whose own body is `body`, on the image
    /// with id `image_id`; its serialisation is the pool key.
    pub(crate) fn body(
        &self,
        body: &ContainerCreateBody,
        image_id: &str,
    ) -> Result<(ContainerCreateBody, String), DockerError> {
        let mut b = self.waiting(body);
        b.image = Some(image_id.to_string());
        b.labels = Some(labels::labels("pool"));
        // Through a `Value`, whose maps are sorted: the body's maps are `HashMap`s, whose
        // order differs between two equal ones.
        let key = serde_json::to_value(&b)
            .map_err(|e| DockerError::io("keying the pool", std::io::Error::other(e)))?
            .to_string();
        Ok((b, key))
    }

    /// The container ready for `key`, if there is one (waiting for one on its way), usable
    /// from this task.
    pub(crate) async fn take(&self, key: &str) -> Option<Warm> {
        let rx = {
            let mut ready = self.ready.lock().ok()?;
            let i = ready.iter().position(|(k, _)| k == key)?;
            ready.remove(i).1
        };
        let mut warm = rx.await.ok().flatten()?;
        warm._rt = self.rt.get().cloned();
        Some(warm)
    }

    fn runtime(&self) -> Option<Arc<PoolRuntime>> {
        if let Some(rt) = self.rt.get() {
            return Some(rt.clone());
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sandbox-docker-pool")
            .enable_all()
            .build()
            .map_err(|e| tracing::debug!("sandbox-docker: pool runtime: {e}"))
            .ok()?;
        Some(
            self.rt
                .get_or_init(|| Arc::new(PoolRuntime(Some(rt))))
                .clone(),
        )
    }

    /// Start making the next container for `key` in the background.
    pub(crate) fn refill(&self, key: String, body: ContainerCreateBody) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        let Some(rt) = self.runtime() else {
            return;
        };
        let Some(handle) = rt.handle().cloned() else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        let evicted = {
            let Ok(mut ready) = self.ready.lock() else {
                return;
            };
            if ready.iter().any(|(k, _)| *k == key) {
                return;
            }
            ready.push((key, rx));
            (ready.len() > KEYS).then(|| ready.remove(0).1)
        };
        let (pool, closed, cell) = (self.id, self.closed.clone(), self.docker.clone());
        let fill = handle.spawn(async move {
            if let Some(mut old) = evicted {
                // A fill still in flight finds no receiver and removes its container.
                old.close();
                if let (Ok(Some(w)), Some(docker)) = (old.try_recv(), cell.get()) {
                    discard(docker, w.id).await;
                }
            }
            let Ok(docker) = cell.get_or_try_init(crate::client::connect_inner).await else {
                return;
            };
            let made = warm(docker, body, pool, &closed).await;
            if let Err(Some(w)) = tx.send(made) {
                // Nobody wants it any more (the pool is closing, or evicted it).
                discard(docker, w.id).await;
            }
        });
        if let Ok(mut fills) = self.fills.lock() {
            fills.retain(|f| !f.is_finished());
            fills.push(fill);
        }
    }

    /// Whether `key` was seen before (and remember it): the second fresh run of a policy
    /// starts its pool.
    pub(crate) fn seen_before(&self, key: &str) -> bool {
        let Ok(mut seen) = self.seen.lock() else {
            return false;
        };
        if seen.contains(key) {
            return true;
        }
        if seen.len() >= 64 {
            seen.clear();
        }
        seen.insert(key.to_string());
        false
    }

    /// Whether `argv0` under `key` is known to be found in the image.
    pub(crate) fn program_known(&self, key: &str, argv0: &[u8]) -> bool {
        self.programs
            .lock()
            .is_ok_and(|p| p.contains(&(key.to_string(), argv0.to_vec())))
    }

    /// Remember that `argv0` under `key` was found in the image, outside every mount.
    pub(crate) fn program_found(&self, key: &str, argv0: &[u8]) {
        if let Ok(mut p) = self.programs.lock() {
            p.insert((key.to_string(), argv0.to_vec()));
        }
    }
}

impl Drop for Pool {
    /// The pool goes with its backend value: fills in flight are finished and every
    /// container it holds is removed before the drop returns.
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Ok(mut ready) = self.ready.lock() {
            // The containers already made stay in `IDLE`, removed below.
            ready.clear();
        }
        let Some(rt) = self.rt.get().cloned() else {
            return;
        };
        let Some(handle) = rt.handle().cloned() else {
            return;
        };
        let fills = self
            .fills
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default();
        let (pool, cell) = (self.id, self.docker.clone());
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        handle.spawn(async move {
            for f in fills {
                let _ = f.await;
            }
            let ids = idle_of(pool);
            if let Some(docker) = cell.get() {
                for id in ids {
                    discard(docker, id).await;
                }
            }
            let _ = done_tx.send(());
        });
        // On the pool's own thread: blocking here cannot starve it.
        let _ = done_rx.recv_timeout(std::time::Duration::from_secs(60));
    }
}

/// The idle containers of pool `pool`, forgotten by the registry.
fn idle_of(pool: u64) -> Vec<String> {
    let Ok(mut idle) = IDLE.lock() else {
        return Vec::new();
    };
    let mine: Vec<String> = idle
        .iter()
        .filter(|(_, p)| **p == pool)
        .map(|(id, _)| id.clone())
        .collect();
    for id in &mine {
        idle.remove(id);
    }
    mine
}

/// Create, attach and start one pooled container.
async fn warm(
    docker: &Docker,
    body: ContainerCreateBody,
    pool: u64,
    closed: &AtomicBool,
) -> Option<Warm> {
    let name = labels::run_id();
    let created = docker
        .create_container(
            Some(CreateContainerOptionsBuilder::new().name(&name).build()),
            body,
        )
        .await
        .map_err(|e| tracing::debug!("sandbox-docker: pool: create: {e}"))
        .ok()?;
    let id = created.id;
    if let Ok(mut idle) = IDLE.lock() {
        idle.insert(id.clone(), pool);
    }
    let started = async {
        let notes = check_warnings(&created.warnings).ok()?;
        let attach = docker
            .attach_container(
                &id,
                Some(
                    AttachContainerOptionsBuilder::new()
                        .stream(true)
                        .stdin(true)
                        .stdout(false)
                        .stderr(false)
                        .logs(false)
                        .build(),
                ),
            )
            .await
            .ok()?;
        docker
            .start_container(
                &id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .ok()?;
        Some(Warm {
            id: id.clone(),
            input: attach.input,
            notes,
            _rt: None,
        })
    }
    .await;
    match started {
        Some(w) if !closed.load(Ordering::SeqCst) => Some(w),
        _ => {
            discard(docker, id).await;
            None
        }
    }
}

fn idle_forget(id: &str) {
    if let Ok(mut idle) = IDLE.lock() {
        idle.remove(id);
    }
}

/// Remove a pooled container that will not be used.
async fn discard(docker: &Docker, id: String) {
    idle_forget(&id);
    if let Err(e) = resources::remove_container(docker, &id).await {
        tracing::error!("sandbox-docker: removing pooled container {id}: {e}");
    }
}

/// Remove containers from outside any runtime (a drop, the exit handler): on a thread of
/// its own with a runtime of its own, joined.
fn remove_blocking(ids: Vec<String>) {
    if ids.is_empty() {
        return;
    }
    let t = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(docker) = crate::client::connect_inner().await else {
                return;
            };
            for id in ids {
                if let Err(e) = resources::remove_container(&docker, &id).await {
                    tracing::error!("sandbox-docker: removing pooled container {id}: {e}");
                }
            }
        });
    });
    let _ = t.join();
}

extern "C" fn remove_idle_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let ids: Vec<String> = match IDLE.lock() {
            Ok(mut idle) => std::mem::take(&mut *idle).into_keys().collect(),
            Err(_) => Vec::new(),
        };
        remove_blocking(ids);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frame_is_length_prefixed_and_binary_safe() {
        let f = frame(&[b"/bin/echo".to_vec(), b"a b\n\xff".to_vec(), Vec::new()]);
        let mut want = b"SBXW".to_vec();
        want.extend_from_slice(&3u32.to_le_bytes());
        want.extend_from_slice(&9u32.to_le_bytes());
        want.extend_from_slice(b"/bin/echo");
        want.extend_from_slice(&5u32.to_le_bytes());
        want.extend_from_slice(b"a b\n\xff");
        want.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(f, want);
    }

    #[test]
    fn a_policy_is_pooled_only_once_it_comes_back() {
        let pool = Pool::new().expect("a pool on this host");
        assert!(!pool.seen_before("a"));
        assert!(!pool.seen_before("b"));
        assert!(pool.seen_before("a"));
        assert!(pool.seen_before("a"));
    }

    #[test]
    fn the_key_is_the_whole_body_so_any_difference_is_another_key() {
        let pool = Pool::new().expect("a pool on this host");
        let body = ContainerCreateBody {
            image: Some("img:1".into()),
            user: Some("1000:1000".into()),
            env: Some(vec!["PATH=/bin".into()]),
            ..Default::default()
        };
        let (pooled, key) = pool.body(&body, "sha256:aaa").unwrap();
        assert_eq!(pooled.image.as_deref(), Some("sha256:aaa"));
        assert_eq!(pooled.entrypoint, Some(vec![WAITER_PATH.to_string()]));
        let mounts = pooled.host_config.unwrap().mounts.unwrap();
        assert!(mounts
            .iter()
            .any(|m| m.target.as_deref() == Some(WAITER_PATH) && m.read_only == Some(true)));
        // The same body: the same key. Any field changed, or another image id: another.
        assert_eq!(pool.body(&body, "sha256:aaa").unwrap().1, key);
        assert_ne!(pool.body(&body, "sha256:bbb").unwrap().1, key);
        let mut other = body.clone();
        other.env = Some(vec!["PATH=/bin".into(), "SECRET=1".into()]);
        assert_ne!(pool.body(&other, "sha256:aaa").unwrap().1, key);
        let mut other = body.clone();
        other.user = Some("0:0".into());
        assert_ne!(pool.body(&other, "sha256:aaa").unwrap().1, key);
        // The run's argv is not part of the container: it goes to the waiter.
        let mut other = body.clone();
        other.entrypoint = Some(vec!["/bin/sh".into()]);
        assert_eq!(pool.body(&other, "sha256:aaa").unwrap().1, key);
    }
}
