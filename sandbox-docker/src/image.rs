//! Images: making sure the configured one is there (never pulling unless allowed), and
//! building a minimal one from host files and trees when no registry is reachable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bollard::models::ImageInspect;
use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sandbox_core::SandboxError;
use sandbox_host::process::tree::{self, Budget, Meta, Source, Visit};

use crate::config::DockerConfig;
use crate::error::DockerError;

/// The image, found on the engine; pulled first when it is missing and the config allows.
pub(crate) async fn ensure(
    docker: &Docker,
    config: &DockerConfig,
) -> Result<ImageInspect, DockerError> {
    match docker.inspect_image(&config.image).await {
        Ok(i) => return Ok(i),
        Err(e) => {
            let e = DockerError::engine(format!("inspect image `{}`", config.image), e);
            if !e.is_not_found() {
                return Err(e);
            }
        }
    }
    if !config.allow_pull {
        return Err(DockerError::ImageMissing {
            image: config.image.clone(),
        });
    }
    let (repo, tag) = split_tag(&config.image);
    let opts = CreateImageOptionsBuilder::new()
        .from_image(repo)
        .tag(tag)
        .build();
    let mut pull = docker.create_image(Some(opts), None, None);
    while let Some(item) = pull.next().await {
        item.map_err(|e| DockerError::engine(format!("pull image `{}`", config.image), e))?;
    }
    docker
        .inspect_image(&config.image)
        .await
        .map_err(|e| DockerError::engine(format!("inspect image `{}`", config.image), e))
}

/// `name:tag` split at the tag's colon (not a registry port's); `latest` when untagged.
/// A digest (`name@sha256:...`) is kept whole.
pub(crate) fn split_tag(image: &str) -> (&str, &str) {
    if image.contains('@') {
        return (image, "");
    }
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (&image[..slash + i], &image[slash + i + 1..]),
        None => (image, "latest"),
    }
}

/// The shared libraries `ldd` lists for `binaries`, interpreter included: the absolute
/// paths in its output, all together. A static binary has none. One `ldd` for them all:
/// a tree such as python's holds dozens of extension modules.
///
/// `ldd` may run the binary's loader on it, so only call this on binaries you trust (ours:
/// the probe, busybox, the host's own tools).
fn shared_libraries(binaries: &[PathBuf]) -> Result<Vec<PathBuf>, DockerError> {
    if binaries.is_empty() {
        return Ok(Vec::new());
    }
    let out = std::process::Command::new("ldd")
        .args(binaries)
        .env_clear()
        .env("PATH", sandbox_core::DEFAULT_PATH)
        .output()
        .map_err(|e| DockerError::io("running `ldd` to list shared libraries", e))?;
    // Not a success when one of them is static ("not a dynamic executable"): the others
    // are listed all the same.
    Ok(parse_ldd(&String::from_utf8_lossy(&out.stdout)))
}

/// The absolute library paths in `ldd` output: its indented lines (with several files,
/// each file's name heads its list, unindented).
pub(crate) fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(char::is_whitespace)) {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    libs
}

/// Whether `path` is an ELF file (a program or a shared object that may need libraries).
fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *ELF_MAGIC
}

/// The first bytes of an ELF file.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

/// The minimal files every image we build has: users for `root` and `nobody`.
const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";

/// What one path in the image is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    /// A directory with this mode.
    Dir(u32),
    /// The contents of this host file (read through links), with its mode and its
    /// modification time (kept: python checks its cached bytecode against its source's
    /// time; 0 for the libraries, which nothing checks).
    File {
        host: PathBuf,
        mode: u32,
        mtime: u64,
    },
    /// A symbolic link to this target, as written.
    Link(PathBuf),
}

/// Everything the archive holds, by path in the image.
#[derive(Debug, Default)]
struct Layout {
    entries: BTreeMap<PathBuf, Entry>,
    /// Host ELF files whose libraries are still to be added.
    elves: Vec<PathBuf>,
}

impl Layout {
    /// A single file at `inside`, read through links: a program (an ELF file) executable,
    /// with its libraries; anything else with its own mode. Its time is kept.
    fn file(&mut self, host: &Path, inside: &Path) -> Result<(), DockerError> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(host)
            .map_err(|e| DockerError::io(format!("reading {}", host.display()), e))?;
        let elf = is_elf(host);
        self.entries.insert(
            inside.to_path_buf(),
            Entry::File {
                host: host.to_path_buf(),
                mode: if elf { 0o755 } else { m.mode() & 0o7777 },
                mtime: u64::try_from(m.mtime()).unwrap_or(0),
            },
        );
        if elf {
            self.elves.push(host.to_path_buf());
        }
        Ok(())
    }

    /// The tree under host directory `host` at `inside`, as it is: directories, regular
    /// files (mode and time kept), and links (as links). Anything else (a FIFO, a socket, a
    /// device) is left out. Walked with core's [`tree::walk`], which never follows a link
    /// below `host`.
    fn tree(&mut self, host: &Path, inside: &Path) -> Result<(), DockerError> {
        let mut at = TreeAt {
            layout: self,
            host,
            inside,
        };
        tree::walk(host, &Budget::default(), &mut at)
            .map_err(|e| DockerError::io(format!("reading {}", host.display()), e))
    }

    /// The shared libraries of every ELF file, each at its own path (where it is not
    /// already something else), and the parent directories of everything.
    fn complete(&mut self) -> Result<(), DockerError> {
        let mut elves = std::mem::take(&mut self.elves);
        elves.sort();
        elves.dedup();
        for lib in shared_libraries(&elves)? {
            self.entries.entry(lib.clone()).or_insert(Entry::File {
                host: lib,
                mode: 0o755,
                mtime: 0,
            });
        }
        let parents: Vec<PathBuf> = self
            .entries
            .keys()
            .flat_map(|p| p.ancestors().skip(1).map(Path::to_path_buf))
            .filter(|a| a != Path::new("/"))
            .collect();
        for a in parents {
            self.entries.entry(a).or_insert(Entry::Dir(0o755));
        }
        self.entries.insert("/etc".into(), Entry::Dir(0o755));
        self.entries.insert("/tmp".into(), Entry::Dir(0o1777));
        Ok(())
    }
}

/// Adds what [`tree::walk`] meets in the host tree `host` to a layout, at `inside`.
struct TreeAt<'a> {
    layout: &'a mut Layout,
    host: &'a Path,
    inside: &'a Path,
}

impl TreeAt<'_> {
    /// Put `entry` at `rel`'s path in the image (the empty path is the tree's root).
    fn put(&mut self, rel: &Path, entry: Entry) {
        let at = if rel.as_os_str().is_empty() {
            self.inside.to_path_buf()
        } else {
            self.inside.join(rel)
        };
        self.layout.entries.insert(at, entry);
    }
}

impl Visit for TreeAt<'_> {
    fn enter_dir(&mut self, rel: &Path, meta: &Meta) -> std::io::Result<bool> {
        self.put(rel, Entry::Dir(meta.mode & 0o7777));
        Ok(true)
    }

    fn leave_dir(&mut self, _: &Path, _: &Meta) -> std::io::Result<()> {
        Ok(())
    }

    fn file(&mut self, rel: &Path, meta: &Meta, src: &mut Source<'_>) -> std::io::Result<()> {
        let host = self.host.join(rel);
        let mut magic = [0u8; 4];
        if src.read_at(&mut magic, 0)? == magic.len() && magic == *ELF_MAGIC {
            self.layout.elves.push(host.clone());
        }
        let mtime = u64::try_from(meta.mtime).unwrap_or(0);
        let mode = meta.mode & 0o7777;
        self.put(rel, Entry::File { host, mode, mtime });
        Ok(())
    }

    fn symlink(&mut self, rel: &Path, _: &Meta, target: &Path) -> std::io::Result<()> {
        self.put(rel, Entry::Link(target.to_path_buf()));
        Ok(())
    }
}

impl Layout {
    /// The root filesystem of `files`: each `(host, inside)` pair at its image path (a
    /// file read through links, with the shared libraries it needs; a directory as the
    /// tree it is, with the libraries its ELF files need), `/etc/passwd`, `/etc/group` and a
    /// world-writable `/tmp`. Paths sort before their contents, so in the archive every
    /// directory precedes what it holds.
    fn of(files: &[(PathBuf, PathBuf)]) -> Result<Self, DockerError> {
        let mut layout = Layout::default();
        for (host, image_path) in files {
            if !image_path.is_absolute() {
                return Err(DockerError::Invalid {
                    field: "image_path",
                    reason: format!(
                        "{} is relative; give the absolute path in the image",
                        image_path.display()
                    ),
                });
            }
            if host.is_dir() {
                layout.tree(host, image_path)?;
            } else if host.is_file() {
                layout.file(host, image_path)?;
            } else {
                return Err(DockerError::Invalid {
                    field: "host_path",
                    reason: format!("{} is neither a file nor a directory", host.display()),
                });
            }
        }
        layout.complete()?;
        for name in ["/etc/passwd", "/etc/group"] {
            layout.entries.remove(Path::new(name));
        }
        Ok(layout)
    }

    /// What decides whether an image built from this layout is already there: every path
    /// with what it is, and for a file the host file's identity (device, inode, size,
    /// modification time to the nanosecond), without reading any file. Not cryptographic:
    /// it only decides whether to rebuild our own image; a host file rewritten in place
    /// with its size and time kept would go unnoticed.
    fn key(&self) -> String {
        use std::hash::{Hash, Hasher};
        use std::os::unix::fs::MetadataExt;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (LAYOUT_VERSION, PASSWD, GROUP).hash(&mut h);
        for (path, entry) in &self.entries {
            path.hash(&mut h);
            match entry {
                Entry::Dir(mode) => (0u8, mode).hash(&mut h),
                Entry::Link(target) => (1u8, target).hash(&mut h),
                Entry::File { host, mode, mtime } => {
                    (2u8, host, mode, mtime).hash(&mut h);
                    match std::fs::metadata(host) {
                        Ok(m) => {
                            (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()).hash(&mut h)
                        }
                        // Unreadable now: the archive will say why.
                        Err(e) => e.kind().hash(&mut h),
                    }
                }
            }
        }
        format!("{:016x}-{}", h.finish(), self.entries.len())
    }

    /// The root filesystem archive of this layout.
    fn archive(&self) -> Result<Vec<u8>, DockerError> {
        let io = |e: std::io::Error| DockerError::io("building the image archive", e);
        let mut b = tar::Builder::new(Vec::new());
        let rel = |p: &Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
        for (name, data) in [("etc/passwd", PASSWD), ("etc/group", GROUP)] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Regular);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, name, data.as_bytes()).map_err(io)?;
        }
        for (image_path, entry) in &self.entries {
            let mut h = tar::Header::new_gnu();
            match entry {
                Entry::Dir(mode) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(*mode);
                    h.set_size(0);
                    b.append_data(&mut h, rel(image_path), std::io::empty())
                        .map_err(io)?;
                }
                Entry::Link(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    b.append_link(&mut h, rel(image_path), target).map_err(io)?;
                }
                Entry::File { host, mode, mtime } => {
                    let data = std::fs::read(host)
                        .map_err(|e| DockerError::io(format!("reading {}", host.display()), e))?;
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    h.set_mtime(*mtime);
                    h.set_size(data.len() as u64);
                    b.append_data(&mut h, rel(image_path), &data[..])
                        .map_err(io)?;
                }
            }
        }
        b.into_inner().map_err(io)
    }
}

/// Bumped when the archive's layout changes, so an image built by an older layout is
/// rebuilt.
const LAYOUT_VERSION: u32 = 2;

/// The label that records what an image built here holds, so an unchanged rebuild is
/// skipped instead of piling up untagged copies on the engine.
const CONTENT_LABEL: &str = "sandbox.content";

/// Build image `tag` FROM scratch on the engine, without a registry: each `(host_path,
/// image_path)` file is copied to its path in the image with the shared libraries it
/// needs (as `ldd` lists them), each directory as the tree it is (with the libraries of
/// its ELF files), plus `/etc/passwd`, `/etc/group` (root and nobody) and a world-writable
/// `/tmp`. The image has no entrypoint or command of its own.
///
/// An image with the same layout already under `tag` (the same paths, from the same host
/// files, unchanged: see `Layout::key`) is kept as it is without reading a file; otherwise
/// the new one replaces it and the old one is removed (unless a container still uses it).
///
/// Used by this crate's tests, the bench, and the conformance suite, which builds
/// `sandbox-conformance:HASH` around its probe with python, git and curl from the host.
pub async fn build_image_from_binaries(
    engine: &crate::DockerEngine,
    tag: &str,
    files: &[(PathBuf, PathBuf)],
) -> Result<(), SandboxError> {
    let docker = &engine.0;
    let files = files.to_vec();
    let layout = tokio::task::spawn_blocking(move || Layout::of(&files))
        .await
        .map_err(|e| SandboxError::io("listing the image's files", std::io::Error::other(e)))??;
    let key = layout.key();
    let old = docker.inspect_image(tag).await.ok();
    let old_key = old
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .and_then(|c| c.labels.as_ref())
        .and_then(|l| l.get(CONTENT_LABEL));
    if old_key == Some(&key) {
        return Ok(());
    }
    let archive = tokio::task::spawn_blocking(move || layout.archive())
        .await
        .map_err(|e| SandboxError::io("building the image archive", std::io::Error::other(e)))??;
    let (repo, tag_part) = split_tag(tag);
    let opts = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag_part)
        .changes(vec![format!("LABEL {CONTENT_LABEL}={key}")])
        .build();
    let mut import =
        docker.create_image(Some(opts), Some(bollard::body_full(archive.into())), None);
    while let Some(item) = import.next().await {
        item.map_err(|e| DockerError::engine(format!("import image `{tag}`"), e))?;
    }
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_split_at_the_right_colon() {
        assert_eq!(split_tag("img"), ("img", "latest"));
        assert_eq!(split_tag("img:1.2"), ("img", "1.2"));
        assert_eq!(
            split_tag("localhost:5000/img"),
            ("localhost:5000/img", "latest")
        );
        assert_eq!(
            split_tag("localhost:5000/img:t"),
            ("localhost:5000/img", "t")
        );
        assert_eq!(split_tag("img@sha256:ab"), ("img@sha256:ab", ""));
    }

    #[test]
    fn ldd_output_is_parsed_for_absolute_paths() {
        let out = "\tlinux-vdso.so.1 (0x00007ffc)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(out),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
        // Several files: each one's name heads its list, and is not a library.
        let two = "/usr/bin/a:\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n\
                   /usr/bin/b:\n\tnot a dynamic executable\n";
        assert_eq!(parse_ldd(two), vec![PathBuf::from("/lib/libc.so.6")]);
    }

    #[test]
    fn the_rootfs_holds_the_binary_its_libraries_and_the_basics() {
        // The test binary itself is dynamically linked against libc.
        let me = std::env::current_exe().unwrap();
        let ar = Layout::of(&[(me, PathBuf::from("/usr/local/bin/t"))])
            .and_then(|l| l.archive())
            .unwrap();
        let names: Vec<String> = tar::Archive::new(&ar[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        for want in ["usr/local/bin/t", "etc/passwd", "etc/group", "tmp"] {
            assert!(
                names.iter().any(|n| n.trim_end_matches('/') == want),
                "{want} missing from {names:?}"
            );
        }
        assert!(names.iter().any(|n| n.contains("libc.so")), "{names:?}");
        assert!(Layout::of(&[("/nonexistent".into(), "/x".into())]).is_err());
        assert!(Layout::of(&[("/bin/sh".into(), "rel".into())]).is_err());
    }

    #[test]
    fn a_directory_is_copied_as_its_tree_with_modes_times_links_and_libraries() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lib");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::write(root.join("mod.py"), "x = 1\n").unwrap();
        std::fs::write(root.join("sub/data.txt"), "data").unwrap();
        std::fs::set_permissions(root.join("sub/data.txt"), PermissionsExt::from_mode(0o600))
            .unwrap();
        std::os::unix::fs::symlink("../mod.py", root.join("sub/link.py")).unwrap();
        // An ELF file inside the tree brings its libraries (the test binary needs libc).
        std::fs::copy(std::env::current_exe().unwrap(), root.join("sub/ext.so")).unwrap();
        let mtime = std::fs::metadata(root.join("mod.py")).unwrap().mtime() as u64;
        let layout = Layout::of(&[(root.clone(), PathBuf::from("/usr/lib/t"))]).unwrap();
        let ar = layout.archive().unwrap();
        let mut seen = BTreeMap::new();
        for e in tar::Archive::new(&ar[..]).entries().unwrap() {
            let e = e.unwrap();
            let h = e.header();
            let path = e.path().unwrap().display().to_string();
            let link = e.link_name().unwrap().map(|l| l.display().to_string());
            seen.insert(
                path.trim_end_matches('/').to_string(),
                (h.entry_type(), h.mode().unwrap(), h.mtime().unwrap(), link),
            );
        }
        let get = |p: &str| {
            seen.get(p)
                .unwrap_or_else(|| panic!("{p} missing: {seen:?}"))
        };
        assert_eq!(get("usr/lib/t/mod.py").0, tar::EntryType::Regular);
        assert_eq!(
            get("usr/lib/t/mod.py").2,
            mtime,
            "the source's time is kept"
        );
        assert_eq!(get("usr/lib/t/sub/data.txt").1, 0o600);
        assert!(get("usr/lib/t/sub/deeper").0.is_dir());
        let link = get("usr/lib/t/sub/link.py");
        assert_eq!(link.0, tar::EntryType::Symlink);
        assert_eq!(link.3.as_deref(), Some("../mod.py"));
        assert!(seen.keys().any(|k| k.contains("libc.so")), "{seen:?}");
        // Every directory comes before what it holds.
        let order: Vec<String> = tar::Archive::new(&ar[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        let at = |p: &str| {
            order
                .iter()
                .position(|o| o.trim_end_matches('/') == p)
                .unwrap()
        };
        assert!(at("usr/lib/t/sub") < at("usr/lib/t/sub/data.txt"));
        // The key follows the files: the same layout, the same key; a changed file, another.
        let key = layout.key();
        let again = || {
            Layout::of(&[(root.clone(), "/usr/lib/t".into())])
                .unwrap()
                .key()
        };
        assert_eq!(key, again());
        std::fs::write(root.join("mod.py"), "x = 22\n").unwrap();
        assert_ne!(key, again());
    }
}
