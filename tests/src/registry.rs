//! The list of cases, what each requires, and how one is judged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sandbox_core::Capability;

use crate::context::{Context, Failure, Mode};

/// What a case function returns.
pub type CaseFuture = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send>>;

/// A case function.
pub type CaseFn = fn(Arc<Context>) -> CaseFuture;

/// Whether a case applies to a capability; `Err` carries the reason it is skipped.
pub type Requirement = fn(&Capability) -> Result<(), String>;

/// A case longer than this is failed (and its sandboxes dropped, which kills them).
const CASE_LIMIT: Duration = Duration::from_secs(600);

/// One registered case.
#[derive(Clone, Copy)]
pub struct Case {
    /// The area (`api`, `fs`, `net`, ...).
    pub area: &'static str,
    /// The case's name within its area.
    pub name: &'static str,
    /// When it applies.
    pub requires: Requirement,
    /// It checks a restriction the unconfined `none` backend does not provide, so it must
    /// fail against `none` (checked by `SANDBOX_VALIDATE=1`).
    pub confinement: bool,
    /// The case.
    pub run: CaseFn,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.full_name())
            .field("confinement", &self.confinement)
            .finish()
    }
}

impl Case {
    /// `conformance::<area>::<name>`.
    pub fn full_name(&self) -> String {
        format!("conformance::{}::{}", self.area, self.name)
    }
}

/// The verdict on one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Passed (in validation: failed at its confinement check, as it must); with a note.
    Pass(Option<String>),
    /// Failed, with why.
    Fail(String),
    /// Does not apply, with why.
    Skip(String),
}

/// Requirements, one function per capability claim, each saying why a case is skipped.
pub mod require {
    use sandbox_core::{Capability, Enforcement};

    fn exact(what: &str, e: Enforcement) -> Result<(), String> {
        match e {
            Enforcement::Exact => Ok(()),
            Enforcement::OverGrant(gives) => Err(format!(
                "the backend can only over-grant {what} (it gives {gives})"
            )),
            Enforcement::Unsupported => Err(format!("the backend does not provide {what}")),
        }
    }

    fn claim(flag: bool, what: &str) -> Result<(), String> {
        if flag {
            Ok(())
        } else {
            Err(format!("the backend does not claim {what}"))
        }
    }

    /// Every backend.
    pub fn always(_: &Capability) -> Result<(), String> {
        Ok(())
    }
    /// `confine_reads`.
    pub fn confine_reads(c: &Capability) -> Result<(), String> {
        claim(
            c.confine_reads,
            "read confinement (capability.confine_reads)",
        )
    }
    /// `confine_reads`, read as "host services stay out of reach": a backend that keeps the
    /// host's files unreadable must not hand over a host service that has no file (an
    /// abstract unix socket) either.
    pub fn host_services(c: &Capability) -> Result<(), String> {
        claim(
            c.confine_reads,
            "read confinement (capability.confine_reads), which includes the host's \
             services that have no file",
        )
    }
    /// `confine_writes`.
    pub fn confine_writes(c: &Capability) -> Result<(), String> {
        claim(
            c.confine_writes,
            "write confinement (capability.confine_writes)",
        )
    }
    /// `readonly_carveouts`.
    pub fn carveouts(c: &Capability) -> Result<(), String> {
        claim(
            c.readonly_carveouts,
            "read-only carve-outs (capability.readonly_carveouts)",
        )
    }
    /// Network `none`, exactly.
    pub fn network_none(c: &Capability) -> Result<(), String> {
        exact("network mode `none`", c.network_none)
    }
    /// `network_none`, exact, in a network namespace of its own
    /// (`network_state_private`): the host's or pod's `/proc/net` out of sight.
    pub fn network_state_private(c: &Capability) -> Result<(), String> {
        network_none(c)?;
        claim(
            c.network_state_private,
            "a network state of its own with `none` (capability.network_state_private: no \
             network namespace can be made here, so /proc/net shows the host's or pod's)",
        )
    }
    /// Network `loopback`, exactly.
    pub fn network_loopback(c: &Capability) -> Result<(), String> {
        exact("network mode `loopback`", c.network_loopback)
    }
    /// Network `full`, in any form.
    pub fn network_full(c: &Capability) -> Result<(), String> {
        match c.network_full {
            Enforcement::Unsupported => {
                Err("the backend does not provide network mode `full`".into())
            }
            _ => Ok(()),
        }
    }
    /// Network `full` in the host's own network namespace, where a listener on the host's
    /// loopback is the one address the suite may use to see that it is reached.
    pub fn network_full_host(c: &Capability) -> Result<(), String> {
        network_full(c)?;
        claim(
            c.full_network_is_host,
            "network `full` in the host's own network namespace \
             (capability.full_network_is_host); its bridge reaches the host only through a \
             private-range address, which this suite never touches",
        )
    }
    /// Network `proxy`, exactly.
    pub fn network_proxy(c: &Capability) -> Result<(), String> {
        exact("network mode `proxy`", c.network_proxy)
    }
    /// Network `proxy` through a door the supervisor mediates (no namespace).
    pub fn mediated_door(c: &Capability) -> Result<(), String> {
        network_proxy(c)?;
        if c.door == sandbox_core::DoorPlace::Mediated {
            Ok(())
        } else {
            Err(
                "the door is a network namespace of the command's own (capability.door): \
                 no connect of the command's goes through a supervisor to be judged"
                    .into(),
            )
        }
    }
    /// The sandbox can run each of `tools`: the host's programs, or, for a backend that
    /// runs an image, the suite's image holds them ([`crate::IMAGE_TOOLS`]).
    pub fn sandbox_runs(c: &Capability, tools: &[&str]) -> Result<(), String> {
        if c.host_programs {
            return Ok(());
        }
        let missing: Vec<&str> = tools
            .iter()
            .copied()
            .filter(|t| !crate::IMAGE_TOOLS.contains(t))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "the backend runs the suite's image (capability.host_programs is false), which \
             holds only the probe, {}: not {}",
            crate::IMAGE_TOOLS.join(", "),
            missing.join(", ")
        ))
    }
    /// `sh` and `setsid` runnable (the suite's image holds no `setsid`).
    pub fn sh_setsid(c: &Capability) -> Result<(), String> {
        sandbox_runs(c, &["sh", "setsid"])
    }
    /// `sh` and `python3` runnable.
    pub fn sh_python(c: &Capability) -> Result<(), String> {
        sandbox_runs(c, &["sh", "python3"])
    }
    /// `sh` and `git` runnable.
    pub fn sh_git(c: &Capability) -> Result<(), String> {
        sandbox_runs(c, &["sh", "git"])
    }
    /// `sh` and cargo runnable, with the caller's rustup toolchain readable here to grant
    /// (`toolchains` are host paths: a backend that runs an image has none to show).
    pub fn rust_toolchain(c: &Capability) -> Result<(), String> {
        sandbox_runs(c, &["sh", "cargo"])?;
        crate::cases::realworld::rust_toolchain()
            .map(|_| ())
            .ok_or_else(|| {
                "no rustup toolchain this user can read (RUSTUP_HOME or ~/.rustup, and cargo in \
             CARGO_HOME/bin or ~/.cargo/bin): nothing to grant with `toolchains`"
                    .into()
            })
    }
    /// `sh` and `python3` runnable, and a host python3 to make the wheel and import the
    /// installed package.
    pub fn python_venv(c: &Capability) -> Result<(), String> {
        sandbox_runs(c, &["sh", "python3"])?;
        host_has(&["python3"])
    }
    /// `sh`, `npm` and `node` runnable, and the host's `node` to require the package.
    pub fn sh_npm(c: &Capability) -> Result<(), String> {
        sandbox_runs(c, &["sh", "npm", "node"])?;
        host_has(&["npm", "node"])
    }
    fn host_has(tools: &[&str]) -> Result<(), String> {
        let missing: Vec<&str> = tools
            .iter()
            .copied()
            .filter(|t| crate::cases::realworld::host_tool(t).is_none())
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "the host has no {} on core's PATH",
                missing.join(", ")
            ))
        }
    }
    /// Network `proxy` exactly, with `sh` and `curl` runnable.
    pub fn proxy_tools(c: &Capability) -> Result<(), String> {
        network_proxy(c)?;
        sandbox_runs(c, &["sh", "curl"])
    }
    /// Network `proxy` exactly, with `sh` and `python3` runnable.
    pub fn proxy_python(c: &Capability) -> Result<(), String> {
        network_proxy(c)?;
        sandbox_runs(c, &["sh", "python3"])
    }
    /// Network `proxy` exactly, with `sh` and `git` runnable.
    pub fn proxy_git(c: &Capability) -> Result<(), String> {
        network_proxy(c)?;
        sandbox_runs(c, &["sh", "git"])
    }
    /// Secrets, with `sh` and `curl` runnable.
    pub fn secrets_tools(c: &Capability) -> Result<(), String> {
        claim(
            c.secrets,
            "secrets (capability.secrets: the proxy as the only way out, terminating TLS \
             for the secrets' hosts)",
        )?;
        sandbox_runs(c, &["sh", "curl"])
    }
    /// A backend that does not claim secrets (it must refuse them).
    pub fn no_secrets(c: &Capability) -> Result<(), String> {
        if c.secrets {
            Err("the backend claims secrets: the secrets cases run instead".into())
        } else {
            Ok(())
        }
    }
    /// Secrets, with `sh` and `git` runnable.
    pub fn secrets_git(c: &Capability) -> Result<(), String> {
        secrets_tools(c)?;
        sandbox_runs(c, &["git"])
    }
    /// Secrets, with `sh` and `python3` runnable.
    pub fn secrets_python(c: &Capability) -> Result<(), String> {
        secrets_tools(c)?;
        sandbox_runs(c, &["python3"])
    }
    /// `host_ports`.
    pub fn host_ports(c: &Capability) -> Result<(), String> {
        claim(c.host_ports, "host ports (capability.host_ports)")
    }
    /// `publish`.
    pub fn publish(c: &Capability) -> Result<(), String> {
        claim(c.publish, "published ports (capability.publish)")
    }
    /// `process_isolation`.
    pub fn process_isolation(c: &Capability) -> Result<(), String> {
        claim(
            c.process_isolation,
            "process isolation (capability.process_isolation)",
        )
    }
    /// `process_isolation` and `signal_status`: a command in its own process world still
    /// dies of the signals it sends itself.
    pub fn isolated_signals(c: &Capability) -> Result<(), String> {
        process_isolation(c)?;
        signal_status(c)
    }
    /// `process_isolation` and `reaps_orphans`: an init of the sandbox's own waits for
    /// orphans while the command runs.
    pub fn reaps_orphans(c: &Capability) -> Result<(), String> {
        process_isolation(c)?;
        claim(
            c.reaps_orphans,
            "an init that reaps orphans while the command runs (capability.reaps_orphans)",
        )
    }
    /// `memory_limit` and `confine_writes`: the writable tmpfs the command sees are the
    /// sandbox's own, so they can be sized inside the limit.
    pub fn memory_limit_confined(c: &Capability) -> Result<(), String> {
        memory_limit(c)?;
        claim(
            c.confine_writes,
            "confined writes, so that the writable tmpfs are the sandbox's own \
             (capability.confine_writes)",
        )
    }
    /// `process_limit`.
    pub fn process_limit(c: &Capability) -> Result<(), String> {
        claim(
            c.process_limit,
            "a process limit (capability.process_limit)",
        )
    }
    /// `memory_limit`.
    pub fn memory_limit(c: &Capability) -> Result<(), String> {
        claim(c.memory_limit, "a memory limit (capability.memory_limit)")
    }
    /// `open_files_limit`.
    pub fn open_files_limit(c: &Capability) -> Result<(), String> {
        claim(
            c.open_files_limit,
            "an open-files limit (capability.open_files_limit)",
        )
    }
    /// `confine_writes`, read as "core's syscall table applies": every backend that
    /// confines installs it (as a BPF program, or as an OCI profile its runtime applies).
    pub fn syscall_table(c: &Capability) -> Result<(), String> {
        claim(
            c.confine_writes,
            "confinement (capability.confine_writes), which comes with core's syscall table",
        )
    }
    /// `cpu_limit`.
    pub fn cpu_limit(c: &Capability) -> Result<(), String> {
        claim(c.cpu_limit, "a CPU-time limit (capability.cpu_limit)")
    }
    /// `signal_status`.
    pub fn signal_status(c: &Capability) -> Result<(), String> {
        claim(
            c.signal_status,
            "to report signals apart from exit codes (capability.signal_status)",
        )
    }
    /// `process_isolation` and `signal_status`: the command is in a pid namespace of its
    /// own, and the backend reports its own status (a helper of the backend's stands
    /// between).
    pub fn isolated_status(c: &Capability) -> Result<(), String> {
        process_isolation(c)?;
        signal_status(c)
    }
    /// `snapshot`.
    pub fn snapshot(c: &Capability) -> Result<(), String> {
        claim(c.snapshot, "snapshot runs (capability.snapshot)")
    }
    /// `sparse_snapshot`.
    pub fn sparse_snapshot(c: &Capability) -> Result<(), String> {
        snapshot(c)?;
        claim(
            c.sparse_snapshot,
            "to keep holes in its snapshot copy (capability.sparse_snapshot); it charges a \
             file's whole length against the copy's cap instead",
        )
    }
    /// `change_layer`: a copy-on-write layer with a change set to review.
    pub fn change_layer(c: &Capability) -> Result<(), String> {
        claim(
            c.change_layer.is_some(),
            "a copy-on-write layer with a change set (capability.change_layer)",
        )
    }
    /// `change_layer` and `readonly_carveouts`, with `sh` runnable: the sandbox's own run
    /// directories in a writable temp dir are carved out read-only.
    pub fn layer_dirs(c: &Capability) -> Result<(), String> {
        change_layer(c)?;
        claim(
            c.readonly_carveouts,
            "read-only carve-outs (capability.readonly_carveouts), which keep the run \
             directories in a writable temp dir read-only",
        )?;
        sandbox_runs(c, &["sh"])
    }
    /// `host_programs`: argv\[0\] is resolved on the host before anything runs.
    pub fn host_programs(c: &Capability) -> Result<(), String> {
        claim(
            c.host_programs,
            "to run the host's programs (capability.host_programs)",
        )
    }
    /// `reports_denials.syscall` and `.ptrace`: denied calls are listed by name.
    pub fn reports_syscall_denials(c: &Capability) -> Result<(), String> {
        claim(
            c.reports_denials.syscall && c.reports_denials.ptrace,
            "to report denied system calls (capability.reports_denials.syscall)",
        )
    }
    /// Network `proxy` exactly, and `reports_denials.network_connect`: the proxy's
    /// refusals are listed as denials.
    pub fn reports_proxy_denials(c: &Capability) -> Result<(), String> {
        network_proxy(c)?;
        claim(
            c.reports_denials.network_connect,
            "to report the connects its proxy refuses (capability.reports_denials.\
             network_connect)",
        )
    }
    /// The host runs as root and the backend claims to drop root's power.
    pub fn drops_host_root(c: &Capability) -> Result<(), String> {
        if !crate::context::is_root() {
            return Err("the host does not run as root, so there is no root power to drop".into());
        }
        claim(
            c.drops_host_root,
            "to drop host root's power (capability.drops_host_root)",
        )
    }
}

macro_rules! case {
    ($area:ident :: $name:ident, $req:path) => {
        case!(@make $area, $name, $req, false)
    };
    ($area:ident :: $name:ident, $req:path, confinement) => {
        case!(@make $area, $name, $req, true)
    };
    (@make $area:ident, $name:ident, $req:path, $conf:expr) => {
        Case {
            area: stringify!($area),
            name: stringify!($name),
            requires: $req,
            confinement: $conf,
            run: |ctx| Box::pin(crate::cases::$area::$name(ctx)),
        }
    };
}

/// Every case, in a stable order.
pub fn cases() -> Vec<Case> {
    use require::*;
    vec![
        case!(api::preflight, always),
        case!(api::exit_codes, always),
        case!(api::signal_status, signal_status),
        case!(api::argv_roundtrip, always),
        case!(api::argv0_as_given, always),
        case!(api::argv_arbitrary_bytes, always),
        case!(api::stdin, always),
        case!(api::timeout, always),
        case!(api::kill_during_wait, always),
        case!(api::kill_during_start, snapshot),
        case!(api::state_errors, always),
        case!(api::logs_while_running, always),
        case!(api::output_cap, always),
        case!(api::boxed_and_arc, always),
        case!(api::effective_policy, always),
        case!(env::scrubbed, always),
        case!(fs::cwd, always),
        case!(fs::workspace_write_persists, always),
        case!(fs::invalid_options, always),
        case!(fs::unknown_program, host_programs),
        case!(fs::capture_files, always),
        case!(fs::snapshot, snapshot),
        case!(hostwalk::swapper_race, always),
        case!(hostwalk::fifo_does_not_block, always),
        case!(hostwalk::sparse_stays_sparse, sparse_snapshot),
        case!(hostwalk::climbing_link_copied_as_link, snapshot),
        case!(fs::control_grants_refused, always),
        case!(fs::large_read_grant_runs_or_is_refused, always),
        case!(fs::cross_directory_rename_and_link, always),
        case!(fs::toolchain_credentials_hidden, always),
        case!(changes::untouched_until_applied, change_layer),
        case!(changes::lists_exactly_what_changed, change_layer),
        case!(changes::apply_matches_the_command_view, change_layer),
        case!(changes::apply_refuses_escapes, change_layer),
        case!(changes::apply_resolves_links_physically, change_layer),
        case!(changes::apply_is_all_or_nothing, change_layer),
        case!(changes::conflict_detected, change_layer),
        case!(
            changes::another_runs_layer_stays_read_only,
            layer_dirs,
            confinement
        ),
        case!(changes::own_layer_stays_read_only, layer_dirs, confinement),
        case!(fs::reads_outside_denied, confine_reads, confinement),
        case!(fs::writes_outside_denied, confine_writes, confinement),
        case!(fs::readonly_carveouts, carveouts, confinement),
        case!(fd::host_fds_not_inherited, always),
        case!(net::none_blocks_host, network_none, confinement),
        case!(
            net::none_hides_host_network,
            network_state_private,
            confinement
        ),
        case!(net::loopback_private, network_loopback, confinement),
        case!(net::full_reaches_host, network_full_host),
        case!(
            net::host_abstract_socket_unreachable,
            host_services,
            confinement
        ),
        case!(egress::bad_input_refused, always),
        case!(egress::allowed_name_reached, proxy_tools),
        case!(egress::denied_name_refused_and_recorded, proxy_tools),
        case!(egress::ip_literal_refused, proxy_tools, confinement),
        case!(egress::wildcard_rebound_to_loopback_refused, proxy_tools),
        case!(egress::wildcard_into_refused_forms_refused, proxy_tools),
        case!(egress::fronted_server_name_refused, proxy_tools),
        case!(egress::dns_from_inside_fails, network_proxy, confinement),
        case!(egress::direct_connect_fails, network_proxy, confinement),
        case!(egress::proxy_itself_refused, proxy_tools),
        case!(egress::bind_opens_no_way, network_proxy, confinement),
        case!(egress::raw_sockets_and_io_uring_refused, network_proxy),
        case!(
            egress::mediated_door_holds_against_side_ways,
            mediated_door,
            confinement
        ),
        case!(egress::socks5_works, proxy_tools),
        case!(egress::python_urllib_through_the_proxy, proxy_python),
        case!(egress::git_clone_over_http, proxy_git),
        case!(egress::pip_install_from_a_local_index, proxy_python),
        case!(egress::refused_flood_bounded, network_proxy),
        case!(egress::idle_flood_bounded, network_proxy),
        case!(egress::host_port_reaches_exactly_that_port, host_ports),
        case!(egress::publish_serves_the_host, publish),
        case!(secrets::refused_where_not_claimed, no_secrets),
        case!(secrets::bad_input_refused, secrets_tools, confinement),
        case!(
            secrets::placeholder_is_all_the_command_reads,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::upstream_receives_the_value,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::request_rule_passes_get_and_refuses_post,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::python_urllib_gets_the_value_injected,
            secrets_python,
            confinement
        ),
        case!(
            secrets::placeholder_to_another_host_refused,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::placeholder_in_a_body_refused,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::placeholder_in_another_header_refused,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::placeholder_over_plain_http_refused,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::echoing_endpoint_cannot_return_the_value,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::git_clone_with_a_token_it_never_sees,
            secrets_git,
            confinement
        ),
        case!(
            secrets::bundle_holds_the_runs_authority_and_no_key,
            secrets_tools,
            confinement
        ),
        case!(
            secrets::ambiguous_paths_refused_canonical_path_passes,
            secrets_python,
            confinement
        ),
        case!(
            secrets::request_smuggling_refused,
            secrets_python,
            confinement
        ),
        case!(
            secrets::fronted_host_header_refused,
            secrets_python,
            confinement
        ),
        case!(
            secrets::mismatched_server_name_refused,
            secrets_python,
            confinement
        ),
        case!(
            secrets::relayed_connect_refused,
            secrets_python,
            confinement
        ),
        case!(
            secrets::websocket_carries_the_value_h2c_refused,
            secrets_python,
            confinement
        ),
        case!(proc::no_survivor_after_wait, always),
        case!(proc::helper_survives_the_command, isolated_status),
        case!(proc::no_survivor_after_kill, always),
        case!(proc::no_survivor_after_timeout, always),
        case!(proc::setsid_daemon_gone_after_wait, always),
        case!(proc::setsid_daemon_gone_after_kill, always),
        case!(proc::setsid_program_runs, sh_setsid),
        case!(proc::python_new_session_runs, sh_python),
        case!(proc::git_commit_detaches_its_maintenance, sh_git),
        case!(
            proc::host_processes_invisible,
            process_isolation,
            confinement
        ),
        case!(proc::self_signals, isolated_signals),
        case!(proc::orphans_reaped, reaps_orphans),
        case!(realworld::cargo_build_offline, rust_toolchain),
        case!(realworld::python_venv_pip_install, python_venv),
        case!(realworld::git_init_add_commit, sh_git),
        case!(realworld::npm_install_local_tarball, sh_npm),
        case!(limits::process_cap, process_limit),
        case!(limits::memory, memory_limit),
        case!(
            limits::default_memory_bounds_the_host,
            memory_limit_confined,
            confinement
        ),
        case!(limits::open_files, open_files_limit),
        case!(limits::cpu_time, cpu_limit),
        case!(
            root::root_only_file_unreadable,
            drops_host_root,
            confinement
        ),
        case!(root::no_setuid_root_left, drops_host_root, confinement),
        case!(
            root::kernel_files_no_more_than_nobody,
            drops_host_root,
            confinement
        ),
        case!(kernel::surface_refused, syscall_table, confinement),
        case!(scale::concurrent_32, always),
        case!(denials::syscalls_reported, reports_syscall_denials),
        case!(denials::allowed_not_reported, always),
        case!(denials::proxy_refusals_reported, reports_proxy_denials),
        case!(denials::million_refusals_bounded, reports_syscall_denials),
    ]
}

/// Run `case` in `ctx` and judge it. In [`Mode::Validate`] the verdict is inverted: a
/// pass means the case failed at its confinement check.
pub async fn run_case(case: Case, ctx: Arc<Context>) -> Verdict {
    if let Err(reason) = (case.requires)(&ctx.claimed()) {
        return Verdict::Skip(reason);
    }
    let mode = ctx.mode();
    // Its own task: a panic is a failure of this case, not of the harness.
    let task = tokio::spawn(tokio::time::timeout(CASE_LIMIT, (case.run)(ctx)));
    let result = match task.await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(Failure::Broken(format!(
            "the case did not finish within {CASE_LIMIT:?}"
        ))),
        Err(e) => Err(Failure::Broken(format!("the case panicked: {e}"))),
    };
    match (mode, result) {
        (Mode::Conform, Ok(())) => Verdict::Pass(None),
        (Mode::Conform, Err(f)) => Verdict::Fail(f.to_string()),
        (Mode::Validate, Err(Failure::Violation(m))) => {
            Verdict::Pass(Some(format!("validated: fails against none: {m}")))
        }
        (Mode::Validate, Ok(())) => Verdict::Fail(
            "passed against the unconfined backend: this case cannot detect the missing \
             confinement"
                .into(),
        ),
        (Mode::Validate, Err(Failure::Broken(m))) => Verdict::Fail(format!(
            "did not reach its confinement check against none: {m}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_core::Enforcement;

    #[test]
    fn names_are_unique_and_well_formed() {
        let all = cases();
        let mut names: Vec<String> = all.iter().map(Case::full_name).collect();
        for n in &names {
            let parts: Vec<&str> = n.split("::").collect();
            assert_eq!(parts.len(), 3, "{n}");
            assert_eq!(parts[0], "conformance");
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }

    /// What `none` claims: no confinement at all.
    fn unconfined() -> Capability {
        Capability {
            network_none: Enforcement::OverGrant("the host's whole network"),
            network_loopback: Enforcement::OverGrant("the host's whole network"),
            network_full: Enforcement::Exact,
            tree_kill: true,
            memory_limit: true,
            cpu_limit: true,
            process_limit: true,
            open_files_limit: true,
            signal_status: true,
            snapshot: true,
            sparse_snapshot: true,
            change_layer: Some(sandbox_core::LayerMechanism::Overlay),
            host_programs: true,
            full_network_is_host: true,
            ..Capability::default()
        }
    }

    /// `unconfined()` that also offers the features `none` cannot (the proxy and host
    /// ports exactly, a record of denied calls): a case skipped even here needs
    /// confinement, not a feature.
    fn unconfined_with_features() -> Capability {
        Capability {
            network_proxy: Enforcement::Exact,
            host_ports: true,
            publish: true,
            reports_denials: sandbox_core::DenialKinds {
                file_read: true,
                file_write: true,
                exec: true,
                network_connect: true,
                network_bind: true,
                syscall: true,
                signal: true,
                ptrace: true,
            },
            ..unconfined()
        }
    }

    /// Cases of behaviour inside process isolation (a command's own signals, its orphans,
    /// its helper's survival): they need the isolation to mean anything, and are no
    /// confinement check of their own (`proc::host_processes_invisible` is that).
    const INSIDE_ISOLATION: &[&str] = &[
        "helper_survives_the_command",
        "self_signals",
        "orphans_reaped",
    ];

    #[test]
    fn confinement_cases_are_exactly_those_an_unconfined_backend_skips() {
        // Every confinement case is skipped by a backend that confines nothing (so
        // `--validate` must claim it to run it), and no other case is, unless it needs a
        // feature such a backend cannot offer exactly.
        let mut wrong = Vec::new();
        for case in cases() {
            let skipped = (case.requires)(&unconfined()).is_err();
            let skipped_with_features = (case.requires)(&unconfined_with_features()).is_err();
            if case.confinement && !skipped {
                wrong.push(format!(
                    "{}: a confinement case an unconfined backend would run",
                    case.full_name()
                ));
            }
            if !case.confinement && skipped_with_features && !INSIDE_ISOLATION.contains(&case.name)
            {
                wrong.push(format!(
                    "{}: skipped for an unconfined backend with every feature, but not marked \
                     confinement",
                    case.full_name()
                ));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn every_skip_has_a_reason() {
        for case in cases() {
            if let Err(reason) = (case.requires)(&Capability::default()) {
                assert!(reason.len() > 10, "{}: {reason:?}", case.full_name());
            }
        }
    }
}
