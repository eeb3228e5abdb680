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

#[cfg(test)]
mod tests {
    use super::*;

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
