//! The proxy out of descriptors: a test of its own binary, since it lowers the whole
//! process's `RLIMIT_NOFILE`. The clients are another process (python), so only the proxy
//! runs out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed step is a failed test

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use sandbox_core::egress::EgressRun;
use sandbox_core::Allowlist;
use sandbox_proxy::{spawn, Limits, ProxyConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// This process's CPU time so far, in clock ticks (user and system), read through a file
/// opened before descriptors ran out.
fn cpu_ticks(stat: &std::fs::File) -> u64 {
    let mut buf = vec![0u8; 4096];
    let n = stat.read_at(&mut buf, 0).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    // Fields after the command name (in parentheses, which may hold spaces).
    let rest = &text[text.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// The descriptor limit that leaves exactly `free` numbers for new descriptors (a new
/// descriptor takes the lowest free number, and must be below the limit).
fn limit_leaving(free: u64) -> u64 {
    let open: std::collections::BTreeSet<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .collect();
    let mut left = free;
    let mut n = 0;
    loop {
        if !open.contains(&n) {
            if left == 0 {
                return n;
            }
            left -= 1;
        }
        n += 1;
    }
}

/// With its descriptors used up and connections waiting in the backlog, the proxy pauses
/// between failed accepts instead of spinning a core, and takes the waiting connections
/// once descriptors are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_proxy_backs_off_and_recovers() {
    let l = std::net::TcpListener::bind((LO, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let mut config = ProxyConfig::new(Allowlist::parse(&["allowed.test"]).unwrap(), None);
    config.limits = Limits {
        max_open: 1000,
        head_deadline: Duration::from_secs(3600),
    };
    let run = spawn(config, Box::pin(async move { Ok(l) })).unwrap();
    // The clients: connect 50 times when told, say so, hold them until stdin closes.
    let mut clients = Command::new("python3")
        .args([
            "-c",
            "import socket,sys\n\
             sys.stdin.readline()\n\
             s=[socket.create_connection(('127.0.0.1',int(sys.argv[1]))) for _ in range(50)]\n\
             print('connected',flush=True)\n\
             sys.stdin.read()\n",
            &port.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_clients = clients.stdin.take().unwrap();
    let mut from_clients = BufReader::new(clients.stdout.take().unwrap());
    let stat = std::fs::File::open("/proc/self/stat").unwrap();

    let saved = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(limit_leaving(5)),
            maximum: saved.maximum,
        },
    )
    .unwrap();
    to_clients.write_all(b"go\n").unwrap();
    let mut line = String::new();
    from_clients.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "connected");

    // Out of descriptors with 45 connections waiting: two seconds of it cost a spinning
    // loop about two seconds of CPU; the back-off, next to nothing.
    let t0 = cpu_ticks(&stat);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_ticks(&stat) - t0;
    setrlimit(Resource::Nofile, saved).unwrap();
    assert!(spent < 40, "{spent} ticks of CPU in 2 s out of descriptors");

    // Descriptors back: the waiting connections are taken and the proxy serves again.
    let mut s = tokio::net::TcpStream::connect((LO, port)).await.unwrap();
    s.write_all(b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut got = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut got))
        .await
        .expect("the proxy answered once descriptors were free")
        .unwrap();
    assert!(got[..n].starts_with(b"HTTP/1.1 403"));
    drop(to_clients);
    clients.wait().unwrap();
    run.finish().await;
}
