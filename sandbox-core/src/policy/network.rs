use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What the command may reach over the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// No network at all: no sockets of the internet, packet or netlink families, or a
    /// network namespace with nothing in it. The default.
    #[default]
    None,
    /// A private loopback: the command may serve and connect on its own `127.0.0.1`, and
    /// reaches nothing of the host's (not even the host's own loopback services).
    Loopback,
    /// The host's network, unrestricted.
    Full,
    /// A private loopback whose one way out is a proxy on the host that connects only to
    /// the hosts of an allowlist ([`SandboxOpts::allow_hosts`](crate::SandboxOpts)), by
    /// name, resolved on the host. No resolver, no other address, no UDP.
    Proxy,
}

impl NetworkMode {
    /// The name used on the command line and in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Loopback => "loopback",
            Self::Full => "full",
            Self::Proxy => "proxy",
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NetworkMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "loopback" => Ok(Self::Loopback),
            "full" => Ok(Self::Full),
            "proxy" => Ok(Self::Proxy),
            other => Err(format!(
                "unknown network mode `{other}` (expected none, loopback, proxy or full)"
            )),
        }
    }
}
