//! The warm pool's waiter: the program a pooled container starts with, under the engine's
//! init. It reads the command's argv from its standard input and execs it, so the command
//! takes the waiter's place as the init's only child, with the waiter's pid: the process
//! tree, signals, exit statuses and the tree kill are those of a container started with
//! the command itself.
//!
//! The argv arrives as: the bytes `SBXW`, a little-endian `u32` count, then for each
//! argument a little-endian `u32` length and its bytes. Standard input is read without a
//! buffer, exactly up to the end of the argv, so what follows is the command's own input.
//! An input that ends before a complete argv (the owner went away) ends the waiter with
//! status 0 and runs nothing; a malformed one ends it with status 125.
//!
//! Built by `build.rs` as a static executable (it runs in any image, `FROM scratch`
//! included) and bind-mounted read-only into the container; see `pool.rs`.

use std::ffi::OsString;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};

/// No argv is longer than the kernel accepts (`ARG_MAX` is far below this).
const MAX_TOTAL: usize = 64 << 20;

enum Bad {
    Ended,
    Malformed,
}

fn read_u32(input: &mut File) -> Result<u32, Bad> {
    let mut b = [0u8; 4];
    input.read_exact(&mut b).map_err(|e| match e.kind() {
        ErrorKind::UnexpectedEof => Bad::Ended,
        _ => Bad::Malformed,
    })?;
    Ok(u32::from_le_bytes(b))
}

fn read_argv(input: &mut File) -> Result<Vec<OsString>, Bad> {
    let mut magic = [0u8; 4];
    input.read_exact(&mut magic).map_err(|_| Bad::Ended)?;
    if &magic != b"SBXW" {
        return Err(Bad::Malformed);
    }
    let count = read_u32(input)? as usize;
    let mut total = 0usize;
    let mut argv = Vec::new();
    for _ in 0..count {
        let len = read_u32(input)? as usize;
        total = total.saturating_add(len);
        if total > MAX_TOTAL {
            return Err(Bad::Malformed);
        }
        let mut arg = vec![0u8; len];
        input.read_exact(&mut arg).map_err(|_| Bad::Ended)?;
        if arg.contains(&0) {
            return Err(Bad::Malformed);
        }
        argv.push(OsString::from_vec(arg));
    }
    if argv.is_empty() {
        return Err(Bad::Malformed);
    }
    Ok(argv)
}

fn main() {
    // SAFETY: descriptor 0 is this process's standard input, open for its whole life;
    // `ManuallyDrop` keeps it open, since it becomes the command's standard input.
    let mut input = ManuallyDrop::new(unsafe { File::from_raw_fd(0) });
    let argv = match read_argv(&mut input) {
        Ok(a) => a,
        Err(Bad::Ended) => exit(0),
        Err(Bad::Malformed) => {
            eprintln!("sandbox waiter: malformed argv on standard input");
            exit(125)
        }
    };
    // `execvp`, as the engine's init would call it for a container started with `argv`.
    let err = Command::new(&argv[0]).args(&argv[1..]).exec();
    eprintln!("sandbox waiter: exec {}: {err}", argv[0].to_string_lossy());
    exit(127)
}
