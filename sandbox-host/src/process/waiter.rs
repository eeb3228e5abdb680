//! The waiter (`waiter/main.rs`, built by core's build script): the init a process backend
//! runs inside its sandbox's pid namespace, or the child subreaper it runs where there is
//! none, which starts the command, reaps orphans, kills every descendant at the end and
//! hands the host the command's exact status (see the program's own docs).
//!
//! One program and one argument order for every backend that runs it: bwrap hands bwrap a
//! reader of it ([`readable`]), landlock's `strict` lane execs it from [`executable`].

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The waiter's executable, compiled for this target.
pub const WAITER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/waiter"));

/// What the waiter is told on its command line: `STATUS_FD READY_FD FLAGS NPROC PROXY
/// PROGRAM ARGV0 [ARGS...]` (the program's docs say what each means).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterArgs {
    /// The write end of the status pipe, as the waiter sees it.
    pub status: RawFd,
    /// The write end of the ready pipe, as the waiter sees it.
    pub ready: RawFd,
    /// `a`: confine abstract unix sockets with landlock; `p`: remove `PWD`; `s`: run the
    /// command in a landlock domain that cannot signal the waiter (where the waiter is a
    /// subreaper, not a pid namespace's init).
    pub flags: String,
    /// `RLIMIT_NPROC` to set inside.
    pub nproc: Option<u64>,
    /// Network mode `proxy`: the socket to send listeners on, and their ports.
    pub proxy: Option<(RawFd, Vec<u16>)>,
    /// The command's program, absolute.
    pub program: PathBuf,
    /// The command's whole argv, `argv[0]` first.
    pub argv: Vec<OsString>,
}

impl WaiterArgs {
    /// The arguments after the waiter's own `argv[0]`.
    pub fn to_args(&self) -> Vec<OsString> {
        let or_dash = |s: String| if s.is_empty() { "-".to_string() } else { s };
        let mut out: Vec<OsString> = vec![
            self.status.to_string().into(),
            self.ready.to_string().into(),
            or_dash(self.flags.clone()).into(),
            or_dash(self.nproc.map(|n| n.to_string()).unwrap_or_default()).into(),
            or_dash(
                self.proxy
                    .as_ref()
                    .map(|(fd, ports)| {
                        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
                        format!("{fd}:{}", ports.join(","))
                    })
                    .unwrap_or_default(),
            )
            .into(),
            self.program.clone().into(),
        ];
        out.extend(self.argv.iter().cloned());
        out
    }
}

/// One sealed, executable in-memory copy of the waiter for the whole process, close-on-exec:
/// a child execs it through `/proc/self/fd/N` (its exec opens the file before the
/// descriptor table drops close-on-exec descriptors), so neither the waiter nor the command
/// ever holds it. Sealed against writes, growth and shrinking before anyone can exec it: a
/// command of the same uid that reached it (`/proc/1/exe`, were the waiter dumpable) still
/// could not change what the next run's init is.
///
/// A kernel that refuses executable memfds (`vm.memfd_noexec = 2`) gets an error naming
/// it; nothing falls back.
pub fn executable() -> io::Result<BorrowedFd<'static>> {
    static SEALED: OnceLock<Result<OwnedFd, (io::ErrorKind, String)>> = OnceLock::new();
    match SEALED.get_or_init(|| sealed().map_err(|e| (e.kind(), e.to_string()))) {
        Ok(fd) => Ok(fd.as_fd()),
        Err((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
    }
}

/// A descriptor of its own on the sealed copy ([`executable`]), reading from the start: for
/// a launcher that reads the program from a descriptor (bwrap's `--ro-bind-data`). Its own
/// open file, so concurrent runs share no offset, and no run writes a copy of its own (1.4
/// MB: most of a millisecond of every bwrap run, measured in `bench/PROFILE.md` §16).
pub fn readable() -> io::Result<OwnedFd> {
    let fd = executable()?;
    rustix::fs::open(
        format!("/proc/self/fd/{}", fd.as_raw_fd()),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!(
                "cannot reopen the sandbox's init through /proc/self/fd ({e}); is /proc mounted?"
            ),
        )
    })
}

fn sealed() -> io::Result<OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    if WAITER.is_empty() {
        return Err(io::Error::other(
            "sandbox-core was built without its `waiter` feature",
        ));
    }
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // `MFD_EXEC` (Linux 6.3) asks for an executable memfd where `vm.memfd_noexec` would
    // make it non-executable by default; older kernels refuse the flag, and their memfds
    // are executable anyway.
    let fd = match rustix::fs::memfd_create("sandbox-waiter", flags | MemfdFlags::EXEC) {
        Err(rustix::io::Errno::INVAL) => rustix::fs::memfd_create("sandbox-waiter", flags),
        r => r,
    }
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!(
                "cannot make an executable in-memory file for the sandbox's init ({e}); \
                 on a kernel with `vm.memfd_noexec = 2` set it to 0 or 1"
            ),
        )
    })?;
    let mut written = 0;
    while written < WAITER.len() {
        match rustix::io::write(&fd, &WAITER[written..]) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(n) => written += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Executable by any uid: a root host's command may exec it after leaving uid 0.
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o555))?;
    rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_keep_the_waiters_order() {
        let a = WaiterArgs {
            status: 5,
            ready: 6,
            flags: String::new(),
            nproc: Some(7),
            proxy: Some((8, vec![80, 443])),
            program: "/bin/echo".into(),
            argv: vec!["echo".into(), "hi".into()],
        };
        let got: Vec<String> = a
            .to_args()
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            ["5", "6", "-", "7", "8:80,443", "/bin/echo", "echo", "hi"]
        );
    }

    /// Each reader has an offset of its own, at the start: two runs reading at once each
    /// get the whole program.
    #[cfg(feature = "waiter")]
    #[test]
    fn each_reader_reads_the_whole_program_from_the_start() {
        use std::io::Read;
        let mut a = std::fs::File::from(readable().unwrap());
        let mut b = std::fs::File::from(readable().unwrap());
        let mut first = [0u8; 4096];
        a.read_exact(&mut first).unwrap();
        let mut whole = Vec::new();
        b.read_to_end(&mut whole).unwrap();
        assert_eq!(whole, WAITER);
        let mut rest = Vec::new();
        a.read_to_end(&mut rest).unwrap();
        assert_eq!([&first[..], &rest[..]].concat(), WAITER);
    }

    /// The shared copy cannot be written, grown or shrunk, and is the program itself.
    #[cfg(feature = "waiter")]
    #[test]
    fn the_shared_copy_is_sealed_and_whole() {
        let fd = executable().unwrap();
        let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        assert_eq!(std::fs::read(&path).unwrap(), WAITER);
        let e = std::fs::OpenOptions::new().write(true).open(&path);
        // Opening for write is refused by the mode (0555) but to root; writing through any
        // descriptor is refused by the seal.
        if let Ok(mut f) = e {
            use std::io::Write;
            assert!(f.write_all(b"x").is_err());
        }
        let seals = rustix::fs::fcntl_get_seals(fd).unwrap();
        assert!(seals.contains(rustix::fs::SealFlags::WRITE | rustix::fs::SealFlags::SEAL));
    }
}
