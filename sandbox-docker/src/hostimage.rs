//! An image made of the host's own system directories, for a host with no registry: what
//! `sandbox image --from-host` builds.
//!
//! The process backends show the command the host's `/usr`, `/etc`, `/bin`, `/sbin` and
//! `/lib*` read-only, as an unprivileged user sees them. This image holds the same trees,
//! links kept as links (a merged-`/usr` host's `/bin -> usr/bin` stays a link), and
//! nothing else of the host: no home directory, no `/var`, no `/root`. What an
//! unprivileged user could not read is left out, decided by the mode bits and never by a
//! list of names: a file others may not read (`/etc/shadow`, SSH host keys, a private TLS
//! key, any `0600` file) and a directory others may not list and enter (with everything in
//! it) never enter the archive, so a command running as any uid in the container cannot
//! read them, whoever it runs as. Setuid and setgid bits are dropped: the backend's
//! profile refuses them anyway, and a setuid-root program has no use in a sandbox.
//!
//! The archive is streamed to the engine's image import as it is written (the trees hold
//! gigabytes), bounded by core's copy cap. A file is opened without following a link and
//! must be the inode that was listed, still readable by others; one that changed in
//! between is left out. An image with the same contents under the tag (the same paths,
//! modes, owners, sizes and times: a key kept in a label) is kept without reading a file.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sandbox_core::registry::HostImage;
use sandbox_core::SandboxError;
use sandbox_host::process::tree::MAX_COPY_BYTES;

use crate::error::DockerError;
use crate::image::split_tag;
use crate::transfer::ChannelWriter;

/// The host trees the image is made of, where they exist: the system directories the
/// process backends show.
pub const HOST_ROOTS: &[&str] = &[
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The label holding the image's content key.
const CONTENT_LABEL: &str = "sandbox.host-content";

/// Bumped when what the archive holds changes for the same host.
const LAYOUT_VERSION: u32 = 1;

/// How long the import of a large tree may take (the client's default is two minutes).
const IMPORT_TIMEOUT: Duration = Duration::from_secs(3600);

/// An entry others may read: a file with `o+r`, a directory with `o+rx`.
fn readable_by_others(m: &Metadata) -> bool {
    if m.is_dir() {
        m.mode() & 0o005 == 0o005
    } else {
        m.mode() & 0o004 != 0
    }
}

/// What the walk meets, in the order the archive holds it (each directory before what it
/// holds, names sorted).
enum Item<'a> {
    Dir(&'a Path, &'a Metadata),
    File(&'a Path, &'a Metadata),
    Link(&'a Path, &'a Metadata, PathBuf),
    /// Left out: others may not read it.
    Hidden,
}

/// Walk `path` without following a link, calling `f` for each entry others may read.
fn walk(path: &Path, f: &mut dyn FnMut(Item<'_>) -> io::Result<()>) -> io::Result<()> {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let ty = m.file_type();
    if ty.is_symlink() {
        let target = std::fs::read_link(path)?;
        return f(Item::Link(path, &m, target));
    }
    if !(ty.is_dir() || ty.is_file()) {
        // Devices, fifos and sockets are not files to copy.
        return Ok(());
    }
    if !readable_by_others(&m) {
        return f(Item::Hidden);
    }
    if ty.is_file() {
        return f(Item::File(path, &m));
    }
    f(Item::Dir(path, &m))?;
    let mut names: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        walk(&path.join(name), f)?;
    }
    Ok(())
}

/// The content key of the trees at `roots`, from metadata only: see the module docs.
fn key(roots: &[PathBuf]) -> io::Result<String> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    LAYOUT_VERSION.hash(&mut h);
    let mut n = 0u64;
    for root in roots {
        walk(root, &mut |item| {
            n += 1;
            match item {
                Item::Dir(p, m) => (0u8, p, m.mode(), m.uid(), m.gid()).hash(&mut h),
                Item::File(p, m) => (
                    1u8,
                    p,
                    (m.mode(), m.uid(), m.gid(), m.dev(), m.ino()),
                    (
                        m.size(),
                        m.mtime(),
                        m.mtime_nsec(),
                        m.ctime(),
                        m.ctime_nsec(),
                    ),
                )
                    .hash(&mut h),
                Item::Link(p, _, t) => (2u8, p, t).hash(&mut h),
                Item::Hidden => 3u8.hash(&mut h),
            }
            Ok(())
        })?;
    }
    Ok(format!("{:016x}-{n}", h.finish()))
}

/// Write the archive of the trees at `roots` to `out`; returns what it holds.
fn write_archive<W: Write>(roots: &[PathBuf], out: W) -> io::Result<HostImage> {
    let mut b = tar::Builder::new(out);
    b.follow_symlinks(false);
    let mut made = HostImage {
        roots: roots.to_vec(),
        ..HostImage::default()
    };
    // The first path of each inode with several links: later ones are hard links to it.
    let mut linked: HashMap<(u64, u64), PathBuf> = HashMap::new();
    let rel = |p: &Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
    let header = |m: &Metadata, mode: u32| {
        let mut h = tar::Header::new_gnu();
        h.set_uid(m.uid().into());
        h.set_gid(m.gid().into());
        h.set_mode(mode);
        h.set_mtime(m.mtime().max(0) as u64);
        h
    };
    for root in roots {
        walk(root, &mut |item| {
            match item {
                Item::Hidden => {
                    made.left_out += 1;
                    return Ok(());
                }
                Item::Dir(p, m) => {
                    let mut h = header(m, m.mode() & 0o1777);
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    b.append_data(&mut h, rel(p), io::empty())?;
                }
                Item::Link(p, m, target) => {
                    let mut h = header(m, 0o777);
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    b.append_link(&mut h, rel(p), target)?;
                }
                Item::File(p, m) => {
                    if m.nlink() > 1 {
                        if let Some(first) = linked.get(&(m.dev(), m.ino())) {
                            let mut h = header(m, m.mode() & 0o777);
                            h.set_entry_type(tar::EntryType::Link);
                            h.set_size(0);
                            b.append_link(&mut h, rel(p), first)?;
                            made.entries += 1;
                            return Ok(());
                        }
                    }
                    let Some(file) = open_same(p, m)? else {
                        made.left_out += 1;
                        return Ok(());
                    };
                    let len = m.size();
                    made.bytes += len;
                    if made.bytes > MAX_COPY_BYTES {
                        return Err(io::Error::new(
                            io::ErrorKind::FileTooLarge,
                            format!(
                                "the host's system directories hold more than {} MiB, the cap \
                                 on what the host copies \
                                 (sandbox_host::process::tree::MAX_COPY_BYTES); build an image \
                                 from named programs instead",
                                MAX_COPY_BYTES >> 20
                            ),
                        ));
                    }
                    let mut h = header(m, m.mode() & 0o777);
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(len);
                    // A file that shrinks meanwhile is padded: the header never lies about
                    // what follows.
                    let body = file.take(len).chain(io::repeat(0)).take(len);
                    b.append_data(&mut h, rel(p), body)?;
                    if m.nlink() > 1 {
                        linked.insert((m.dev(), m.ino()), rel(p));
                    }
                }
            }
            made.entries += 1;
            Ok(())
        })?;
    }
    // The engine makes `/proc`, `/dev` and `/sys`; `/tmp` must exist, writable by all.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o1777);
    h.set_size(0);
    b.append_data(&mut h, "tmp", io::empty())?;
    b.into_inner()?.flush()?;
    Ok(made)
}

/// Open the file at `p` for reading without following a link or blocking; `None` when it
/// is no longer the listed inode, or no longer readable by others.
fn open_same(p: &Path, listed: &Metadata) -> io::Result<Option<File>> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)
    {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOENT)) => return Ok(None),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
    };
    let now = file.metadata()?;
    let same = now.is_file()
        && now.dev() == listed.dev()
        && now.ino() == listed.ino()
        && readable_by_others(&now);
    Ok(same.then_some(file))
}

/// The host trees of [`HOST_ROOTS`] that exist here.
pub(crate) fn host_roots() -> Vec<PathBuf> {
    HOST_ROOTS
        .iter()
        .map(PathBuf::from)
        .filter(|p| p.symlink_metadata().is_ok())
        .collect()
}

/// Build image `tag` on the engine, without a registry, from the host's system
/// directories ([`HOST_ROOTS`]): see the module docs for what it holds and leaves out.
/// An image with the same contents under `tag` is kept; otherwise the new one replaces
/// it, and the old one is removed unless a container still uses it.
pub async fn build_image_from_host(
    engine: &crate::DockerEngine,
    tag: &str,
) -> Result<HostImage, SandboxError> {
    build_from_roots(&engine.0, tag, host_roots()).await
}

/// [`build_image_from_host`] from the trees at `roots` (absolute host paths, at the same
/// paths in the image).
pub(crate) async fn build_from_roots(
    docker: &Docker,
    tag: &str,
    roots: Vec<PathBuf>,
) -> Result<HostImage, SandboxError> {
    let listed = roots.clone();
    let key = tokio::task::spawn_blocking(move || key(&listed))
        .await
        .map_err(|e| {
            SandboxError::io("listing the host's system directories", io::Error::other(e))
        })?
        .map_err(|e| DockerError::io("listing the host's system directories", e))?;
    let old = docker.inspect_image(tag).await.ok();
    let old_key = old
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .and_then(|c| c.labels.as_ref())
        .and_then(|l| l.get(CONTENT_LABEL));
    if old_key == Some(&key) {
        return Ok(HostImage {
            roots,
            unchanged: true,
            ..HostImage::default()
        });
    }
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let writer = tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter::new(tx.clone());
        let r = write_archive(&roots, &mut w);
        if let Err(e) = &r {
            // Fail the import too, so the engine never makes an image of half the trees.
            let _ = tx.blocking_send(Err(io::Error::new(e.kind(), e.to_string())));
        }
        r
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let (repo, tag_part) = split_tag(tag);
    let opts = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag_part)
        .changes(vec![format!("LABEL {CONTENT_LABEL}={key}")])
        .build();
    let engine = docker.clone().with_timeout(IMPORT_TIMEOUT);
    let mut import = engine.create_image(Some(opts), Some(bollard::body_try_stream(body)), None);
    let mut imported = Ok(());
    while let Some(item) = import.next().await {
        if let Err(e) = item {
            imported = Err(DockerError::engine(format!("import image `{tag}`"), e));
            break;
        }
    }
    drop(import);
    let written = writer
        .await
        .map_err(|e| SandboxError::io("building the image archive", io::Error::other(e)))?
        .map_err(|e| DockerError::io("building the image archive from the host", e))?;
    imported?;
    if let Some(old_id) = old.and_then(|i| i.id) {
        // Untagged now; an error means a container still uses it, which is fine.
        let _ = docker
            .remove_image(
                &old_id,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn entries(bytes: &[u8]) -> HashMap<String, (tar::EntryType, u32, Option<String>)> {
        tar::Archive::new(bytes)
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let path = e.path().unwrap().display().to_string();
                let link = e.link_name().unwrap().map(|l| l.display().to_string());
                (
                    path.trim_end_matches('/').to_string(),
                    (e.header().entry_type(), e.header().mode().unwrap(), link),
                )
            })
            .collect()
    }

    #[test]
    fn what_others_may_not_read_is_left_out_by_mode_and_links_stay_links() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = d.path().join("etc");
        std::fs::create_dir_all(root.join("ssl/private")).unwrap();
        std::fs::create_dir_all(root.join("open")).unwrap();
        let put = |rel: &str, mode: u32| {
            std::fs::write(root.join(rel), rel).unwrap();
            std::fs::set_permissions(root.join(rel), std::fs::Permissions::from_mode(mode))
                .unwrap();
        };
        put("hosts", 0o644);
        put("shadow", 0o640);
        put("key", 0o600);
        put("suid", 0o4755);
        put("ssl/private/server.key", 0o644);
        put("open/a", 0o444);
        std::fs::set_permissions(
            root.join("ssl/private"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        symlink("open/a", root.join("alias")).unwrap();
        std::fs::hard_link(root.join("open/a"), root.join("open/b")).unwrap();
        let top = d.path().join("sbin");
        symlink("usr/sbin", &top).unwrap();
        let mut out = Vec::new();
        let made = write_archive(&[root.clone(), top.clone()], &mut out).unwrap();
        let es = entries(&out);
        let at = |p: &Path| p.strip_prefix("/").unwrap().display().to_string();
        let has = |rel: &str| es.contains_key(&at(&root.join(rel)));
        assert!(has("hosts") && has("open/a") && has("suid"), "{es:?}");
        for gone in ["shadow", "key", "ssl/private", "ssl/private/server.key"] {
            assert!(!has(gone), "{gone} is in the image");
        }
        assert_eq!(made.left_out, 3, "shadow, key, ssl/private: {made:?}");
        assert_eq!(es[&at(&root.join("suid"))].1, 0o755, "no setuid bit");
        let alias = &es[&at(&root.join("alias"))];
        assert_eq!(
            (alias.0, alias.2.as_deref()),
            (tar::EntryType::Symlink, Some("open/a"))
        );
        assert_eq!(es[&at(&root.join("open/b"))].0, tar::EntryType::Link);
        let sbin = &es[&at(&top)];
        assert_eq!(
            (sbin.0, sbin.2.as_deref()),
            (tar::EntryType::Symlink, Some("usr/sbin"))
        );
        assert_eq!(es["tmp"].1, 0o1777);
        // The key follows the trees: a file that becomes readable changes it.
        let before = key(std::slice::from_ref(&root)).unwrap();
        assert_eq!(before, key(std::slice::from_ref(&root)).unwrap());
        std::fs::set_permissions(root.join("key"), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_ne!(before, key(&[root]).unwrap());
    }

    #[test]
    fn the_roots_are_the_system_directories_and_nothing_of_a_home() {
        let roots = host_roots();
        assert!(roots.iter().any(|r| r == Path::new("/usr")));
        assert!(roots
            .iter()
            .all(|r| !r.starts_with("/home") && !r.starts_with("/root")));
    }
}
