//! What the sandbox refused while a command ran: the answer to "why did my command fail?".
//!
//! A backend records a [`Denial`] only when a mechanism it controls actually saw the refusal
//! (a seccomp notification, the proxy's own decision); it never infers one from an error
//! code the command printed. Which kinds a backend can see is its capability's
//! [`DenialKinds`]: a kind it does not claim may still be refused, silently.
//!
//! # Bounded
//!
//! A command can hit a denied call millions of times. [`DenialLog`] keeps the first
//! [`MAX_DISTINCT`] distinct (kind, target, mechanism) entries with a count each, and only
//! counts the rest, so the host's memory stays bounded whatever the command does.

use std::fmt;

use serde::Serialize;

use crate::egress::Connections;

/// How many distinct denials an outcome keeps; later distinct ones are only counted.
pub const MAX_DISTINCT: usize = 100;

/// What kind of operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialKind {
    /// Reading a file or listing a directory.
    FileRead,
    /// Writing, creating, removing or renaming a file.
    FileWrite,
    /// Executing a program.
    Exec,
    /// Connecting to an address.
    NetworkConnect,
    /// Binding or listening on an address.
    NetworkBind,
    /// A system call, by name.
    Syscall,
    /// Sending a signal to a process outside the sandbox.
    Signal,
    /// Tracing or reading another process (`ptrace`).
    Ptrace,
}

impl DenialKind {
    /// The verb the one-line summary uses (`read /root/.ssh/id_ed25519`).
    pub fn verb(self) -> &'static str {
        match self {
            Self::FileRead => "read",
            Self::FileWrite => "write",
            Self::Exec => "exec",
            Self::NetworkConnect => "connect",
            Self::NetworkBind => "bind",
            Self::Syscall => "call",
            Self::Signal => "signal",
            Self::Ptrace => "ptrace",
        }
    }
}

/// The mechanism that refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialMechanism {
    /// A landlock rule.
    Landlock,
    /// The seccomp filter.
    Seccomp,
    /// A namespace (the command's own network or mount view).
    Namespace,
    /// The egress proxy.
    Proxy,
    /// The container engine.
    Engine,
}

impl DenialMechanism {
    /// Its name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Self::Landlock => "landlock",
            Self::Seccomp => "seccomp",
            Self::Namespace => "namespace",
            Self::Proxy => "proxy",
            Self::Engine => "engine",
        }
    }
}

/// One refused operation, and how often it was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// What was refused.
    pub kind: DenialKind,
    /// What it was aimed at: a path, `address:port`, or the call's name.
    pub target: String,
    /// What refused it.
    pub mechanism: DenialMechanism,
    /// How many times.
    pub count: u64,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            // The call's name says it all: `ptrace (seccomp)`, `mount (seccomp)`.
            DenialKind::Syscall | DenialKind::Ptrace => f.write_str(&self.target)?,
            k => write!(f, "{} {}", k.verb(), self.target)?,
        }
        write!(f, " ({})", self.mechanism.name())?;
        if self.count > 1 {
            write!(f, " x{}", self.count)?;
        }
        Ok(())
    }
}

/// Every denial of one run, as the outcome carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Denials {
    /// The first [`MAX_DISTINCT`] distinct denials, in the order first seen.
    pub entries: Vec<Denial>,
    /// Refusals beyond those entries (distinct ones that did not fit), counted only.
    pub more: u64,
}

impl Denials {
    /// No denial was seen.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.more == 0
    }

    /// How many operations were refused in all.
    pub fn total(&self) -> u64 {
        self.entries.iter().map(|d| d.count).sum::<u64>() + self.more
    }

    /// The one-line summary the command prints on stderr after a run, or `None` when
    /// nothing was refused: `denied 3 operations: read /x (landlock), ptrace (seccomp)`.
    pub fn summary(&self) -> Option<String> {
        self.summary_besides(None)
    }

    /// The summary when the refusals of mechanism `said` were already printed one line
    /// each (the proxy's, with their reasons): they are counted and pointed at, not named
    /// again. `None` when nothing was refused, or when they were all there was.
    pub fn summary_besides(&self, said: Option<DenialMechanism>) -> Option<String> {
        let (said_entries, rest): (Vec<&Denial>, Vec<&Denial>) =
            self.entries.iter().partition(|d| Some(d.mechanism) == said);
        if rest.is_empty() && self.more == 0 {
            return None;
        }
        const SHOWN: usize = 5;
        let mut parts: Vec<String> = rest.iter().take(SHOWN).map(|d| d.to_string()).collect();
        let said_count: u64 = said_entries.iter().map(|d| d.count).sum();
        if let (Some(m), 1..) = (said, said_count) {
            // `2 connects (proxy, listed above)`: the verb when they are all of one kind.
            let verb = match said_entries.first().map(|d| d.kind) {
                Some(k) if said_entries.iter().all(|d| d.kind == k) => k.verb(),
                _ => "operation",
            };
            parts.push(format!(
                "{said_count} {verb}{} ({}, listed above)",
                if said_count == 1 { "" } else { "s" },
                m.name()
            ));
        }
        let hidden = rest.len().saturating_sub(SHOWN) as u64 + self.more;
        if hidden > 0 {
            parts.push(format!("and {hidden} more (the outcome's JSON lists them)"));
        }
        let total = self.total();
        Some(format!(
            "denied {total} operation{}: {}",
            if total == 1 { "" } else { "s" },
            parts.join(", ")
        ))
    }
}

/// Collects a run's denials within a fixed memory bound.
#[derive(Debug, Default)]
pub struct DenialLog {
    denials: Denials,
}

impl DenialLog {
    /// Record one refusal. Allocates only for a new distinct entry while there is room.
    pub fn record(&mut self, kind: DenialKind, target: &str, mechanism: DenialMechanism) {
        self.record_n(kind, target, mechanism, 1);
    }

    /// Record `n` alike refusals.
    fn record_n(&mut self, kind: DenialKind, target: &str, mechanism: DenialMechanism, n: u64) {
        // A scan of at most MAX_DISTINCT entries, without allocating: the common case is
        // a repeat.
        if let Some(d) = self
            .denials
            .entries
            .iter_mut()
            .find(|d| d.kind == kind && d.mechanism == mechanism && d.target == target)
        {
            d.count += n;
            return;
        }
        if self.denials.entries.len() >= MAX_DISTINCT {
            self.denials.more += n;
            return;
        }
        self.denials.entries.push(Denial {
            kind,
            target: target.to_owned(),
            mechanism,
            count: n,
        });
    }

    /// Record each attempt the egress proxy denied (allowed ones are not denials), as a
    /// network connect to `host:port` refused by the proxy; the denied attempts the
    /// connection record only counted are counted here too.
    pub fn record_connections(&mut self, connections: &Connections) {
        for c in connections
            .entries
            .iter()
            .filter(|c| !c.decision.is_allowed())
        {
            self.record_n(
                DenialKind::NetworkConnect,
                &c.target(),
                DenialMechanism::Proxy,
                c.count,
            );
        }
        self.denials.more += connections.more.denied;
    }

    /// What was recorded.
    pub fn denials(&self) -> &Denials {
        &self.denials
    }

    /// What was recorded, taken.
    pub fn into_denials(self) -> Denials {
        self.denials
    }
}

/// Which kinds of denial a backend reports: a capability field. `Default` claims none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DenialKinds {
    /// File reads refused.
    pub file_read: bool,
    /// File writes refused.
    pub file_write: bool,
    /// Programs refused execution.
    pub exec: bool,
    /// Connects the egress proxy refused (network mode `proxy`), by `host:port` as asked.
    /// Only the proxy decides in the open: with `none` or `loopback` a connect fails in the
    /// command's own network namespace, which the host does not see, so it is not reported.
    pub network_connect: bool,
    /// Binds or listens refused.
    pub network_bind: bool,
    /// System calls refused by the filter, by name.
    pub syscall: bool,
    /// Signals refused.
    pub signal: bool,
    /// `ptrace` refused.
    pub ptrace: bool,
}

impl DenialKinds {
    /// Whether `kind` is reported.
    pub fn reports(self, kind: DenialKind) -> bool {
        match kind {
            DenialKind::FileRead => self.file_read,
            DenialKind::FileWrite => self.file_write,
            DenialKind::Exec => self.exec,
            DenialKind::NetworkConnect => self.network_connect,
            DenialKind::NetworkBind => self.network_bind,
            DenialKind::Syscall => self.syscall,
            DenialKind::Signal => self.signal,
            DenialKind::Ptrace => self.ptrace,
        }
    }

    /// The names of the kinds reported (`doctor` prints them), empty for none.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.file_read, "file read"),
            (self.file_write, "file write"),
            (self.exec, "exec"),
            (self.network_connect, "network connect (proxy)"),
            (self.network_bind, "network bind"),
            (self.syscall, "syscall"),
            (self.signal, "signal"),
            (self.ptrace, "ptrace"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect()
    }
}

/// The kind a denied system call is reported as: `ptrace` is its own kind, every other
/// call of the table is a system call by name.
pub fn kind_of_call(name: &str) -> DenialKind {
    if name == "ptrace" {
        DenialKind::Ptrace
    } else {
        DenialKind::Syscall
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_count_and_distinct_entries_are_bounded() {
        let mut log = DenialLog::default();
        for _ in 0..1000 {
            log.record(DenialKind::Ptrace, "ptrace", DenialMechanism::Seccomp);
        }
        for i in 0..(MAX_DISTINCT + 50) {
            log.record(
                DenialKind::FileRead,
                &format!("/f{i}"),
                DenialMechanism::Landlock,
            );
        }
        log.record(DenialKind::FileRead, "/f0", DenialMechanism::Landlock);
        let d = log.into_denials();
        assert_eq!(d.entries.len(), MAX_DISTINCT);
        assert_eq!(d.entries[0].count, 1000);
        assert_eq!(d.entries[1].target, "/f0");
        assert_eq!(d.entries[1].count, 2);
        // 51 distinct reads did not fit: counted, not kept.
        assert_eq!(d.more, 51);
        assert_eq!(d.total(), 1000 + 2 + 98 + 51);
    }

    #[test]
    fn summary_names_each_entry_and_its_mechanism() {
        let mut log = DenialLog::default();
        assert_eq!(log.denials().summary(), None);
        log.record(
            DenialKind::FileRead,
            "/root/.ssh/id_ed25519",
            DenialMechanism::Landlock,
        );
        log.record(
            DenialKind::NetworkConnect,
            "140.82.112.3:443",
            DenialMechanism::Proxy,
        );
        log.record(DenialKind::Ptrace, "ptrace", DenialMechanism::Seccomp);
        assert_eq!(
            log.denials().summary().unwrap(),
            "denied 3 operations: read /root/.ssh/id_ed25519 (landlock), \
             connect 140.82.112.3:443 (proxy), ptrace (seccomp)"
        );
        let json = serde_json::to_value(log.denials()).unwrap();
        assert_eq!(json["entries"][0]["kind"], "file_read");
        assert_eq!(json["entries"][2]["mechanism"], "seccomp");
        assert_eq!(json["more"], 0);
    }

    #[test]
    fn a_summary_besides_the_proxy_points_at_its_lines_instead_of_repeating_them() {
        let mut log = DenialLog::default();
        let proxy = Some(DenialMechanism::Proxy);
        log.record(
            DenialKind::NetworkConnect,
            "a.test:443",
            DenialMechanism::Proxy,
        );
        log.record(
            DenialKind::NetworkConnect,
            "a.test:443",
            DenialMechanism::Proxy,
        );
        // Only the proxy's: its lines said it all.
        assert_eq!(log.denials().summary_besides(proxy), None);
        assert_eq!(
            log.denials().summary().unwrap(),
            "denied 2 operations: connect a.test:443 (proxy) x2"
        );
        log.record(DenialKind::Syscall, "unshare", DenialMechanism::Seccomp);
        assert_eq!(
            log.denials().summary_besides(proxy).unwrap(),
            "denied 3 operations: unshare (seccomp), 2 connects (proxy, listed above)"
        );
        for i in 0..6 {
            log.record(
                DenialKind::Syscall,
                &format!("c{i}"),
                DenialMechanism::Seccomp,
            );
        }
        assert_eq!(
            log.denials().summary_besides(proxy).unwrap(),
            "denied 9 operations: unshare (seccomp), c0 (seccomp), c1 (seccomp), c2 (seccomp), \
             c3 (seccomp), 2 connects (proxy, listed above), and 2 more (the outcome's JSON lists \
             them)"
        );
    }

    #[test]
    fn connections_the_proxy_denied_are_denials_and_allowed_ones_are_not() {
        use crate::egress::{Attempt, ConnectionLog, ProxyProtocol, MAX_CONNECTIONS};
        use crate::policy::Decision;
        let attempt = |host: &str, decision: Decision| Attempt {
            at: std::time::SystemTime::now(),
            protocol: ProxyProtocol::Connect,
            host: host.into(),
            port: 443,
            decision,
            peer: None,
            error: None,
            request: None,
        };
        let mut connections = ConnectionLog::default();
        for a in [
            attempt("crates.io", Decision::Allowed("crates.io".into())),
            attempt(
                "pastebin.com",
                Decision::Denied("not in the allowlist".into()),
            ),
            attempt("::1", Decision::Denied("loopback".into())),
            attempt(
                "pastebin.com",
                Decision::Denied("not in the allowlist".into()),
            ),
        ] {
            connections.record(a);
        }
        let mut log = DenialLog::default();
        log.record_connections(connections.connections());
        let d = log.into_denials();
        assert_eq!(
            d.entries,
            [
                Denial {
                    kind: DenialKind::NetworkConnect,
                    target: "pastebin.com:443".into(),
                    mechanism: DenialMechanism::Proxy,
                    count: 2
                },
                Denial {
                    kind: DenialKind::NetworkConnect,
                    target: "[::1]:443".into(),
                    mechanism: DenialMechanism::Proxy,
                    count: 1
                },
            ]
        );
        assert_eq!(d.more, 0);

        // What the connection record only counted is counted here too: exactly.
        let mut connections = ConnectionLog::default();
        for i in 0..MAX_CONNECTIONS + 30 {
            let decision = if i % 3 == 0 {
                Decision::Allowed("*.test".into())
            } else {
                Decision::Denied("not in the allowlist".into())
            };
            connections.record(attempt(&format!("h{i}.test"), decision));
        }
        let folded = connections.connections().more;
        assert_eq!((folded.attempts, folded.denied), (30, 20));
        let mut log = DenialLog::default();
        log.record_connections(connections.connections());
        let d = log.into_denials();
        assert_eq!(d.entries.len(), MAX_DISTINCT);
        let kept_denied = (0..MAX_CONNECTIONS).filter(|i| i % 3 != 0).count() as u64;
        assert_eq!(d.total(), kept_denied + 20);
    }

    #[test]
    fn kinds_report_only_what_they_claim() {
        let none = DenialKinds::default();
        assert!(none.names().is_empty());
        let sys = DenialKinds {
            syscall: true,
            ptrace: true,
            ..DenialKinds::default()
        };
        assert!(sys.reports(DenialKind::Syscall) && sys.reports(DenialKind::Ptrace));
        assert!(!sys.reports(DenialKind::FileRead) && !sys.reports(DenialKind::NetworkConnect));
        assert_eq!(sys.names(), ["syscall", "ptrace"]);
        let proxy = DenialKinds {
            network_connect: true,
            ..DenialKinds::default()
        };
        assert!(proxy.reports(DenialKind::NetworkConnect));
        assert!(!proxy.reports(DenialKind::NetworkBind));
        assert_eq!(proxy.names(), ["network connect (proxy)"]);
        assert_eq!(kind_of_call("ptrace"), DenialKind::Ptrace);
        assert_eq!(kind_of_call("mount"), DenialKind::Syscall);
    }
}
