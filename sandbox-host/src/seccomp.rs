//! The system-call filter shared by the bwrap and landlock backends: [`crate::syscalls`]'s
//! table as a BPF program.
//!
//! What is denied, and why, is [`crate::syscalls`]'s table; this module renders it to a
//! BPF program. Calls of a foreign architecture kill the process (the filter cannot judge
//! them), and calls through the x32 ABI fail with `EPERM`.
//!
//! # Build once
//!
//! A program depends only on the [`SyscallPolicy`] (four combinations), so it is compiled once
//! per policy per process and shared ([`SeccompProgram::cached`]): launches never rebuild it.
//!
//! # Cheap to install
//!
//! Installing a filter is not free: the kernel (5.11+) runs the program once per system-call
//! number to find the calls it always allows, and seccompiler's program tests the numbers
//! one after another, so that pass costs some 200 µs per install, in every sandboxed child.
//! A binary search over the filtered numbers ([`fast_path`]) runs first and allows every
//! other call of the native architecture in a handful of instructions; the numbers it finds
//! go on to seccompiler's program unchanged. It only ever allows calls that program also
//! allows, which a test checks instruction by instruction against every number.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op,
    SeccompCondition as Cond, SeccompFilter, SeccompRule, TargetArch,
};

use crate::sys::PreExec;
use crate::syscalls::{self, Rule, CREATING_FLAGS, NAMESPACE_FLAGS, SETID_BITS, TERMINAL_REQUESTS};
use sandbox_core::SandboxError;

pub use crate::syscalls::SyscallPolicy;

/// A compiled filter, ready to install in a child or to hand to bwrap.
#[derive(Debug)]
pub struct SeccompProgram {
    program: BpfProgram,
    bytes: Vec<u8>,
}

// The table's fall-back calls, answered `ENOSYS` by the program's head (a test holds
// them to the table). The same on every architecture since the tables were unified (5.x).
const SYS_CLONE3: i64 = 435;
const SYS_OPENAT2: i64 = 437;

/// The seccompiler architecture of this build; `NotSupported` on one the filter does not
/// know (x86-64, arm64 and riscv64 are).
pub fn target_arch() -> Result<TargetArch, SandboxError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(SandboxError::NotSupported {
            backend: "seccomp",
            feature: format!("a system-call filter on {}", std::env::consts::ARCH),
            remedy: "use a backend that does not filter system calls with this program \
                     (a container engine applies its own profile)"
                .into(),
        })
    }
}

fn cond(arg: u8, len: Len, op: Op, value: u64) -> Result<Cond, SandboxError> {
    Cond::new(arg, len, op, value).map_err(build_error)
}

fn rule(conds: Vec<Cond>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conds).map_err(build_error)
}

fn build_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::io(
        "building the seccomp filter",
        io::Error::other(e.to_string()),
    )
}

/// Rules matching a setuid or setgid bit in argument `arg` (a mode), alone or with
/// `extra` conditions (an `O_CREAT` in the flags).
fn setid_mode_rules(arg: u8, extra: &[Cond]) -> Result<Vec<SeccompRule>, SandboxError> {
    SETID_BITS
        .into_iter()
        .map(|bit| {
            let mut c = extra.to_vec();
            c.push(cond(arg, Len::Dword, Op::MaskedEq(bit), bit)?);
            rule(c)
        })
        .collect()
}

/// The seccompiler rules of one table entry (empty: always).
fn rules_of(r: Rule) -> Result<Vec<SeccompRule>, SandboxError> {
    Ok(match r {
        Rule::Always | Rule::FallBack => Vec::new(),
        Rule::SetidMode { mode } => setid_mode_rules(mode, &[])?,
        Rule::CreatingSetid { flags, mode } => {
            let mut v = Vec::new();
            for f in CREATING_FLAGS {
                v.extend(setid_mode_rules(
                    mode,
                    &[cond(flags, Len::Dword, Op::MaskedEq(f), f)?],
                )?);
            }
            v
        }
        Rule::NamespaceFlags { flags } => NAMESPACE_FLAGS
            .into_iter()
            .map(|f| rule(vec![cond(flags, Len::Qword, Op::MaskedEq(f), f)?]))
            .collect::<Result<_, _>>()?,
        // The low 32 bits only: the kernel ignores the high ones (CVE-2019-10063).
        Rule::TerminalInjection { request } => TERMINAL_REQUESTS
            .into_iter()
            .map(|req| rule(vec![cond(request, Len::Dword, Op::Eq, req)?]))
            .collect::<Result<_, _>>()?,
        Rule::NetworkSockets { domain } => vec![rule(vec![cond(
            domain,
            Len::Dword,
            Op::Ne,
            libc::AF_UNIX as u64,
        )?])?],
        Rule::MediatedSockets {
            domain,
            kind,
            protocol,
        } => {
            let mut v = vec![rule(vec![
                cond(domain, Len::Dword, Op::Ne, libc::AF_UNIX as u64)?,
                cond(domain, Len::Dword, Op::Ne, libc::AF_INET as u64)?,
                cond(domain, Len::Dword, Op::Ne, libc::AF_INET6 as u64)?,
            ])?];
            for family in [libc::AF_INET, libc::AF_INET6] {
                let inet = || cond(domain, Len::Dword, Op::Eq, family as u64);
                // The type's low four bits, `SOCK_STREAM` (1) alone allowed: 0, or any of
                // bits 1 to 3 set, is another type. The bits above are flags.
                v.push(rule(vec![
                    inet()?,
                    cond(kind, Len::Dword, Op::MaskedEq(0xf), 0)?,
                ])?);
                for bit in [0x2, 0x4, 0x8] {
                    v.push(rule(vec![
                        inet()?,
                        cond(kind, Len::Dword, Op::MaskedEq(bit), bit)?,
                    ])?);
                }
                v.push(rule(vec![
                    inet()?,
                    cond(protocol, Len::Dword, Op::Ne, 0)?,
                    cond(protocol, Len::Dword, Op::Ne, libc::IPPROTO_TCP as u64)?,
                ])?);
            }
            v
        }
        Rule::Mediated => Vec::new(),
        Rule::MediatedSend { flags, addr } => {
            let fastopen = libc::MSG_FASTOPEN as u64;
            let mut v = vec![rule(vec![cond(
                flags,
                Len::Dword,
                Op::MaskedEq(fastopen),
                fastopen,
            )?])?];
            if let Some(addr) = addr {
                v.push(rule(vec![cond(addr, Len::Qword, Op::Ne, 0)?])?);
            }
            v
        }
    })
}

/// The deny rules for `policy`: syscall number to the rules that match (empty: always).
/// The table's fall-back calls are not here: the program's head answers them `ENOSYS`.
pub fn deny_rules(policy: &SyscallPolicy) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    let mut rules = BTreeMap::new();
    for d in syscalls::denials(policy) {
        let Some(nr) = d.nr else { continue };
        if d.rule == Rule::FallBack {
            continue;
        }
        rules.insert(nr, rules_of(d.rule)?);
    }
    Ok(rules)
}

/// BPF_LD | BPF_W | BPF_ABS (the first two are zero).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JGE_K: u16 = 0x05 | 0x30;
const BPF_JA: u16 = 0x05;
const BPF_RET_K: u16 = 0x06;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The hand-written head of the program: `clone3`/`openat2` answer `ENOSYS` and x32 calls
/// `EPERM`, then control falls into seccompiler's program. BPF jumps are relative, so the
/// compiled program after it is unchanged; every path here ends in a denial, so running it
/// before the architecture check lets nothing through.
fn head() -> Vec<sock_filter> {
    let errno = |e: i32| libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA);
    let x32_bit: u32 = if cfg!(target_arch = "x86_64") {
        0x4000_0000
    } else {
        u32::MAX
    };
    vec![
        stmt(BPF_LD_W_ABS, 0),                     // 0: A = seccomp_data.nr
        jump(BPF_JEQ_K, SYS_CLONE3 as u32, 3, 0),  // 1: clone3  -> 5
        jump(BPF_JEQ_K, SYS_OPENAT2 as u32, 2, 0), // 2: openat2 -> 5
        jump(BPF_JGE_K, x32_bit, 2, 0),            // 3: x32     -> 6
        stmt(BPF_JA, 2),                           // 4:         -> 7
        stmt(BPF_RET_K, errno(libc::ENOSYS)),      // 5
        stmt(BPF_RET_K, errno(libc::EPERM)),       // 6
    ]
}

/// For a mediated door: the native `connect` notifies the supervisor, whatever its
/// arguments, ahead of the table (which does not name it) and of the fast path (which
/// would allow it). Any other call, or a foreign architecture's, falls through.
fn mediated_connect() -> Vec<sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, 4),                           // 0: A = seccomp_data.arch
        jump(BPF_JEQ_K, audit_arch(), 0, 3),             // 1: foreign -> 5
        stmt(BPF_LD_W_ABS, 0),                           // 2: A = seccomp_data.nr
        jump(BPF_JEQ_K, libc::SYS_connect as u32, 0, 1), // 3: other   -> 5
        stmt(BPF_RET_K, libc::SECCOMP_RET_USER_NOTIF),   // 4
    ]
}

/// `AUDIT_ARCH_*` of the target, as seccompiler's architecture check compares it.
fn audit_arch() -> u32 {
    if cfg!(target_arch = "x86_64") {
        0xC000_003E
    } else if cfg!(target_arch = "aarch64") {
        0xC000_00B7
    } else {
        0xC000_00F3 // riscv64
    }
}

/// A binary search that allows, in a few instructions, every native call whose number is
/// not in `filtered` (sorted), and falls through to the instruction after it otherwise
/// (and for a foreign architecture). Empty when a jump would not fit BPF's 8-bit offsets.
pub fn fast_path(filtered: &[u32]) -> Vec<sock_filter> {
    #[derive(Clone, Copy)]
    enum To {
        At(usize),
        Allow,
        Rest,
    }
    struct Ins {
        code: u16,
        k: u32,
        jt: To,
        jf: To,
    }
    fn emit(d: &[u32], out: &mut Vec<Ins>) {
        if d.len() <= 4 {
            for &nr in d {
                let next = out.len() + 1;
                out.push(Ins {
                    code: BPF_JEQ_K,
                    k: nr,
                    jt: To::Rest,
                    jf: To::At(next),
                });
            }
            out.push(Ins {
                code: BPF_JA,
                k: 0,
                jt: To::Allow,
                jf: To::Allow,
            });
            return;
        }
        let mid = d.len() / 2;
        let at = out.len();
        out.push(Ins {
            code: BPF_JGE_K,
            k: d[mid],
            jt: To::At(0),
            jf: To::At(at + 1),
        });
        emit(&d[..mid], out);
        out[at].jt = To::At(out.len());
        emit(&d[mid..], out);
    }
    let mut ins = vec![
        Ins {
            code: BPF_LD_W_ABS,
            k: 4, // seccomp_data.arch
            jt: To::Allow,
            jf: To::Allow,
        },
        Ins {
            code: BPF_JEQ_K,
            k: audit_arch(),
            jt: To::At(2),
            jf: To::Rest,
        },
        Ins {
            code: BPF_LD_W_ABS,
            k: 0, // seccomp_data.nr
            jt: To::Allow,
            jf: To::Allow,
        },
    ];
    emit(filtered, &mut ins);
    let allow = ins.len();
    let rest = allow + 1;
    let target = |t: To| match t {
        To::At(i) => i,
        To::Allow => allow,
        To::Rest => rest,
    };
    let mut out = Vec::with_capacity(rest);
    for (i, x) in ins.iter().enumerate() {
        let off = |t: To| target(t).checked_sub(i + 1);
        if x.code == BPF_JA {
            let Some(k) = off(x.jt) else {
                return Vec::new();
            };
            out.push(stmt(BPF_JA, k as u32));
        } else if x.code == BPF_LD_W_ABS {
            out.push(stmt(x.code, x.k));
        } else {
            match (off(x.jt).map(u8::try_from), off(x.jf).map(u8::try_from)) {
                (Some(Ok(jt)), Some(Ok(jf))) => out.push(jump(x.code, x.k, jt, jf)),
                _ => return Vec::new(),
            }
        }
    }
    out.push(stmt(BPF_RET_K, libc::SECCOMP_RET_ALLOW));
    out
}

/// `seccomp_data` as 32-bit words: the number, the architecture, the instruction pointer,
/// then each argument low word first (little-endian; the architectures here are).
fn seccomp_data(nr: u32, arch: u32, args: [u64; 6]) -> [u32; 16] {
    let mut d = [0u32; 16];
    d[0] = nr;
    d[1] = arch;
    for (i, a) in args.iter().enumerate() {
        d[4 + 2 * i] = *a as u32;
        d[5 + 2 * i] = (*a >> 32) as u32;
    }
    d
}

/// A classic-BPF interpreter for the instructions these programs use. Returns the action
/// and the number of instructions run; an instruction it does not know, or a jump out of
/// the program, is a kill (what the kernel's verifier would have refused).
fn interpret(prog: &[sock_filter], data: &[u32; 16]) -> (u32, usize) {
    let (mut a, mut pc, mut steps) = (0u32, 0usize, 0usize);
    while let Some(f) = prog.get(pc) {
        steps += 1;
        pc += 1;
        match f.code {
            0x20 => match data.get((f.k / 4) as usize) {
                Some(w) => a = *w,
                None => break,
            },
            0x54 => a &= f.k, // ALU | AND | K
            0x05 => pc += f.k as usize,
            0x06 => return (f.k, steps),
            0x15 | 0x25 | 0x35 | 0x45 => {
                let hit = match f.code {
                    0x15 => a == f.k,
                    0x25 => a > f.k,
                    0x35 => a >= f.k,
                    _ => a & f.k != 0,
                };
                pc += if hit { f.jt } else { f.jf } as usize;
            }
            _ => break,
        }
    }
    (libc::SECCOMP_RET_KILL_PROCESS, steps)
}

impl SeccompProgram {
    /// Compile the filter for `policy`.
    pub fn build(policy: &SyscallPolicy) -> Result<Self, SandboxError> {
        Self::build_with(policy, false)
    }

    /// Compile the filter for `policy`; with `notify`, the table's denials return
    /// `SECCOMP_RET_USER_NOTIF` instead of `EPERM`, for a supervisor that records each one
    /// and answers `EPERM` itself (the run's supervisor in core). Only the table's rule
    /// actions change: the head (`ENOSYS` fall-backs, `EPERM` for x32) and the kill of a
    /// foreign architecture stay as they are, and allowed calls never leave the kernel.
    /// A `mediated` policy's `connect` notifies whatever `notify` says: such a program is
    /// installed only with a supervisor to answer it
    /// ([`crate::process::Launch::mediation`]).
    pub fn build_with(policy: &SyscallPolicy, notify: bool) -> Result<Self, SandboxError> {
        let rules = deny_rules(policy)?;
        let filtered: Vec<u32> = rules.keys().map(|&nr| nr as u32).collect();
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            target_arch()?,
        )
        .map_err(build_error)?;
        let mut compiled: BpfProgram = filter.try_into().map_err(build_error)?;
        if notify {
            let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
            for f in compiled.iter_mut() {
                if f.code == BPF_RET_K && f.k == eperm {
                    f.k = libc::SECCOMP_RET_USER_NOTIF;
                }
            }
        }
        let mut program = head();
        if policy.mediates() {
            program.extend(mediated_connect());
        }
        program.extend(fast_path(&filtered));
        program.extend(compiled);
        let bytes = program
            .iter()
            .flat_map(|f| {
                let mut b = Vec::with_capacity(8);
                b.extend_from_slice(&f.code.to_ne_bytes());
                b.push(f.jt);
                b.push(f.jf);
                b.extend_from_slice(&f.k.to_ne_bytes());
                b
            })
            .collect();
        Ok(Self { program, bytes })
    }

    /// The program for `policy`, compiled once per process.
    pub fn cached(policy: &SyscallPolicy) -> Result<Arc<Self>, SandboxError> {
        Self::cached_with(policy, false)
    }

    /// The program for `policy` and `notify` (see [`Self::build_with`]), compiled once per
    /// process.
    pub fn cached_with(policy: &SyscallPolicy, notify: bool) -> Result<Arc<Self>, SandboxError> {
        type Cache = Mutex<HashMap<(SyscallPolicy, bool), Arc<SeccompProgram>>>;
        static CACHE: OnceLock<Cache> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        if let Some(p) = cache
            .lock()
            .ok()
            .and_then(|c| c.get(&(*policy, notify)).cloned())
        {
            return Ok(p);
        }
        let p = Arc::new(Self::build_with(policy, notify)?);
        if let Ok(mut c) = cache.lock() {
            c.insert((*policy, notify), p.clone());
        }
        Ok(p)
    }

    /// The raw `struct sock_filter` array, as bwrap's `--seccomp FD` reads it.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The instructions.
    pub fn instructions(&self) -> &[sock_filter] {
        &self.program
    }

    /// What the program answers (`SECCOMP_RET_*`, with the errno in the low bits) to the
    /// native call `nr` with `args`, found by interpreting it as the kernel would: how a
    /// test compares this rendering of the table with another without installing it.
    pub fn decide(&self, nr: u32, args: [u64; 6]) -> u32 {
        interpret(&self.program, &seccomp_data(nr, audit_arch(), args)).0
    }

    /// A step for between fork and exec: sets `no_new_privs` and installs the filter.
    /// Install it last: it denies calls that earlier steps may need.
    pub fn install_step(self: &Arc<Self>) -> InstallSeccomp {
        InstallSeccomp(self.clone())
    }
}

/// Whether this kernel can notify a supervisor of a filtered call
/// (`SECCOMP_RET_USER_NOTIF`, Linux 5.0), asked once per process without installing
/// anything.
pub fn user_notification_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let action: u32 = libc::SECCOMP_RET_USER_NOTIF;
        // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 from the pointer, which is live.
        unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_GET_ACTION_AVAIL,
                0,
                &action as *const u32,
            ) == 0
        }
    })
}

/// Installs a notifying [`SeccompProgram`] (built with `notify`) in the child with
/// `SECCOMP_FILTER_FLAG_NEW_LISTENER`, and sends the listener to the host over `sock` (one
/// end of a socket pair made before the fork) for the run's supervisor in core to serve.
#[derive(Debug)]
pub struct InstallNotifying {
    program: Arc<SeccompProgram>,
    sock: std::os::fd::OwnedFd,
}

impl InstallNotifying {
    /// The step for `program` (built with `notify`), and the host's end of the socket pair
    /// it sends the listener on: what [`crate::process::Launch::seccomp_listener`] takes.
    pub fn pair(
        program: Arc<SeccompProgram>,
    ) -> Result<(Self, std::os::fd::OwnedFd), SandboxError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (host, child) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| SandboxError::io("making the seccomp listener's socket pair", e.into()))?;
        Ok((
            Self {
                program,
                sock: child,
            },
            host,
        ))
    }
}

// SAFETY: `prctl`, `seccomp`, `sendmsg` and `close` are plain system calls (`sendmsg` is
// listed async-signal-safe); the message and its control buffer live on the stack, the
// program was compiled before the fork and is kept alive by the Arc. Nothing allocates.
unsafe impl PreExec for InstallNotifying {
    fn name(&self) -> &'static str {
        "seccomp filter (notifying)"
    }

    fn pre_exec(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let prog = libc::sock_fprog {
            len: self.program.program.len() as u16,
            filter: self.program.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY (whole block): see the impl's comment; every pointer is to a live local.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            let listener = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &prog as *const libc::sock_fprog,
            );
            if listener < 0 {
                return Err(io::Error::last_os_error());
            }
            let listener = listener as libc::c_int;
            // From here the denied calls wait for an answer: the listener must reach the
            // host, and must not stay in the command's hands (it could answer its own
            // denials). It is close-on-exec, and closed here besides.
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            // Room for one descriptor's control message, aligned for `cmsghdr`.
            let mut control = [0u64; 4];
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), listener);
            let sent = libc::sendmsg(self.sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
            let err = io::Error::last_os_error();
            libc::close(listener);
            if sent != 1 {
                return Err(err);
            }
        }
        Ok(())
    }
}

/// Installs a [`SeccompProgram`] in the child; see [`SeccompProgram::install_step`].
#[derive(Debug)]
pub struct InstallSeccomp(Arc<SeccompProgram>);

// SAFETY: `install` is async-signal-safe (its docs), on a program compiled before the fork
// and kept alive by the Arc.
unsafe impl PreExec for InstallSeccomp {
    fn name(&self) -> &'static str {
        "seccomp filter"
    }

    fn pre_exec(&self) -> io::Result<()> {
        install(&self.0.program)
    }
}

/// Install `program` in the calling thread with seccompiler's `apply_filter`: sets
/// `no_new_privs` (required to install a filter without `CAP_SYS_ADMIN`; it also stops
/// setuid binaries from gaining privilege), then the filter.
///
/// Async-signal-safe, for between fork and exec: `apply_filter` makes two system calls on
/// the slice and builds no error that allocates (`Prctl` and `Seccomp` carry an OS errno,
/// passed on as it is; an empty program is `EINVAL`).
pub fn install(program: &[sock_filter]) -> io::Result<()> {
    seccompiler::apply_filter(program).map_err(|e| match e {
        seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
        _ => io::Error::from_raw_os_error(libc::EINVAL),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syscalls::{Denial, TABLE};
    use sandbox_core::NetworkMode;

    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    const ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;

    /// Arguments that trigger the denial of `d`, and arguments that do not (for a
    /// conditional rule).
    fn triggering(d: &Denial) -> ([u64; 6], Option<[u64; 6]>) {
        let mut on = [0u64; 6];
        let mut off = [0u64; 6];
        let conditional = match d.rule {
            Rule::Always | Rule::FallBack => false,
            Rule::SetidMode { mode } => {
                on[mode as usize] = 0o4755;
                off[mode as usize] = 0o755;
                true
            }
            Rule::CreatingSetid { flags, mode } => {
                on[flags as usize] = libc::O_CREAT as u64;
                on[mode as usize] = 0o2755;
                off[flags as usize] = libc::O_CREAT as u64;
                off[mode as usize] = 0o755;
                true
            }
            Rule::NamespaceFlags { flags } => {
                on[flags as usize] = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64;
                off[flags as usize] = libc::SIGCHLD as u64;
                true
            }
            Rule::TerminalInjection { request } => {
                // High bits set: the kernel ignores them, so must the filter.
                on[request as usize] = 0xFFFF_FFFF_0000_0000 | TERMINAL_REQUESTS[1];
                off[request as usize] = libc::TCGETS;
                true
            }
            Rule::NetworkSockets { domain } => {
                on[domain as usize] = libc::AF_NETLINK as u64;
                off[domain as usize] = libc::AF_UNIX as u64;
                true
            }
            Rule::MediatedSockets {
                domain,
                kind,
                protocol,
            } => {
                on[domain as usize] = libc::AF_INET6 as u64;
                on[kind as usize] = (libc::SOCK_DGRAM | libc::SOCK_CLOEXEC) as u64;
                off[domain as usize] = libc::AF_INET6 as u64;
                off[kind as usize] = (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64;
                off[protocol as usize] = libc::IPPROTO_TCP as u64;
                true
            }
            Rule::Mediated => false,
            Rule::MediatedSend { flags, addr } => {
                on[flags as usize] = (libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL) as u64;
                off[flags as usize] = libc::MSG_NOSIGNAL as u64;
                if let Some(a) = addr {
                    off[a as usize] = 0;
                }
                true
            }
        };
        (on, conditional.then_some(off))
    }

    /// The program is the table: each applicable entry denied as its rule says (and its
    /// benign arguments allowed), each entry of another policy and every other call of
    /// the architecture allowed.
    #[test]
    fn the_program_renders_the_table_exactly() {
        for pol in policies() {
            {
                let p = SeccompProgram::build(&pol).unwrap();
                for d in TABLE {
                    let Some(nr) = d.nr else { continue };
                    // Another entry for the same call that applies here decides instead.
                    if !d.rule.applies(&pol) && syscalls::denials(&pol).any(|o| o.nr == d.nr) {
                        continue;
                    }
                    let nr = nr as u32;
                    let (on, off) = triggering(d);
                    let want = match d.rule {
                        _ if !d.rule.applies(&pol) => libc::SECCOMP_RET_ALLOW,
                        Rule::FallBack => ENOSYS,
                        _ => EPERM,
                    };
                    assert_eq!(p.decide(nr, on), want, "{} under {pol:?}", d.name);
                    if let Some(off) = off {
                        assert_eq!(
                            p.decide(nr, off),
                            libc::SECCOMP_RET_ALLOW,
                            "{} with harmless arguments",
                            d.name
                        );
                    }
                }
                #[cfg(target_arch = "x86_64")]
                for name in crate::syscalls::X86_64_NAMES {
                    if syscalls::denials(&pol).any(|d| d.name == *name)
                        || (pol.mediates() && *name == "connect")
                    {
                        continue;
                    }
                    let nr = crate::syscalls::x86_64_number(name).unwrap();
                    assert_eq!(
                        p.decide(nr, [0; 6]),
                        libc::SECCOMP_RET_ALLOW,
                        "{name} ({nr}) is not in the table but the program denies it"
                    );
                }
            }
        }
    }

    #[test]
    fn the_head_answers_exactly_the_tables_fall_back_calls() {
        let fall_back: Vec<i64> = TABLE
            .iter()
            .filter(|d| d.rule == Rule::FallBack)
            .filter_map(|d| d.nr)
            .collect();
        assert_eq!(fall_back, [SYS_CLONE3, SYS_OPENAT2]);
    }

    fn policy(network: NetworkMode) -> SyscallPolicy {
        SyscallPolicy {
            network,
            mediated: false,
        }
    }

    /// Every policy a backend builds: each network mode, and `proxy` with a mediated door.
    fn policies() -> Vec<SyscallPolicy> {
        let mut all: Vec<_> = [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full]
            .into_iter()
            .map(policy)
            .collect();
        all.push(SyscallPolicy {
            network: NetworkMode::Proxy,
            mediated: true,
        });
        all
    }

    /// A mediated door's `connect` notifies the supervisor, plain or notifying program
    /// alike, and only the native architecture's: every other call decides as without.
    #[test]
    fn a_mediated_door_notifies_connect_alone() {
        let mediated = policies().pop().unwrap();
        let plain = SeccompProgram::build(&policy(NetworkMode::Proxy)).unwrap();
        for notify in [false, true] {
            let p = SeccompProgram::build_with(&mediated, notify).unwrap();
            let connect = libc::SYS_connect as u32;
            assert_eq!(
                p.decide(connect, [3, 0x1000, 16, 0, 0, 0]),
                libc::SECCOMP_RET_USER_NOTIF
            );
            let foreign = interpret(
                p.instructions(),
                &seccomp_data(connect, 0x4000_0003, [0; 6]),
            )
            .0;
            assert_eq!(foreign, libc::SECCOMP_RET_KILL_PROCESS);
            for nr in 0..460u32 {
                if nr == connect || syscalls::denials(&mediated).any(|d| d.nr == Some(nr as i64)) {
                    continue;
                }
                if !notify {
                    assert_eq!(p.decide(nr, [0; 6]), plain.decide(nr, [0; 6]), "call {nr}");
                }
            }
        }
        // What the mediated rules refuse, and what they leave to the supervisor.
        let p = SeccompProgram::build(&mediated).unwrap();
        let socket = |d: i32, t: i32, pr: i32| {
            p.decide(
                libc::SYS_socket as u32,
                [d as u64, t as u64, pr as u64, 0, 0, 0],
            )
        };
        let nb = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        assert_eq!(
            socket(libc::AF_INET, libc::SOCK_STREAM | nb, 0),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            socket(libc::AF_INET6, libc::SOCK_STREAM, libc::IPPROTO_TCP),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(
            socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0),
            libc::SECCOMP_RET_ALLOW
        );
        for (d, t, pr) in [
            (libc::AF_INET, libc::SOCK_DGRAM, 0),
            (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
            (libc::AF_INET6, libc::SOCK_SEQPACKET, 0),
            (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP),
            (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
            (libc::AF_NETLINK, libc::SOCK_RAW, 0),
            (libc::AF_PACKET, libc::SOCK_RAW, 0),
            (libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        ] {
            assert_eq!(socket(d, t, pr), EPERM, "socket({d}, {t}, {pr})");
        }
        assert_eq!(
            p.decide(libc::SYS_listen as u32, [3, 16, 0, 0, 0, 0]),
            EPERM
        );
        let sendto = |flags: i32, addr: u64| {
            p.decide(
                libc::SYS_sendto as u32,
                [3, 0x1000, 10, flags as u64, addr, 16],
            )
        };
        assert_eq!(sendto(libc::MSG_NOSIGNAL, 0), libc::SECCOMP_RET_ALLOW);
        assert_eq!(sendto(0, 0x2000), EPERM);
        assert_eq!(sendto(libc::MSG_FASTOPEN, 0), EPERM);
        let sendmsg =
            |flags: i32| p.decide(libc::SYS_sendmsg as u32, [3, 0x1000, flags as u64, 0, 0, 0]);
        assert_eq!(sendmsg(libc::MSG_NOSIGNAL), libc::SECCOMP_RET_ALLOW);
        assert_eq!(sendmsg(libc::MSG_FASTOPEN), EPERM);
    }

    #[test]
    fn every_policy_compiles_and_bytes_match_instructions() {
        for pol in policies() {
            let p = SeccompProgram::build(&pol).unwrap();
            assert_eq!(p.as_bytes().len(), p.instructions().len() * 8);
            assert!(p.instructions().len() < 4096, "BPF_MAXINSNS");
        }
    }

    #[test]
    fn sockets_are_filtered_only_without_network() {
        let none = deny_rules(&policy(NetworkMode::None)).unwrap();
        let full = deny_rules(&policy(NetworkMode::Full)).unwrap();
        assert!(none.contains_key(&libc::SYS_socket));
        assert!(!full.contains_key(&libc::SYS_socket));
    }

    #[test]
    fn sessions_are_never_denied() {
        for net in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
            let r = deny_rules(&policy(net)).unwrap();
            assert!(!r.contains_key(&libc::SYS_setsid) && !r.contains_key(&libc::SYS_setpgid));
        }
    }

    #[test]
    fn the_dangerous_calls_are_always_denied() {
        let r = deny_rules(&policy(NetworkMode::Full)).unwrap();
        for nr in [
            libc::SYS_ptrace,
            libc::SYS_mount,
            libc::SYS_unshare,
            libc::SYS_keyctl,
            libc::SYS_bpf,
            libc::SYS_io_uring_setup,
            libc::SYS_open_by_handle_at,
            libc::SYS_ioctl,
            libc::SYS_fchmodat,
        ] {
            assert!(r.contains_key(&nr), "{nr}");
        }
    }

    fn data(nr: u32, arch: u32, args: [u64; 6]) -> [u32; 16] {
        seccomp_data(nr, arch, args)
    }

    #[test]
    fn the_fast_path_changes_no_decision_and_shortens_allowed_calls() {
        let arg_sets: [[u64; 6]; 7] = [
            [0; 6],
            [u64::MAX; 6],
            [libc::AF_INET as u64, 1, 0, 0, 0, 0],
            [libc::AF_UNIX as u64, 1, 0, 0, 0, 0],
            [0, TERMINAL_REQUESTS[0], 0o100, 0o4755, 0, 0],
            [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0],
            [0, 0o4755, 0o2755, 0o100, 0, 0],
        ];
        let foreign = 0x4000_0003; // AUDIT_ARCH_I386
        for net in [NetworkMode::None, NetworkMode::Loopback, NetworkMode::Full] {
            {
                let pol = policy(net);
                let with = SeccompProgram::build(&pol).unwrap();
                let rules = deny_rules(&pol).unwrap();
                let filtered: Vec<u32> = rules.keys().map(|&n| n as u32).collect();
                let fast = fast_path(&filtered);
                assert!(!fast.is_empty(), "the fast path fits");
                // The same program without it.
                let mut without = head();
                without.extend_from_slice(&with.instructions()[head().len() + fast.len()..]);
                let nrs = (0..600u32).chain((0..600).map(|n| 0x4000_0000 | n));
                for nr in nrs {
                    for arch in [audit_arch(), foreign] {
                        for args in arg_sets {
                            let d = data(nr, arch, args);
                            let (a, steps) = interpret(with.instructions(), &d);
                            let (b, _) = interpret(&without, &d);
                            assert_eq!(a, b, "nr {nr} arch {arch:#x} args {args:?}");
                            if arch == audit_arch()
                                && nr < 0x4000_0000
                                && !filtered.contains(&nr)
                                && nr != SYS_CLONE3 as u32
                                && nr != SYS_OPENAT2 as u32
                            {
                                assert_eq!(a, libc::SECCOMP_RET_ALLOW);
                                assert!(steps <= 25, "nr {nr}: {steps} steps");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The notifying program differs from the plain one exactly where the plain one answers
    /// a table denial `EPERM`: there it notifies. Everything else (allowed calls, the
    /// `ENOSYS` fall-backs, x32's `EPERM`, the kill of a foreign architecture) is identical.
    #[test]
    fn notifying_program_notifies_exactly_the_table_denials() {
        for pol in policies() {
            let plain = SeccompProgram::build(&pol).unwrap();
            let notify = SeccompProgram::build_with(&pol, true).unwrap();
            let mut notified = 0;
            for d in syscalls::denials(&pol) {
                let Some(nr) = d.nr else { continue };
                let (on, off) = triggering(d);
                let (p, n) = (plain.decide(nr as u32, on), notify.decide(nr as u32, on));
                if d.rule == Rule::FallBack {
                    assert_eq!((p, n), (ENOSYS, ENOSYS), "{}", d.name);
                } else {
                    assert_eq!(p, EPERM, "{}", d.name);
                    assert_eq!(n, libc::SECCOMP_RET_USER_NOTIF, "{}", d.name);
                    notified += 1;
                }
                if let Some(off) = off {
                    assert_eq!(
                        notify.decide(nr as u32, off),
                        libc::SECCOMP_RET_ALLOW,
                        "{}",
                        d.name
                    );
                }
            }
            assert!(notified > 10);
            for nr in 0..460u32 {
                let (p, n) = (plain.decide(nr, [0; 6]), notify.decide(nr, [0; 6]));
                if p != EPERM && p != libc::SECCOMP_RET_USER_NOTIF {
                    assert_eq!(p, n, "call {nr}");
                }
            }
            if cfg!(target_arch = "x86_64") {
                // x32 calls: still EPERM, never a notification.
                let x32 = 0x4000_0000 | libc::SYS_ptrace as u32;
                assert_eq!(notify.decide(x32, [0; 6]), EPERM);
            }
            // A foreign architecture is still killed.
            let foreign = interpret(notify.instructions(), &seccomp_data(0, 0x4000_0003, [0; 6])).0;
            assert_eq!(foreign, libc::SECCOMP_RET_KILL_PROCESS);
        }
    }

    #[test]
    fn cached_programs_are_shared() {
        let a = SeccompProgram::cached(&policy(NetworkMode::None)).unwrap();
        let b = SeccompProgram::cached(&policy(NetworkMode::None)).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
    }

    /// Installs the filter in a forked child (the only way to test an irreversible
    /// restriction without touching the test process) and checks each class from inside.
    #[test]
    fn installed_filter_denies_with_eperm_and_allows_the_rest() {
        let p = SeccompProgram::cached(&policy(NetworkMode::None)).unwrap();
        let step = p.install_step();
        // SAFETY: the child makes only raw system calls and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code: i32 = unsafe {
                let errno = || *libc::__errno_location();
                let mut bad = 0;
                if step.pre_exec().is_err() {
                    libc::_exit(100);
                }
                // Denied with EPERM.
                if libc::unshare(libc::CLONE_NEWUSER) != -1 || errno() != libc::EPERM {
                    bad |= 1;
                }
                if libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) != -1 || errno() != libc::EPERM
                {
                    bad |= 2;
                }
                // Allowed: a session of its own (this forked child leads no group).
                if libc::setsid() == -1 {
                    bad |= 4;
                }
                if libc::ioctl(0, 0xFFFF_FFFF_0000_5412u64 as _, 0) != -1 || errno() != libc::EPERM
                {
                    bad |= 8;
                }
                if libc::fchmod(0, 0o4755) != -1 || errno() != libc::EPERM {
                    bad |= 16;
                }
                if libc::syscall(SYS_CLONE3, 0, 0) != -1 || errno() != libc::ENOSYS {
                    bad |= 32;
                }
                let dot = c".".as_ptr();
                if libc::openat(libc::AT_FDCWD, dot, libc::O_TMPFILE | libc::O_RDWR, 0o4755) != -1
                    || errno() != libc::EPERM
                {
                    bad |= 256;
                }
                if libc::syscall(
                    libc::SYS_clone,
                    (libc::CLONE_NEWNET | libc::SIGCHLD) as libc::c_ulong,
                    0,
                    0,
                    0,
                    0,
                ) != -1
                    || errno() != libc::EPERM
                {
                    bad |= 512;
                }
                // The three calls the docker profile denied and this program did not,
                // before both were rendered from one table.
                let me = libc::getpid();
                if libc::syscall(libc::SYS_kcmp, me, me, 0, 0, 0) != -1 || errno() != libc::EPERM {
                    bad |= 1024;
                }
                if libc::syscall(libc::SYS_quotactl_fd, 0, 0, 0, 0) != -1 || errno() != libc::EPERM
                {
                    bad |= 2048;
                }
                if libc::syscall(467, libc::AT_FDCWD, dot, 0, 0, 0) != -1 || errno() != libc::EPERM
                {
                    bad |= 4096;
                }
                // Allowed.
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                if fd < 0 {
                    bad |= 64;
                }
                if libc::getpid() <= 0 {
                    bad |= 128;
                }
                bad
            };
            // An exit status has 8 bits: report the first failed check's bit number + 1.
            let status = if code == 0 {
                0
            } else {
                1 + code.trailing_zeros() as i32
            };
            unsafe { libc::_exit(status) };
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "child died: {status}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            0,
            "the first failed check is bit {} - 1",
            libc::WEXITSTATUS(status)
        );
    }
}
