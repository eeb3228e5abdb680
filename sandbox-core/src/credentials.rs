//! The credential files a toolchain grant never shows: one table, read by every backend
//! through [`Plan::hidden_paths`](crate::Plan::hidden_paths).
//!
//! A toolchain home (`~/.rustup`, `~/.cargo`, `~/.nvm`) is granted whole, and a home
//! directory holds more than toolchains: keys, tokens, registry logins. Each entry of
//! [`CREDENTIALS`] that exists inside a granted toolchain home is made unreadable by the
//! backend (a tmpfs or an empty file bound over it, a read grant split around it), or the
//! run is refused; never shown. A grant that lies inside a credential path is refused: the
//! caller asked for a secret by name.
//!
//! A credential file with another hard link is refused too: both a bind over it and a
//! split grant judge the name, and the other name may lie inside the grant.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// Credential paths, relative to a home: the caller's (`HOME`), and every directory at or
/// above a grant (a toolchain home's own home, whatever `HOME` says).
pub const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".config/gh",
    ".docker/config.json",
    ".kube",
    ".netrc",
    ".gnupg",
    ".git-credentials",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".npmrc",
    ".pypirc",
];

/// The credential paths (under `home`, or under a directory at or above a grant) that exist
/// inside one of `grants` (canonical), sorted; an error for a grant inside a credential
/// path, or a credential file with another hard link.
pub fn hidden_in(grants: &[PathBuf], home: Option<&Path>) -> Result<Vec<PathBuf>, SandboxError> {
    let mut homes: Vec<PathBuf> = home
        .map(|h| h.canonicalize().unwrap_or_else(|_| h.to_path_buf()))
        .into_iter()
        .collect();
    for g in grants {
        for a in g.ancestors() {
            if !homes.iter().any(|h| h == a) {
                homes.push(a.to_path_buf());
            }
        }
    }
    let mut out: Vec<PathBuf> = Vec::new();
    for (home, rel) in homes
        .iter()
        .flat_map(|h| CREDENTIALS.iter().map(move |r| (h, r)))
    {
        let cred = home.join(rel);
        for g in grants {
            if g.starts_with(&cred) {
                return Err(SandboxError::invalid(
                    "toolchains",
                    format!(
                        "{} is credentials ({}), never granted as a toolchain",
                        g.display(),
                        cred.display()
                    ),
                ));
            }
            if !cred.starts_with(g) {
                continue;
            }
            // Not followed: a symlink at the credential's name is hidden as a name, and
            // what it points to is judged by its own path.
            let Ok(meta) = cred.symlink_metadata() else {
                continue;
            };
            if meta.is_file() && meta.nlink() > 1 {
                return Err(SandboxError::invalid(
                    "toolchains",
                    format!(
                        "{} has {} hard links: another name may be readable; remove the \
                         extra link",
                        cred.display(),
                        meta.nlink()
                    ),
                ));
            }
            if !out.contains(&cred) {
                out.push(cred.clone());
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_inside_a_grant_are_hidden_and_a_grant_inside_one_refused() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path().canonicalize().unwrap();
        std::fs::create_dir_all(h.join(".cargo/bin")).unwrap();
        std::fs::write(h.join(".cargo/credentials.toml"), "token").unwrap();
        std::fs::create_dir_all(h.join(".ssh")).unwrap();
        // A grant of ~/.cargo hides its credentials file; ~/.cargo/bin hides nothing.
        let got = hidden_in(&[h.join(".cargo")], Some(&h)).unwrap();
        assert_eq!(got, [h.join(".cargo/credentials.toml")]);
        assert!(hidden_in(&[h.join(".cargo/bin")], Some(&h))
            .unwrap()
            .is_empty());
        // The whole home: every credential path that exists, and only those.
        let got = hidden_in(std::slice::from_ref(&h), Some(&h)).unwrap();
        assert_eq!(got, [h.join(".cargo/credentials.toml"), h.join(".ssh")]);
        // Found from the grant's own home when HOME is elsewhere or unset.
        let got = hidden_in(&[h.join(".cargo")], None).unwrap();
        assert_eq!(got, [h.join(".cargo/credentials.toml")]);
        // A grant inside credentials is refused.
        let e = hidden_in(&[h.join(".ssh")], None).unwrap_err();
        assert!(e.to_string().contains("credentials"), "{e}");
        // A credential file with a second name is refused.
        std::fs::hard_link(h.join(".cargo/credentials.toml"), h.join(".cargo/bin/x")).unwrap();
        assert!(hidden_in(&[h.join(".cargo")], None).is_err());
    }
}
