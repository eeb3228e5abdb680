//! A fixed table of names to addresses: how the test suites stand loopback servers in for
//! named hosts without touching the real DNS. A library-level value set in
//! `SandboxOpts::resolver`; nothing a sandboxed command or the command-line tool can reach.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};

use async_trait::async_trait;
use sandbox_core::policy::normalize_name;
use sandbox_core::Resolver;

/// Names to addresses; a name not in the table does not resolve.
#[derive(Clone, Debug, Default)]
pub struct TableResolver {
    table: HashMap<String, Vec<IpAddr>>,
}

impl TableResolver {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// `name` resolves to `addr` (added to any it already has).
    pub fn with(mut self, name: &str, addr: IpAddr) -> Self {
        let key = normalize_name(name).unwrap_or_else(|| name.to_ascii_lowercase());
        self.table.entry(key).or_default().push(addr);
        self
    }
}

#[async_trait]
impl Resolver for TableResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
        self.table
            .get(host)
            .map(|a| a.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{host} is not in the table"),
                )
            })
    }
}
