//! What a backend learned about the host by starting a process (a probe), kept so that the
//! next backend value of this process, and through a caller's [`FactStore`] the next
//! process, need not start it again.
//!
//! A backend's constructor asks the host what it offers. Most of that is a system call or a
//! file read and is asked again every time; some of it can only be learned by trying it in
//! a child (can a user namespace be made? a pid namespace with its own `/proc`?) or by
//! running the backend's tool (`bwrap --help`). Those answers are what this module keeps.
//!
//! # What may be kept
//!
//! - Only what a probe found to **work**: a failure is never kept, so a host that was fixed
//!   is seen by the next process.
//! - Only what the run applies itself anyway. A fact chooses *how* a confinement is made
//!   (through a user namespace or without), never *whether*: the run still makes the
//!   namespaces, still passes bwrap its options, and a mechanism that no longer works fails
//!   the launch, so a stale fact fails closed (nothing runs) and is then dropped by whoever
//!   diagnoses the failure (the backend's preflight probes afresh). A fact that would
//!   weaken a run if it were stale must be keyed by something that changes with it (bwrap's
//!   options, by the identity of the bwrap binary).
//! - Nothing that decides what the command may read or write: that is found on every run.
//! - A store may hold what its owner did not write (a workspace that holds the cache
//!   directory lets a command write there): a backend reads its facts so that a forged
//!   one, like a stale one, can only make a launch fail. A fact whose absence would leave
//!   a confinement out of the run (an option bwrap lacks) is never read from a record.
//!
//! # Keys
//!
//! A backend's facts are kept under one key: the host facts that decide whether a probe
//! succeeds ([`host_key`]: the kernel release, the ids, the user and mount namespace, the
//! sysctls that allow or limit namespaces) followed by the backend's own part (its host
//! program's [identity](sandbox_core::registry::program_identity), the landlock ABI, the format
//! of its facts). Facts recorded under any other key are not returned: a changed host is
//! probed again.
//!
//! # Where they are kept
//!
//! In this process's memory, always (so constructing a backend twice probes once), and in
//! the caller's [`FactStore`] when [`BackendConfig::facts`] names one. The library itself
//! writes nothing to disk; the `sandbox` command hands its backends a store in the user's
//! cache directory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use sandbox_core::registry::BackendConfig;

pub use sandbox_core::registry::{FactStore, Facts, SharedFactStore};

/// What this process recorded, by backend and key.
static MEMORY: Mutex<BTreeMap<(String, String), Facts>> = Mutex::new(BTreeMap::new());

/// Where the facts a backend opened with came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing was recorded: each fact is probed.
    Nothing,
    /// This process probed them (an earlier backend value).
    Memory,
    /// The caller's store.
    Store,
}

/// One backend's facts under one key, as the backend holds them: read when the backend is
/// built, written as its probes succeed.
#[derive(Debug)]
pub struct HostRecord {
    backend: &'static str,
    key: String,
    /// `None`: nothing is kept at all (a fresh probe for a preflight, a test).
    keep: Option<Option<Arc<dyn FactStore>>>,
    facts: Mutex<Facts>,
    source: Source,
}

impl HostRecord {
    /// The facts `backend` recorded under this host's key and `own_key` (the backend's part
    /// of the key), from this process's memory, else from `config`'s store.
    pub fn open(config: &BackendConfig, backend: &'static str, own_key: &str) -> Self {
        let key = format!("{}; {own_key}", host_key());
        let store = config.facts.as_ref().map(|s| Arc::clone(&s.0));
        let remembered = MEMORY
            .lock()
            .ok()
            .and_then(|m| m.get(&(backend.to_string(), key.clone())).cloned());
        let (facts, source) = match remembered {
            Some(f) => (f, Source::Memory),
            None => match store.as_ref().and_then(|s| s.load(backend, &key)) {
                Some(f) => {
                    if let Ok(mut m) = MEMORY.lock() {
                        m.insert((backend.to_string(), key.clone()), f.clone());
                    }
                    (f, Source::Store)
                }
                None => (Facts::new(), Source::Nothing),
            },
        };
        Self {
            backend,
            key,
            keep: Some(store),
            facts: Mutex::new(facts),
            source,
        }
    }

    /// Nothing recorded and nothing kept: every fact is probed, and what is found stays
    /// with this value (a preflight's fresh look at the host).
    pub fn fresh(backend: &'static str) -> Self {
        Self {
            backend,
            key: String::new(),
            keep: None,
            facts: Mutex::new(Facts::new()),
            source: Source::Nothing,
        }
    }

    /// Where the facts came from when the record was opened.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The recorded value of `name`.
    pub fn get(&self, name: &str) -> Option<String> {
        self.facts.lock().ok()?.get(name).cloned()
    }

    /// Record `name` (found by a probe that worked) here, in this process's memory and in
    /// the store.
    pub fn set(&self, name: &str, value: impl Into<String>) {
        let value = value.into();
        let Ok(mut facts) = self.facts.lock() else {
            return;
        };
        if facts.get(name) == Some(&value) {
            return;
        }
        facts.insert(name.to_string(), value);
        let Some(store) = &self.keep else {
            return;
        };
        if let Ok(mut m) = MEMORY.lock() {
            m.insert((self.backend.to_string(), self.key.clone()), facts.clone());
        }
        if let Some(s) = store {
            s.save(self.backend, &self.key, &facts);
        }
    }

    /// Drop every recorded fact (here, in memory and in the store): the next backend value
    /// probes again.
    pub fn forget(&self) {
        if let Ok(mut facts) = self.facts.lock() {
            facts.clear();
        }
        let Some(store) = &self.keep else {
            return;
        };
        if let Ok(mut m) = MEMORY.lock() {
            m.retain(|(b, _), _| b != self.backend);
        }
        if let Some(s) = store {
            s.forget(self.backend);
        }
    }
}

/// The sysctls that allow or limit the namespaces a probe makes; absent ones count as
/// absent (`-`), so a kernel that adds one changes the key.
const SYSCTLS: &[&str] = &[
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
];

/// The host facts whether a namespace probe succeeds depends on, as one line: the kernel
/// release, the real and effective ids, the user and mount namespace this process is in
/// (a container, a `unshare`), and the [`SYSCTLS`]. Only files are read.
pub fn host_key() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "-".to_string())
    };
    let ns = |n: &str| {
        std::fs::read_link(format!("/proc/self/ns/{n}"))
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "-".to_string())
    };
    // SAFETY: plain queries without arguments.
    let ids = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    let mut key = format!(
        "kernel {}; uid {} euid {} gid {} egid {}; {} {}",
        read("/proc/sys/kernel/osrelease"),
        ids.0,
        ids.1,
        ids.2,
        ids.3,
        ns("user"),
        ns("mnt"),
    );
    for p in SYSCTLS {
        let name = p.trim_start_matches("/proc/sys/").replace('/', ".");
        key.push_str(&format!("; {name}={}", read(p)));
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Book(Mutex<BTreeMap<String, (String, Facts)>>);

    impl FactStore for Book {
        fn load(&self, backend: &str, key: &str) -> Option<Facts> {
            let m = self.0.lock().unwrap();
            m.get(backend)
                .filter(|(k, _)| k == key)
                .map(|(_, f)| f.clone())
        }
        fn save(&self, backend: &str, key: &str, facts: &Facts) {
            let mut m = self.0.lock().unwrap();
            m.insert(backend.to_string(), (key.to_string(), facts.clone()));
        }
        fn forget(&self, backend: &str) {
            self.0.lock().unwrap().remove(backend);
        }
    }

    fn config(book: &Arc<Book>) -> BackendConfig {
        BackendConfig::default().with_facts(book.clone())
    }

    #[test]
    fn the_host_key_names_the_kernel_the_ids_the_namespaces_and_the_sysctls() {
        let k = host_key();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        assert!(k.contains(&format!("kernel {}", kernel.trim())), "{k}");
        // SAFETY: a plain query.
        assert!(
            k.contains(&format!("euid {}", unsafe { libc::geteuid() })),
            "{k}"
        );
        assert!(k.contains("user:["), "{k}");
        assert!(k.contains("mnt:["), "{k}");
        assert!(k.contains("user.max_user_namespaces="), "{k}");
        assert!(
            k.contains("kernel.apparmor_restrict_unprivileged_userns="),
            "{k}"
        );
    }

    /// Set in the copy of [`a_sysctl_alone_changes_the_key`] that runs in a user namespace.
    const INNER: &str = "SANDBOX_CORE_FACTS_TEST_INNER";

    /// Each namespace limit is in the key on its own: the test re-runs itself as root of a
    /// user namespace of its own (whose `user.max_*` limits it may set: nothing of the
    /// host changes) and lowers one between two keys.
    #[test]
    fn a_sysctl_alone_changes_the_key() {
        if std::env::var_os(INNER).is_some() {
            let path = "/proc/sys/user/max_mnt_namespaces";
            let before = host_key();
            let limit: u64 = std::fs::read_to_string(path)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            std::fs::write(path, (limit - 1).to_string()).unwrap();
            let after = host_key();
            assert_ne!(before, after);
            let changed = |k: &str| {
                k.split("; ")
                    .find(|p| p.starts_with("user.max_mnt_namespaces="))
                    .map(str::to_string)
            };
            assert_eq!(
                after.replace(&changed(&after).unwrap(), &changed(&before).unwrap()),
                before
            );
            println!("inner checks passed");
            return;
        }
        use std::os::unix::process::CommandExt;
        // SAFETY: plain queries.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let uid_map = std::ffi::CString::new(format!("0 {uid} 1")).unwrap();
        let gid_map = std::ffi::CString::new(format!("0 {gid} 1")).unwrap();
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "facts::tests::a_sysctl_alone_changes_the_key",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INNER, "1");
        // SAFETY: raw system calls on data prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let write = |p, d| crate::sys::raw_write_file(p, d);
                write(c"/proc/self/setgroups", b"deny")?;
                write(c"/proc/self/uid_map", uid_map.as_bytes())?;
                write(c"/proc/self/gid_map", gid_map.as_bytes())
            });
        }
        let out = cmd.output().unwrap();
        let all = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && all.contains("inner checks passed"),
            "{all}"
        );
    }

    #[test]
    fn facts_go_to_the_store_and_come_back_only_under_their_key() {
        let book = Arc::new(Book::default());
        let c = config(&book);
        let r = HostRecord::open(&c, "facts-test-a", "own 1");
        assert_eq!(r.source(), Source::Nothing);
        r.set("namespaces", "plain");
        let (key, saved) = book.0.lock().unwrap()["facts-test-a"].clone();
        assert_eq!(saved["namespaces"], "plain");
        assert!(
            key.starts_with(&host_key()) && key.ends_with("own 1"),
            "{key}"
        );
        // Another value of this process: from memory.
        let again = HostRecord::open(&c, "facts-test-a", "own 1");
        assert_eq!(again.source(), Source::Memory);
        assert_eq!(again.get("namespaces").as_deref(), Some("plain"));
        // Another own key: nothing.
        let other = HostRecord::open(&c, "facts-test-a", "own 2");
        assert_eq!(other.source(), Source::Nothing);
        assert_eq!(other.get("namespaces"), None);
        // Forgotten: gone from memory and the store.
        again.forget();
        assert!(book.0.lock().unwrap().get("facts-test-a").is_none());
        let after = HostRecord::open(&c, "facts-test-a", "own 1");
        assert_eq!(after.source(), Source::Nothing);
    }

    #[test]
    fn a_store_answers_a_new_process() {
        let book = Arc::new(Book::default());
        let mut facts = Facts::new();
        facts.insert("pid_namespace".into(), "ok".into());
        let key = format!("{}; own", host_key());
        book.save("facts-test-b", &key, &facts);
        let r = HostRecord::open(&config(&book), "facts-test-b", "own");
        assert_eq!(r.source(), Source::Store);
        assert_eq!(r.get("pid_namespace").as_deref(), Some("ok"));
    }

    #[test]
    fn a_fresh_record_keeps_nothing() {
        let book = Arc::new(Book::default());
        let r = HostRecord::fresh("facts-test-c");
        r.set("namespaces", "userns");
        assert_eq!(r.get("namespaces").as_deref(), Some("userns"));
        let c = config(&book);
        let later = HostRecord::open(&c, "facts-test-c", "");
        assert_eq!(later.source(), Source::Nothing);
        assert!(book.0.lock().unwrap().is_empty());
    }
}
