//! SOCKS5 (RFC 1928), the `CONNECT` command without authentication: enough for curl's
//! `--socks5-hostname`, git's `ALL_PROXY=socks5h://` and ssh's `ProxyCommand nc -X 5`.

use std::net::{Ipv4Addr, Ipv6Addr};

use sandbox_core::ProxyProtocol;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{connect, judge_tunnel, refuse_tunnel, relay, unspecified, Refusal, Shared};

/// The protocol version, and the first byte of every SOCKS5 greeting.
pub(crate) const VERSION: u8 = 5;
const NO_AUTH: u8 = 0;
const NO_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 1;
const ATYP_V4: u8 = 1;
const ATYP_NAME: u8 = 3;
const ATYP_V6: u8 = 4;
/// Reply codes.
const OK: u8 = 0;
const GENERAL_FAILURE: u8 = 1;
const NOT_ALLOWED: u8 = 2;
const HOST_UNREACHABLE: u8 = 4;
const CMD_UNSUPPORTED: u8 = 7;
const ATYP_UNSUPPORTED: u8 = 8;

async fn reply(client: &mut TcpStream, code: u8) -> std::io::Result<()> {
    let mut r = vec![VERSION, code, 0, ATYP_V4];
    if let std::net::IpAddr::V4(a) = unspecified() {
        r.extend_from_slice(&a.octets());
    }
    r.extend_from_slice(&[0, 0]);
    client.write_all(&r).await
}

/// The greeting and the request: the host as written and the port, or the reply code.
async fn request(client: &mut TcpStream) -> std::io::Result<Result<(String, u16), u8>> {
    let mut hdr = [0u8; 2];
    client.read_exact(&mut hdr).await?;
    let mut methods = vec![0u8; hdr[1] as usize];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&NO_AUTH) {
        client.write_all(&[VERSION, NO_ACCEPTABLE]).await?;
        return Ok(Err(NO_ACCEPTABLE));
    }
    client.write_all(&[VERSION, NO_AUTH]).await?;
    let mut req = [0u8; 4];
    client.read_exact(&mut req).await?;
    if req[0] != VERSION {
        return Ok(Err(GENERAL_FAILURE));
    }
    let host = match req[3] {
        ATYP_V4 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a).await?;
            Ipv4Addr::from(a).to_string()
        }
        ATYP_V6 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a).await?;
            format!("[{}]", Ipv6Addr::from(a))
        }
        ATYP_NAME => {
            let mut len = [0u8; 1];
            client.read_exact(&mut len).await?;
            let mut name = vec![0u8; len[0] as usize];
            client.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return Ok(Err(ATYP_UNSUPPORTED)),
    };
    let mut port = [0u8; 2];
    client.read_exact(&mut port).await?;
    if req[1] != CMD_CONNECT {
        // BIND and UDP ASSOCIATE would open ways in and out the allowlist does not cover.
        return Ok(Err(CMD_UNSUPPORTED));
    }
    Ok(Ok((host, u16::from_be_bytes(port))))
}

/// Serve one SOCKS5 client, whose greeting and request must be in by `deadline`.
pub(crate) async fn serve(shared: &Shared, mut client: TcpStream, deadline: tokio::time::Instant) {
    let asked = match tokio::time::timeout_at(deadline, request(&mut client)).await {
        Ok(Ok(r)) => r,
        _ => return,
    };
    let (host, port) = match asked {
        Ok(x) => x,
        Err(NO_ACCEPTABLE) => return,
        Err(code) => {
            let _ = reply(&mut client, code).await;
            return;
        }
    };
    // A host with secrets or request rules is reached only through `CONNECT`, where its
    // TLS is terminated and every request judged; a SOCKS tunnel to it would pass unjudged.
    if shared
        .config
        .as_ref()
        .and_then(|c| c.secrets.as_ref())
        .is_some_and(|s| s.terminates(&host))
    {
        super::Pending::new(shared, ProxyProtocol::Socks5, &host, port).settle(
            sandbox_core::Decision::Denied(
                "a host with secrets or request rules is reached through HTTPS_PROXY \
                 (CONNECT), where each request is judged, not SOCKS5"
                    .into(),
            ),
            None,
            None,
        );
        let _ = reply(&mut client, NOT_ALLOWED).await;
        return;
    }
    match connect(shared, ProxyProtocol::Socks5, &host, port).await {
        Ok((tally, mut upstream)) => {
            if reply(&mut client, OK).await.is_err() {
                return;
            }
            // A TLS ClientHello's server name must be the host asked for, as through CONNECT.
            match judge_tunnel(shared, &mut client, &upstream, &host, Vec::new()).await {
                Ok(first) => {
                    if !first.is_empty() {
                        tally.add(first.len() as u64, 0);
                        if upstream.write_all(&first).await.is_err() {
                            return;
                        }
                    }
                    relay::run(&tally, client, upstream).await;
                }
                Err(why) => {
                    refuse_tunnel(
                        shared,
                        ProxyProtocol::Socks5,
                        &host,
                        port,
                        why,
                        client,
                        upstream,
                    )
                    .await
                }
            }
        }
        Err(Refusal { status, .. }) => {
            let code = if status.starts_with("403") {
                NOT_ALLOWED
            } else {
                HOST_UNREACHABLE
            };
            let _ = reply(&mut client, code).await;
        }
    }
}
