//! Facts about the running kernel that more than one backend asks for.

use std::io;

/// The kernel's landlock ABI version (`landlock_create_ruleset` with
/// `LANDLOCK_CREATE_RULESET_VERSION`): at least 1 where landlock is on, else the errno
/// (`EOPNOTSUPP`: built in, not enabled at boot; `ENOSYS`: not built in). A backend that
/// confines with landlock asks which rights to request; one that only adds a rule where
/// the kernel has it (abstract unix sockets from ABI 6) asks whether to.
pub fn landlock_abi() -> io::Result<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version query reads no memory (null attributes, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    match u32::try_from(v) {
        Ok(abi) if abi > 0 => Ok(abi),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Whether the running kernel's release is at least `major.minor`, from
/// `/proc/sys/kernel/osrelease` (a release it cannot read or parse is not). For a feature
/// every kernel from a release on has unconditionally, so that asking needs no probe.
pub fn release_at_least(major: u32, minor: u32) -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|r| parse_release(&r))
        .is_some_and(|v| v >= (major, minor))
}

/// `6.18.44-fc-v1045` → `(6, 18)`.
fn parse_release(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_parse_to_major_and_minor() {
        assert_eq!(parse_release("6.18.44-fc-v1045\n"), Some((6, 18)));
        assert_eq!(parse_release("5.14.0-362.el9.x86_64"), Some((5, 14)));
        assert_eq!(parse_release("6.1-rc3"), Some((6, 1)));
        assert_eq!(parse_release("6"), None);
        assert_eq!(parse_release("x.y"), None);
        // The running kernel is the one this was built for, well past 3.0.
        assert!(release_at_least(3, 0));
        assert!(!release_at_least(u32::MAX, 0));
    }

    #[test]
    fn the_abi_is_positive_or_the_kernel_says_why_not() {
        match landlock_abi() {
            Ok(abi) => assert!(abi >= 1),
            Err(e) => assert!(
                matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)),
                "{e}"
            ),
        }
    }
}
