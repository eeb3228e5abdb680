//! The command line, as clap derive types. Values are checked here where clap can say so
//! in its own words (a bad number, an unknown mode); everything else is checked by the
//! library before anything runs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use sandbox::{Lane, NetworkMode};

/// The exit statuses of `sandbox run`, shown in every `--help`.
pub const RUN_EXIT_STATUS: &str = "\
Exit status of `sandbox run`:
  N      the program exited with status N
  128+N  the program was killed by signal N; also when `sandbox` itself got signal N
         (SIGINT, SIGTERM, SIGHUP) and killed the program's whole process tree, and 141
         (SIGPIPE) when the reader of the output went away and the tree was killed
  124    the --timeout fired and the program's whole process tree was killed
  125    the sandbox failed or refused: an option error or a lane refusal (nothing was
         run), a backend unavailable here, or a failure of the sandbox itself; one line
         on stderr gives the reason and the remedy
  126    the program exists but cannot be executed
  127    the program was not found";

const DOCTOR_EXIT_STATUS: &str = "\
Exit status of `sandbox doctor`:
  0      at least one confining backend works here (`sandbox run --backend auto` finds
         one on some lane)
  1      no confining backend works here; the report says why and what to do
  125    an option error";

#[cfg(feature = "mcp")]
const MCP_EXIT_STATUS: &str = "\
Exit status of `sandbox mcp`:
  0      the client disconnected (every running command was killed first)
  125    an option or policy error, or no backend here enforces the policy (nothing was
         served); one line on stderr gives the reason and the remedy";

const IMAGE_EXIT_STATUS: &str = "\
Exit status of `sandbox image`:
  0      the image is on the engine (built, or already there with the same contents)
  125    an option error, or the image could not be built; one line on stderr gives the
         reason and the remedy";

#[cfg(feature = "host")]
const CONTAINER_PROFILE_EXIT_STATUS: &str = "\
Exit status of `sandbox container-profile`:
  0      the profile was printed
  125    an option error (an unknown engine), or the profile could not be written";

const COMPLETIONS_EXIT_STATUS: &str = "\
Exit status of `sandbox completions`:
  0      the script was printed
  125    an option error (an unknown shell)";

const TOP_EXIT_STATUS: &str = "\
Exit status: see `sandbox run --help` for how the program's own status is passed on;
125 is always an error of `sandbox` itself (bad options, a sandbox that failed or refused).";

/// Confine an untrusted command with the strongest sandbox this host offers.
#[derive(Debug, Parser)]
#[command(
    name = "sandbox",
    version,
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true,
    after_help = TOP_EXIT_STATUS
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run PROGRAM in a sandbox: writes only to the workspace, no network, a scrubbed
    /// environment, the whole process tree killed at the end.
    ///
    /// Its output streams to ours as it is produced; its standard input is /dev/null.
    #[command(
        after_help = RUN_EXIT_STATUS,
        override_usage = "sandbox run [OPTIONS] [--] PROGRAM [ARGS]..."
    )]
    Run(Box<RunArgs>),
    /// Show, for every backend compiled in, whether it works here, what it enforces, and
    /// what to do where it does not work.
    #[command(after_help = DOCTOR_EXIT_STATUS)]
    Doctor(DoctorArgs),
    /// Serve the Model Context Protocol on stdin and stdout: an agent host (an MCP client)
    /// runs commands through the tool `run_command`, confined by the policy given here.
    ///
    /// The policy comes from these flags and `--config` only: a tool call can shorten the
    /// timeout and choose the command, its working directory inside the workspace and its
    /// standard input, nothing else. When the client disconnects, every running command's
    /// whole process tree is killed before the server exits.
    #[cfg(feature = "mcp")]
    #[command(after_help = MCP_EXIT_STATUS)]
    Mcp(Box<McpArgs>),
    /// Build a container image of this host's system directories (`/usr`, `/etc`, `/bin`,
    /// `/sbin`, `/lib*`), for `--image` with a backend that needs one, on its local engine
    /// and without a registry.
    ///
    /// Links are kept as links; nothing of any home directory goes in, nor any file or
    /// directory an unprivileged user may not read (`/etc/shadow`, host keys, private
    /// keys): the rule is the mode bits, not a list of names.
    #[command(after_help = IMAGE_EXIT_STATUS)]
    Image(ImageArgs),
    /// Print on stdout the seccomp profile (JSON) for running this command inside a
    /// container on the `strict` lane: the engine's default profile plus exactly the calls
    /// the sandbox makes to confine a command (namespaces, mounts), allowed without
    /// `CAP_SYS_ADMIN`. The command is still denied them by the sandbox's own filter.
    ///
    /// Docker: `docker run --security-opt seccomp=PROFILE --security-opt
    /// systempaths=unconfined ...`. Kubernetes: save it in the kubelet's seccomp directory
    /// (`/var/lib/kubelet/seccomp/sandbox.json`) and name it in the pod's
    /// `seccompProfile: {type: Localhost, localhostProfile: sandbox.json}`; see
    /// docs/cluster.md.
    #[cfg(feature = "host")]
    #[command(after_help = CONTAINER_PROFILE_EXIT_STATUS)]
    ContainerProfile(ContainerProfileArgs),
    /// Print the completion script for SHELL on stdout.
    #[command(after_help = COMPLETIONS_EXIT_STATUS)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `sandbox run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,

    /// Print the outcome as one JSON object on stdout after the run; the program's own
    /// output all goes to stderr
    #[arg(long)]
    pub json: bool,

    /// Run on a copy-on-write layer over the workspace, then: `ask` (show what changed and
    /// ask, on a terminal; without one nothing is applied), `apply` (write it into the
    /// workspace unless something escapes it or conflicts), `discard` (throw it away; what
    /// `--snapshot` means). Without it the command writes the workspace directly
    #[arg(long, value_enum, value_name = "WHAT")]
    pub changes: Option<ChangesArg>,

    /// With `--changes`: show the change set as a patch `git apply` takes (on a terminal,
    /// escaped and cut at 256 KiB, the complete patch kept in a file whose path is printed)
    #[arg(long)]
    pub changes_diff: bool,

    /// With `--changes apply` or `ask`: apply over files that changed in the workspace
    /// while the command ran (a conflict); never over a refusal (a link out of the
    /// workspace, a device, a set-id bit)
    #[arg(long)]
    pub changes_force: bool,

    /// Do not print the one-line summary of denied operations on stderr after the run
    /// (`--json` carries the whole list either way)
    #[arg(long, short = 'q')]
    pub quiet: bool,

    /// The program and its arguments, passed as an argv (never through a shell)
    #[arg(
        value_name = "PROGRAM",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<OsString>,
}

/// The policy: what a command may do, set by the host (flags and `--config`), shared by
/// `sandbox run` and `sandbox mcp` so both build it the same way.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// The backend: `auto` picks the strongest one that enforces the request here
    /// (never `none`) [default: auto]
    #[arg(long, value_name = "BACKEND", value_parser = BackendArg::value_parser())]
    pub backend: Option<BackendArg>,

    /// The one writable directory (relative paths are taken against the current
    /// directory) [default: the current directory]
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,

    /// Also let the command read PATH (repeatable)
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,

    /// Run with the caller's toolchain at PATH (`~/.rustup`, `~/.cargo/bin`, `~/.nvm`):
    /// read-only, credentials inside made unreadable, the caller's PATH passed, and
    /// RUSTUP_HOME or CARGO_HOME set when PATH is rustup's or cargo's home (repeatable)
    #[arg(long = "toolchain", value_name = "PATH")]
    pub toolchain: Vec<PathBuf>,

    /// Also let the command write PATH (repeatable)
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<PathBuf>,

    /// What the command may reach: nothing, a private loopback of its own, the hosts of
    /// an allowlist through a proxy, or the host's network [default: none, or proxy with
    /// --allow-host]
    #[arg(long, value_enum, value_name = "MODE")]
    pub network: Option<NetworkArg>,

    /// Let the command reach PATTERN through the sandbox's egress proxy (repeatable;
    /// implies `--network proxy`): `crates.io`, `*.githubusercontent.com` (subdomains
    /// only), `host:PORT` (default ports 80 and 443), an IP or CIDR written as such
    #[arg(long = "allow-host", value_name = "PATTERN")]
    pub allow_host: Vec<String>,

    /// Let the command use a secret it never holds (repeatable; implies `--network proxy`
    /// and allows the hosts): NAME@HOST[,HOST...] reads the value from your variable NAME,
    /// NAME=file:PATH@HOST from a file; the command's NAME is a placeholder the proxy
    /// replaces in the Authorization header of requests to those hosts (`:header=X` or
    /// `:query=P` after the hosts for another place) and refuses anywhere else
    #[arg(long = "secret", value_name = "NAME@HOST")]
    pub secret: Vec<String>,

    /// Also trust the authorities in FILE (PEM certificates) when the proxy verifies the
    /// servers behind hosts it terminates TLS for (repeatable; a corporate TLS inspection's
    /// authority); they join the run's certificate bundle too
    #[arg(long = "upstream-ca", value_name = "FILE")]
    pub upstream_ca: Vec<PathBuf>,

    /// Send every connection the sandbox's egress proxy makes through your own HTTP proxy
    /// at http://HOST:PORT (a corporate proxy), with CONNECT: the allowlist still decides
    /// first, the upstream proxy resolves the names; with `--network proxy` only (name the
    /// hosts with --allow-host), no credentials in the URL
    #[arg(long = "upstream-proxy", value_name = "URL")]
    pub upstream_proxy: Option<String>,

    /// Let only matching requests reach a host (repeatable; implies `--network proxy` and
    /// allows the host): 'METHOD[,METHOD] https://HOST/PATH' where `*` matches within a
    /// path segment and `**` across segments; the host's TLS is terminated, each request's
    /// path decoded once and judged, and an ambiguous path (`;`, `%2F`, `%25`, `\`) refused
    #[arg(long = "allow-request", value_name = "RULE")]
    pub allow_request: Vec<String>,

    /// Let the command's 127.0.0.1:PORT reach the host's 127.0.0.1:PORT, and nothing else of
    /// the host's (repeatable; with `--network loopback`, which it implies, or `proxy`)
    #[arg(
        long = "host-port",
        value_name = "PORT",
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub host_port: Vec<u16>,

    /// Let the host reach a server the command runs on its 127.0.0.1:PORT, at the host's
    /// 127.0.0.1:HOSTPORT (a free port when left out; printed when bound), without giving
    /// the command any way out (repeatable; with `--network loopback`, which it implies, or
    /// `proxy`)
    #[arg(long = "publish", value_name = "PORT[:HOSTPORT]")]
    pub publish: Vec<sandbox_core::Publish>,

    /// Pass the host's NAME, or set NAME=VALUE (repeatable); nothing else of the host's
    /// environment reaches the command
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<OsString>,

    /// Kill the whole process tree after SECONDS (decimals allowed) and exit 124
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,

    /// Cap each output stream at BYTES: the first half is shown as it is produced, the
    /// last part at the end, with a marker where bytes were dropped
    #[arg(
        long,
        value_name = "BYTES",
        value_parser = clap::value_parser!(u64).range(1..),
        allow_negative_numbers = true
    )]
    pub max_output: Option<u64>,

    /// Memory limit for the whole command, in MiB, or `unlimited`; without it every run
    /// gets the library's default (8 GiB), and every tmpfs the sandbox makes is sized
    /// inside the limit
    #[arg(long, value_name = "MB|unlimited", allow_negative_numbers = true)]
    pub memory: Option<MemoryArg>,

    /// The trust tier: `strict` (everything enforced exactly, in its own process world),
    /// `fast` (the same without process isolation), `trusted` (accepts over-grants, up to
    /// no confinement: the only lane `none` runs on) [default: strict]
    #[arg(long, value_enum, value_name = "NAME")]
    pub lane: Option<LaneArg>,

    /// The container image (docker backend only; with `auto` it selects docker)
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,

    /// Run against a throwaway copy of the workspace; the original is never touched (for
    /// `sandbox run`, the same as `--changes discard`)
    #[arg(long)]
    pub snapshot: bool,

    /// Let the command write the hooks and config of the repositories that exist in the
    /// workspace (`.git/hooks`, `.git/config`, `.git/config.worktree`, `.git/info`, the
    /// same for submodules and nested repositories), which are read-only by default: git
    /// runs what they name on the host
    #[arg(long)]
    pub writable_git: bool,

    /// A TOML policy file holding any of the options above; unknown keys are an error,
    /// flags override it, its relative paths are taken against the file's directory
    #[arg(long, value_name = "FILE", help = config_help())]
    pub config: Option<PathBuf>,
}

/// `--config`'s help, with the file's keys from the one list the file is checked against
/// ([`crate::config::KEYS`]).
fn config_help() -> String {
    format!(
        "A TOML policy file holding any of the options above (keys: {}); unknown keys are an \
         error, flags override it, its relative paths are taken against the file's directory",
        crate::config::KEYS.join(", ")
    )
}

/// `sandbox mcp`.
#[cfg(feature = "mcp")]
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,

    /// Run at most N commands at once; further calls wait for a free slot
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent: u32,
}

/// The tag `sandbox image --from-host` gives its image unless told otherwise.
pub const HOST_IMAGE_TAG: &str = "sandbox-host:latest";

/// `sandbox image`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// Make it of the host's system directories (the only source there is, for now)
    #[arg(long, required = true)]
    pub from_host: bool,

    /// The image's name
    #[arg(long, value_name = "NAME", default_value = HOST_IMAGE_TAG)]
    pub tag: String,
}

/// `sandbox container-profile`.
#[cfg(feature = "host")]
#[derive(Debug, Args)]
pub struct ContainerProfileArgs {
    /// The engine that runs the container (both take the same profile format: Kubernetes'
    /// `Localhost` profiles are read by containerd or CRI-O as Docker's are)
    #[arg(long, value_enum, value_name = "ENGINE", default_value_t = EngineArg::Docker)]
    pub engine: EngineArg,
}

/// `--engine`.
#[cfg(feature = "host")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EngineArg {
    /// Docker Engine (`docker run --security-opt seccomp=PROFILE`)
    Docker,
    /// A kubelet's `Localhost` profile
    Kubernetes,
}

/// `sandbox doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as one JSON object
    #[arg(long)]
    pub json: bool,

    /// Check the docker backend with this image (it needs one to run anything). Not with
    /// --prove, which builds its own probe image from this program
    #[arg(long, value_name = "IMAGE", conflicts_with = "prove")]
    pub image: Option<String>,

    /// Prove the confinement here: run the conformance suite's confinement cases against
    /// each available backend (or the one named); exit 0 only when every case each backend
    /// claims holds
    #[arg(long)]
    pub prove: bool,

    /// With --prove: only this backend
    #[arg(long, value_name = "NAME", requires = "prove")]
    pub backend: Option<String>,

    /// With --prove: run the cases on this lane (default: the strictest the backend allows)
    #[arg(long, value_name = "LANE", requires = "prove")]
    pub lane: Option<String>,
}

/// A backend name, as typed: `auto` or a name in the registry (compiled in or not: one
/// left out of this build is refused later with the cargo feature that brings it in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendArg(&'static str);

impl BackendArg {
    /// The strongest backend that enforces the request here.
    pub const AUTO: Self = Self(sandbox::select::AUTO);

    /// The name the library knows it by.
    pub fn name(self) -> &'static str {
        self.0
    }

    /// `auto` or a known backend's name.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s == sandbox::select::AUTO {
            return Ok(Self::AUTO);
        }
        sandbox::registry::known(s)
            .map(|k| Self(k.name))
            .ok_or_else(|| {
                format!(
                    "unknown backend `{s}` (expected {})",
                    Self::possible_values()
                        .map(|v| v.get_name().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }

    /// `auto`, then every known backend with its one-line summary: clap's value list,
    /// `--help` and the completions all come from the registry.
    fn possible_values() -> impl Iterator<Item = PossibleValue> {
        let auto = PossibleValue::new(sandbox::select::AUTO)
            .help("the strongest backend that enforces the request here");
        let known = sandbox::registry::KNOWN.iter().map(|k| {
            PossibleValue::new(k.name).help(match k.info {
                Some(info) => info.summary.to_string(),
                None => format!("not compiled in (cargo feature `{}`)", k.feature()),
            })
        });
        std::iter::once(auto).chain(known)
    }

    /// The parser for `--backend`.
    fn value_parser() -> impl TypedValueParser<Value = Self> {
        PossibleValuesParser::new(Self::possible_values()).try_map(|s| Self::parse(&s))
    }
}

impl<'de> Deserialize<'de> for BackendArg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A network mode, as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NetworkArg {
    /// No network at all.
    None,
    /// A private loopback; nothing of the host's.
    Loopback,
    /// The hosts of an allowlist (`--allow-host`), through a proxy; nothing else.
    Proxy,
    /// The host's network.
    Full,
}

impl From<NetworkArg> for NetworkMode {
    fn from(n: NetworkArg) -> Self {
        match n {
            NetworkArg::None => Self::None,
            NetworkArg::Loopback => Self::Loopback,
            NetworkArg::Full => Self::Full,
            NetworkArg::Proxy => Self::Proxy,
        }
    }
}

/// What to do with the command's changes, as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ChangesArg {
    /// Show the change set and ask whether to apply it (nothing applied without a
    /// terminal).
    Ask,
    /// Apply it unless something escapes the workspace or conflicts.
    Apply,
    /// Throw it away.
    Discard,
}

/// A lane, as typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LaneArg {
    /// Everything enforced exactly, plus process isolation.
    Strict,
    /// Everything enforced exactly, without process isolation.
    Fast,
    /// Accepts documented over-grants, up to no confinement.
    Trusted,
}

impl From<LaneArg> for Lane {
    fn from(l: LaneArg) -> Self {
        match l {
            LaneArg::Strict => Self::Strict,
            LaneArg::Fast => Self::Fast,
            LaneArg::Trusted => Self::Trusted,
        }
    }
}

/// Seconds as typed: a positive, finite number, decimals allowed.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    // NaN is refused here too: it is neither finite nor more than zero.
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("`{s}` must be more than zero seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("`{s}` is too many seconds"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn seconds_accept_decimals_and_refuse_nonsense() {
        assert_eq!(parse_seconds("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_seconds("30"), Ok(Duration::from_secs(30)));
        for bad in ["0", "-1", "abc", "NaN", "inf", "1e300"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn program_arguments_after_the_program_are_not_options() {
        let cli = Cli::try_parse_from([
            "sandbox",
            "run",
            "--network",
            "loopback",
            "--",
            "ls",
            "--network",
            "-la",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        let r = *r;
        assert_eq!(r.policy.network, Some(NetworkArg::Loopback));
        assert_eq!(r.command, ["ls", "--network", "-la"]);
        let cli = Cli::try_parse_from(["sandbox", "run", "echo", "--json"]).unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        let r = *r;
        assert!(!r.json);
        assert_eq!(r.command, ["echo", "--json"]);
    }

    #[test]
    fn every_subcommand_help_explains_exit_statuses() {
        let mut cmd = Cli::command();
        let mut subs = vec!["run", "doctor", "completions"];
        if cfg!(feature = "mcp") {
            subs.push("mcp");
        }
        for sub in subs {
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            assert!(help.contains("Exit status"), "{sub}: {help}");
        }
    }
}

/// `--memory` (and the policy file's `memory`): MiB, or `unlimited`, which must be said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryArg {
    /// A limit in MiB (at least 1).
    MiB(u64),
    /// No limit at all.
    Unlimited,
}

impl std::str::FromStr for MemoryArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "unlimited" {
            return Ok(Self::Unlimited);
        }
        match s.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Self::MiB(n)),
            _ => Err(format!(
                "{s:?} is not a number of MiB (at least 1) or `unlimited`"
            )),
        }
    }
}

impl<'de> Deserialize<'de> for MemoryArg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use crate::config::{Found, NumberOrText};
        const EXPECTED: &str = "a number of MiB or \"unlimited\"";
        match d.deserialize_any(NumberOrText(EXPECTED))? {
            Found::Whole(n) => n.to_string().parse(),
            Found::Text(t) => t.parse(),
            Found::Fraction(f) => {
                return Err(serde::de::Error::invalid_value(
                    serde::de::Unexpected::Float(f),
                    &EXPECTED,
                ))
            }
        }
        .map_err(serde::de::Error::custom)
    }
}
