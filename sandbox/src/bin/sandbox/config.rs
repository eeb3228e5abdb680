//! The policy file (`--config FILE`) and how it meets the flags.
//!
//! A project keeps its sandbox policy under version control, so the file says everything
//! the flags can (with the same names), refuses keys it does not know (a typo must not
//! silently drop a restriction), and takes its relative paths against its own directory
//! (so `workspace = "."` means the project, wherever the command is typed). Flags override
//! its single values; repeatable flags (`--read`, `--write`, `--env`) add to its lists.
//! `--json` is not in it: how the outcome is shown is the caller's choice, not policy.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use sandbox::{Lane, NetworkMode};

use crate::args::{BackendArg, MemoryArg, PolicyArgs};
use crate::error::CliError;

/// The policy file's keys, in [`PolicyFile`]'s order: what `--config`'s help lists. A test
/// holds it to the keys the file accepts.
pub const KEYS: [&str; 21] = [
    "backend",
    "workspace",
    "read",
    "toolchains",
    "write",
    "network",
    "allow-hosts",
    "secrets",
    "upstream-ca",
    "upstream-proxy",
    "allow-requests",
    "host-ports",
    "publish",
    "env",
    "timeout",
    "max-output",
    "memory",
    "lane",
    "image",
    "snapshot",
    "writable-git",
];

/// The file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PolicyFile {
    backend: Option<BackendArg>,
    workspace: Option<PathBuf>,
    #[serde(default)]
    read: Vec<PathBuf>,
    #[serde(default)]
    toolchains: Vec<PathBuf>,
    #[serde(default)]
    write: Vec<PathBuf>,
    network: Option<NetworkMode>,
    #[serde(default)]
    allow_hosts: Vec<String>,
    /// `[secrets] NAME = ["HOST", ...]`: the value from the caller's variable `NAME`, into
    /// the `Authorization` header of requests to those hosts (`--secret` for the other
    /// forms).
    #[serde(default)]
    secrets: std::collections::BTreeMap<String, Vec<String>>,
    /// `upstream-ca = ["corp-ca.pem"]`: more authorities for the servers behind terminated
    /// hosts (and in the run's bundle).
    #[serde(default)]
    upstream_ca: Vec<PathBuf>,
    /// `upstream-proxy = "http://proxy.corp.example:3128"`: as `--upstream-proxy`.
    upstream_proxy: Option<String>,
    /// `allow-requests = ["GET https://api.github.com/repos/o/r/**"]`: as `--allow-request`.
    #[serde(default)]
    allow_requests: Vec<String>,
    #[serde(default)]
    host_ports: Vec<u16>,
    /// `publish = [8080, "3000:13000"]`: a port, or `PORT:HOSTPORT`.
    #[serde(default)]
    publish: Vec<PublishEntry>,
    #[serde(default)]
    env: Vec<String>,
    timeout: Option<Seconds>,
    max_output: Option<u64>,
    memory: Option<MemoryArg>,
    lane: Option<Lane>,
    image: Option<String>,
    snapshot: Option<bool>,
    writable_git: Option<bool>,
}

/// One `publish` entry of the policy file: a port, or `"PORT[:HOSTPORT]"`.
#[derive(Clone, Debug)]
enum PublishEntry {
    Port(u64),
    Spec(String),
}

/// A number, or a string: the visitor of the keys that take either, so that a value of
/// neither type is reported with the type the key expects (not serde's "untagged enum").
pub(crate) struct NumberOrText(pub(crate) &'static str);

/// What [`NumberOrText`] found.
pub(crate) enum Found {
    Whole(u64),
    Fraction(f64),
    Text(String),
}

impl serde::de::Visitor<'_> for NumberOrText {
    type Value = Found;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Found, E> {
        Ok(Found::Whole(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Found, E> {
        u64::try_from(v)
            .map(Found::Whole)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Found, E> {
        Ok(Found::Fraction(v))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Found, E> {
        Ok(Found::Text(v.to_string()))
    }
}

impl<'de> Deserialize<'de> for PublishEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const EXPECTED: &str = "a port number or a string \"PORT:HOSTPORT\"";
        match d.deserialize_any(NumberOrText(EXPECTED))? {
            Found::Whole(n) => Ok(Self::Port(n)),
            Found::Text(t) => Ok(Self::Spec(t)),
            Found::Fraction(f) => Err(serde::de::Error::invalid_value(
                serde::de::Unexpected::Float(f),
                &EXPECTED,
            )),
        }
    }
}

impl PublishEntry {
    fn parse(&self) -> Result<sandbox_core::Publish, CliError> {
        let text = match self {
            Self::Port(n) => n.to_string(),
            Self::Spec(s) => s.clone(),
        };
        text.parse()
            .map_err(|e: String| CliError::option("publish", &e))
    }
}

/// A number of seconds, whole or not.
#[derive(Clone, Copy, Debug)]
enum Seconds {
    Whole(u64),
    Fraction(f64),
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        const EXPECTED: &str = "a number of seconds (such as 30 or 2.5)";
        match d.deserialize_any(NumberOrText(EXPECTED))? {
            Found::Whole(n) => Ok(Self::Whole(n)),
            Found::Fraction(f) => Ok(Self::Fraction(f)),
            Found::Text(t) => Err(serde::de::Error::invalid_type(
                serde::de::Unexpected::Str(&t),
                &EXPECTED,
            )),
        }
    }
}

/// The host's policy, from the file and the flags, paths absolute: everything `run` and
/// `mcp` need but the command itself.
#[derive(Debug)]
pub struct RunSpec {
    pub backend: BackendArg,
    pub workspace: PathBuf,
    pub read: Vec<PathBuf>,
    /// Toolchain homes (`--toolchain`): read-only, credentials hidden, PATH passed.
    pub toolchains: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub network: NetworkMode,
    pub allow_hosts: Vec<String>,
    pub secrets: Vec<sandbox_core::SecretSpec>,
    /// `--upstream-ca` files, absolute.
    pub upstream_ca: Vec<PathBuf>,
    /// `--upstream-proxy`, as written (the library parses and refuses it).
    pub upstream_proxy: Option<String>,
    /// Request rules, as written (the library parses and refuses them).
    pub allow_requests: Vec<String>,
    pub host_ports: Vec<u16>,
    pub publish: Vec<sandbox_core::Publish>,
    pub env: Vec<OsString>,
    pub timeout: Option<Duration>,
    pub max_output: Option<usize>,
    /// `None`: the library's default; `Some(None)`: unlimited, said explicitly.
    pub memory_bytes: Option<Option<u64>>,
    pub lane: Lane,
    pub image: Option<String>,
    pub snapshot: bool,
    /// The repositories' hooks and config are writable (`--writable-git`).
    pub writable_git: bool,
}

impl PolicyFile {
    /// Read and parse `path`.
    pub fn load(path: &Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path).map_err(|e| CliError::Config {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Self::parse(&text).map_err(|reason| CliError::Config {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// The file's keys, or what is wrong in one line: the key, its line, and what it
    /// expects (not the parser's excerpt of the file).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| {
            let message = e.message().trim().replace('\n', " ");
            match e.span().and_then(|span| key_at(text, span.start)) {
                Some((key, line)) if !message.contains(&format!("`{key}`")) => {
                    format!("`{key}` (line {line}): {message}")
                }
                Some((_, line)) => format!("line {line}: {message}"),
                None => message,
            }
        })
    }
}

/// The key whose value is at byte `offset` of `text`, and its line: the nearest line at or
/// before it that assigns one (a multi-line array's elements are on later lines).
fn key_at(text: &str, offset: usize) -> Option<(String, usize)> {
    let before = text.get(..offset)?;
    let line = before.matches('\n').count() + 1;
    let key = before
        .lines()
        .chain(text[offset..].lines().next())
        .rev()
        .find_map(|l| {
            let (key, _) = l.split_once('=')?;
            let key = key.trim().trim_matches('"');
            let bare = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            bare.then(|| key.to_string())
        })?;
    Some((key, line))
}

#[cfg(test)]
impl PolicyFile {
    pub(crate) fn read_paths(&self) -> &[PathBuf] {
        &self.read
    }

    pub(crate) fn write_paths(&self) -> &[PathBuf] {
        &self.write
    }

    pub(crate) fn network(&self) -> Option<NetworkMode> {
        self.network
    }
}

/// `p` as an absolute path: relative ones are taken against `base`. Not canonicalised: the
/// library does that, and reports a path that does not exist.
fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn seconds(s: Seconds) -> Result<Duration, CliError> {
    let d = match s {
        Seconds::Whole(n) => Duration::from_secs(n),
        Seconds::Fraction(f) => crate::args::parse_seconds(&f.to_string())
            .map_err(|reason| CliError::option("timeout", reason))?,
    };
    if d.is_zero() {
        return Err(CliError::option(
            "timeout",
            "must be more than zero seconds",
        ));
    }
    Ok(d)
}

fn mib(mb: u64) -> Result<u64, CliError> {
    mb.checked_mul(1 << 20)
        .ok_or_else(|| CliError::option("memory", format!("{mb} MiB is too large")))
}

fn usize_bytes(n: u64) -> Result<usize, CliError> {
    usize::try_from(n).map_err(|_| CliError::option("max-output", format!("{n} is too large")))
}

/// Merge the policy file (if any) and the flags, resolving relative paths: the file's
/// against its directory, the flags' against `cwd`.
pub fn resolve(args: PolicyArgs, cwd: &Path) -> Result<RunSpec, CliError> {
    let (file, base) = match &args.config {
        Some(path) => {
            let path = absolute(cwd, path);
            let file = PolicyFile::load(&path)?;
            let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (file, base)
        }
        None => (PolicyFile::default(), cwd.to_path_buf()),
    };
    let workspace = match (&args.workspace, &file.workspace) {
        (Some(w), _) => absolute(cwd, w),
        (None, Some(w)) => absolute(&base, w),
        (None, None) => cwd.to_path_buf(),
    };
    let mut read: Vec<PathBuf> = file.read.iter().map(|p| absolute(&base, p)).collect();
    read.extend(args.read.iter().map(|p| absolute(cwd, p)));
    let mut toolchains: Vec<PathBuf> = file.toolchains.iter().map(|p| absolute(&base, p)).collect();
    toolchains.extend(args.toolchain.iter().map(|p| absolute(cwd, p)));
    let mut write: Vec<PathBuf> = file.write.iter().map(|p| absolute(&base, p)).collect();
    write.extend(args.write.iter().map(|p| absolute(cwd, p)));
    let mut env: Vec<OsString> = file.env.into_iter().map(OsString::from).collect();
    env.extend(args.env);
    let timeout = match (args.timeout, file.timeout) {
        (Some(t), _) => Some(t),
        (None, Some(s)) => Some(seconds(s)?),
        (None, None) => None,
    };
    let max_output = args
        .max_output
        .or(file.max_output)
        .map(usize_bytes)
        .transpose()?;
    if max_output == Some(0) {
        return Err(CliError::option("max-output", "must be at least one byte"));
    }
    let memory_bytes = match args.memory.or(file.memory) {
        None => None,
        Some(MemoryArg::Unlimited) => Some(None),
        Some(MemoryArg::MiB(mb)) => Some(Some(mib(mb)?)),
    };
    let mut allow_hosts = file.allow_hosts;
    allow_hosts.extend(args.allow_host);
    let mut secrets: Vec<sandbox_core::SecretSpec> = file
        .secrets
        .into_iter()
        .map(|(name, hosts)| sandbox_core::SecretSpec {
            source: sandbox_core::SecretSource::Env(name.clone()),
            name,
            hosts,
            placement: sandbox_core::Placement::Authorization,
        })
        .collect();
    for text in &args.secret {
        secrets.push(
            sandbox_core::SecretSpec::parse(text)
                .map_err(|e| CliError::option("secret", e.to_string()))?,
        );
    }
    let mut upstream_ca: Vec<PathBuf> = file
        .upstream_ca
        .iter()
        .map(|p| absolute(&base, p))
        .collect();
    upstream_ca.extend(args.upstream_ca.iter().map(|p| absolute(cwd, p)));
    let mut allow_requests = file.allow_requests;
    allow_requests.extend(args.allow_request);
    let mut host_ports = file.host_ports;
    host_ports.extend(args.host_port);
    let mut publish = file
        .publish
        .iter()
        .map(PublishEntry::parse)
        .collect::<Result<Vec<_>, _>>()?;
    publish.extend(args.publish);
    // An allowlist implies the proxy, host ports and published ports a private loopback,
    // unless a mode was named (then the library refuses a mismatch, rather than ignoring
    // it).
    let implied = if !allow_hosts.is_empty() || !secrets.is_empty() || !allow_requests.is_empty() {
        NetworkMode::Proxy
    } else if !host_ports.is_empty() || !publish.is_empty() {
        NetworkMode::Loopback
    } else {
        NetworkMode::None
    };
    let network = args
        .network
        .map(NetworkMode::from)
        .or(file.network)
        .unwrap_or(implied);
    Ok(RunSpec {
        backend: args.backend.or(file.backend).unwrap_or(BackendArg::AUTO),
        workspace,
        read,
        toolchains,
        write,
        network,
        allow_hosts,
        secrets,
        upstream_ca,
        upstream_proxy: args.upstream_proxy.or(file.upstream_proxy),
        allow_requests,
        host_ports,
        publish,
        env,
        timeout,
        max_output,
        memory_bytes,
        lane: args.lane.map(Lane::from).or(file.lane).unwrap_or_default(),
        image: args.image.or(file.image),
        snapshot: args.snapshot || file.snapshot.unwrap_or(false),
        writable_git: args.writable_git || file.writable_git.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn run_args(argv: &[&str]) -> PolicyArgs {
        let mut full = vec!["sandbox", "run"];
        full.extend_from_slice(argv);
        match Cli::try_parse_from(full).unwrap().command {
            Command::Run(r) => r.policy,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key_and_the_expected_type() {
        for (text, key, expected) in [
            ("timeout = \"soon\"", "timeout", "a number of seconds"),
            (
                "\nread = [\"a\"]\ntimeout = [1]",
                "timeout",
                "a number of seconds",
            ),
            (
                "publish = [\n  8080,\n  1.5,\n]",
                "publish",
                "a port number",
            ),
            ("publish = [true]", "publish", "a port number"),
            ("memory = true", "memory", "MiB"),
            ("read = \"/etc\"", "read", "sequence"),
        ] {
            let e = PolicyFile::parse(text).unwrap_err();
            assert!(e.contains(&format!("`{key}`")), "{text}: {e}");
            assert!(e.contains(expected), "{text}: {e}");
            assert!(!e.contains("untagged") && !e.contains('|'), "{text}: {e}");
            assert!(!e.contains('\n'), "{text}: {e}");
        }
    }

    #[test]
    fn the_listed_keys_are_the_keys_the_file_accepts() {
        // serde lists every field it accepts, in order, when it meets one it does not.
        let e = PolicyFile::parse("no-such-key = 1").unwrap_err();
        let expected: Vec<String> = KEYS.iter().map(|k| format!("`{k}`")).collect();
        assert!(
            e.contains(&format!("expected one of {}", expected.join(", "))),
            "{e}"
        );
        let mut cmd = <crate::args::Cli as clap::CommandFactory>::command();
        let help = cmd
            .find_subcommand_mut("run")
            .unwrap()
            .render_help()
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(help.contains(&KEYS.join(", ")), "{help}");
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let e = PolicyFile::parse("netwrok = \"none\"\n").unwrap_err();
        assert!(e.contains("netwrok"), "{e}");
    }

    #[test]
    fn every_flag_has_a_key() {
        let name = sandbox::registry::names().next().unwrap();
        let f = PolicyFile::parse(&format!(
            r#"
            backend = "{name}"
            workspace = "ws"
            read = ["/etc"]
            write = ["out"]
            network = "loopback"
            env = ["A=1", "B"]
            timeout = 2.5
            max-output = 1000
            memory = 64
            lane = "fast"
            image = "debian"
            snapshot = true
            writable-git = true
            "#
        ))
        .unwrap();
        assert_eq!(f.backend.map(BackendArg::name), Some(name));
        assert_eq!(f.lane, Some(Lane::Fast));
        assert_eq!(f.network, Some(NetworkMode::Loopback));
        assert!(matches!(f.timeout, Some(Seconds::Fraction(t)) if t == 2.5));
        assert!(PolicyFile::parse("timeout = 3").is_ok());
        assert!(PolicyFile::parse("network = \"everything\"").is_err());
    }

    #[test]
    fn flags_override_the_file_and_paths_resolve_against_their_origin() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("policy.toml");
        std::fs::write(
            &cfg,
            "workspace = \"proj\"\nnetwork = \"full\"\nlane = \"fast\"\nread = [\"data\"]\n\
             timeout = 7\nenv = [\"A=1\"]\n",
        )
        .unwrap();
        let cwd = Path::new("/somewhere/else");
        let spec = resolve(
            run_args(&[
                "--config",
                cfg.to_str().unwrap(),
                "--network",
                "none",
                "--read",
                "mine",
                "--env",
                "A=2",
                "--",
                "true",
            ]),
            cwd,
        )
        .unwrap();
        assert_eq!(spec.workspace, dir.path().join("proj"));
        assert_eq!(spec.network, NetworkMode::None);
        assert_eq!(spec.lane, Lane::Fast);
        assert_eq!(spec.timeout, Some(Duration::from_secs(7)));
        assert_eq!(spec.read, [dir.path().join("data"), cwd.join("mine")]);
        assert_eq!(spec.env, ["A=1", "A=2"]);
        let spec = resolve(
            run_args(&[
                "--config",
                cfg.to_str().unwrap(),
                "--workspace",
                ".",
                "true",
            ]),
            cwd,
        )
        .unwrap();
        assert_eq!(spec.workspace, cwd.join("."));
    }

    #[test]
    fn published_ports_from_the_file_and_the_flags_add_up_and_imply_loopback() {
        use sandbox_core::Publish;
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("policy.toml");
        std::fs::write(&cfg, "publish = [8080, \"3000:13000\"]\n").unwrap();
        let cwd = Path::new("/here");
        let args = |extra: &[&str]| {
            let mut a = vec!["--config", cfg.to_str().unwrap()];
            a.extend_from_slice(extra);
            a.push("true");
            run_args(&a)
        };
        let spec = resolve(args(&["--publish", "5173"]), cwd).unwrap();
        let p = |port, host_port| Publish { port, host_port };
        assert_eq!(
            spec.publish,
            [p(8080, None), p(3000, Some(13000)), p(5173, None)]
        );
        assert_eq!(spec.network, NetworkMode::Loopback);
        for bad in ["0", "70000", "80:0", "x", "80:"] {
            assert!(
                Cli::try_parse_from(["sandbox", "run", "--publish", bad, "true"]).is_err(),
                "{bad}"
            );
        }
        std::fs::write(&cfg, "publish = [\"0:80\"]\n").unwrap();
        assert!(resolve(args(&[]), cwd).is_err());
    }

    #[test]
    fn secrets_from_the_file_and_the_flags_add_up_and_imply_the_proxy() {
        use sandbox_core::{Placement, SecretSource};
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("policy.toml");
        std::fs::write(
            &cfg,
            "upstream-ca = [\"corp.pem\"]\n[secrets]\nGH_TOKEN = [\"api.github.com\"]\n",
        )
        .unwrap();
        let cwd = Path::new("/here");
        let spec = resolve(
            run_args(&[
                "--config",
                cfg.to_str().unwrap(),
                "--secret",
                "KEY=file:/k@x.org,y.org:header=X-Api-Key",
                "--upstream-ca",
                "test-ca.pem",
                "true",
            ]),
            cwd,
        )
        .unwrap();
        assert_eq!(spec.network, NetworkMode::Proxy);
        // The file's paths against its directory, the flags' against the caller's.
        assert_eq!(
            spec.upstream_ca,
            [
                dir.path().join("corp.pem"),
                PathBuf::from("/here/test-ca.pem")
            ]
        );
        assert_eq!(spec.secrets.len(), 2);
        assert_eq!(spec.secrets[0].name, "GH_TOKEN");
        assert_eq!(spec.secrets[0].source, SecretSource::Env("GH_TOKEN".into()));
        assert_eq!(spec.secrets[0].hosts, ["api.github.com"]);
        assert_eq!(spec.secrets[1].source, SecretSource::File("/k".into()));
        assert_eq!(spec.secrets[1].hosts, ["x.org", "y.org"]);
        assert_eq!(
            spec.secrets[1].placement,
            Placement::Header("x-api-key".into())
        );
        let e = resolve(run_args(&["--secret", "GH_TOKEN", "true"]), cwd).unwrap_err();
        assert!(e.to_string().contains("needs its hosts"), "{e}");
        assert!(PolicyFile::parse("[secrets]\nGH = \"x.org\"").is_err());
    }

    #[test]
    fn the_upstream_proxy_comes_from_the_file_and_the_flag_overrides_it() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("policy.toml");
        std::fs::write(
            &cfg,
            "allow-hosts = [\"crates.io\"]\nupstream-proxy = \"http://corp:3128\"\n",
        )
        .unwrap();
        let cwd = Path::new("/here");
        let from_file =
            resolve(run_args(&["--config", cfg.to_str().unwrap(), "true"]), cwd).unwrap();
        assert_eq!(
            from_file.upstream_proxy.as_deref(),
            Some("http://corp:3128")
        );
        let opts = crate::run::policy_opts(&from_file, vec!["true".into()]).unwrap();
        assert_eq!(opts.upstream_proxy.as_deref(), Some("http://corp:3128"));
        let flag = resolve(
            run_args(&[
                "--config",
                cfg.to_str().unwrap(),
                "--upstream-proxy",
                "http://10.0.0.1:8080",
                "true",
            ]),
            cwd,
        )
        .unwrap();
        assert_eq!(flag.upstream_proxy.as_deref(), Some("http://10.0.0.1:8080"));
        // It implies nothing: without an allowlist the library refuses it.
        let alone = resolve(
            run_args(&["--upstream-proxy", "http://corp:3128", "true"]),
            cwd,
        )
        .unwrap();
        assert_eq!(alone.network, NetworkMode::None);
        assert!(PolicyFile::parse("upstream-proxy = [\"http://corp:3128\"]").is_err());
    }

    #[test]
    fn request_rules_from_the_file_and_the_flags_add_up_and_imply_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("policy.toml");
        std::fs::write(
            &cfg,
            "allow-requests = [\"GET https://api.github.com/repos/**\"]\n",
        )
        .unwrap();
        let spec = resolve(
            run_args(&[
                "--config",
                cfg.to_str().unwrap(),
                "--allow-request",
                "POST https://api.github.com/repos/o/r/issues",
                "true",
            ]),
            Path::new("/here"),
        )
        .unwrap();
        assert_eq!(
            spec.allow_requests,
            [
                "GET https://api.github.com/repos/**",
                "POST https://api.github.com/repos/o/r/issues"
            ]
        );
        assert_eq!(spec.network, NetworkMode::Proxy);
        let opts = crate::run::policy_opts(&spec, vec!["true".into()]).unwrap();
        assert_eq!(opts.allow_requests, spec.allow_requests);
    }

    #[test]
    fn allow_hosts_from_the_file_and_the_flags_add_up_and_imply_the_proxy() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("policy.toml");
        std::fs::write(&cfg, "allow-hosts = [\"crates.io\", \"*.crates.io\"]\n").unwrap();
        let cwd = Path::new("/here");
        let spec = resolve(
            run_args(&[
                "--config",
                cfg.to_str().unwrap(),
                "--allow-host",
                "pypi.org",
                "true",
            ]),
            cwd,
        )
        .unwrap();
        assert_eq!(spec.allow_hosts, ["crates.io", "*.crates.io", "pypi.org"]);
        assert_eq!(spec.network, NetworkMode::Proxy);
        // A mode named explicitly is kept (the library then refuses the mismatch).
        let spec = resolve(
            run_args(&["--network", "loopback", "--allow-host", "x.org", "true"]),
            cwd,
        )
        .unwrap();
        assert_eq!(spec.network, NetworkMode::Loopback);
        assert!(PolicyFile::parse("allow-hosts = \"crates.io\"").is_err());
    }

    #[test]
    fn defaults_are_auto_current_directory_no_network_strict() {
        let cwd = Path::new("/here");
        let spec = resolve(run_args(&["true"]), cwd).unwrap();
        assert_eq!(spec.backend, BackendArg::AUTO);
        assert_eq!(spec.workspace, cwd);
        assert_eq!(spec.network, NetworkMode::None);
        assert_eq!(spec.lane, Lane::Strict);
        assert!(!spec.snapshot && spec.image.is_none() && spec.timeout.is_none());
    }

    #[test]
    fn memory_is_mebibytes_and_overflow_is_an_error() {
        let spec = resolve(run_args(&["--memory", "3", "true"]), Path::new("/")).unwrap();
        assert_eq!(spec.memory_bytes, Some(Some(3 << 20)));
        let spec = resolve(run_args(&["--memory", "unlimited", "true"]), Path::new("/")).unwrap();
        assert_eq!(spec.memory_bytes, Some(None), "unlimited, said explicitly");
        let spec = resolve(run_args(&["true"]), Path::new("/")).unwrap();
        assert_eq!(spec.memory_bytes, None, "the library's default");
        let mut full = vec!["sandbox", "run", "--memory", "0", "true"];
        assert!(
            Cli::try_parse_from(full.drain(..)).is_err(),
            "0 MiB is refused"
        );
        let file: PolicyFile = toml::from_str("memory = \"unlimited\"").unwrap();
        assert_eq!(file.memory, Some(MemoryArg::Unlimited));
        let file: PolicyFile = toml::from_str("memory = 64").unwrap();
        assert_eq!(file.memory, Some(MemoryArg::MiB(64)));
        assert!(toml::from_str::<PolicyFile>("memory = \"lots\"").is_err());
        let e = resolve(
            run_args(&["--memory", &u64::MAX.to_string(), "true"]),
            Path::new("/"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("--memory"), "{e}");
    }
}
