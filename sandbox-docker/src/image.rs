//! Images: making sure the configured one is there (never pulling unless allowed), and
//! building a minimal one from host binaries when no registry is reachable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bollard::models::ImageInspect;
use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use sandbox_core::SandboxError;

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

/// The shared libraries `ldd` lists for `binary`, interpreter included: the absolute
/// paths in its output. A static binary has none.
///
/// `ldd` may run the binary's loader on it, so only call this on binaries you trust (ours:
/// the probe, busybox).
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>, DockerError> {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .env_clear()
        .env("PATH", sandbox_core::DEFAULT_PATH)
        .output()
        .map_err(|e| DockerError::io("running `ldd` to list shared libraries", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // "not a dynamic executable": a static binary needs nothing else.
        return Ok(Vec::new());
    }
    Ok(parse_ldd(&text))
}

/// The absolute library paths in `ldd` output.
pub(crate) fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut libs = Vec::new();
    for line in text.lines() {
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

/// The minimal files every image we build has: users for `root` and `nobody`.
const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnogroup:x:65534:\n";

/// The root filesystem archive: each binary at its image path, the libraries it needs at
/// their own paths, `/etc/passwd`, `/etc/group` and a world-writable `/tmp`.
pub(crate) fn rootfs_archive(files: &[(PathBuf, PathBuf)]) -> Result<Vec<u8>, DockerError> {
    // Path in the image -> host file, de-duplicated (two binaries share libc).
    let mut content: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
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
        if !host.is_file() {
            return Err(DockerError::Invalid {
                field: "host_path",
                reason: format!("{} is not a file", host.display()),
            });
        }
        content.insert(image_path.clone(), host.clone());
        for lib in shared_libraries(host)? {
            content.entry(lib.clone()).or_insert(lib);
        }
    }
    let mut dirs: BTreeMap<PathBuf, u32> = BTreeMap::new();
    for p in content.keys() {
        for a in p.ancestors().skip(1) {
            if a != Path::new("/") {
                dirs.insert(a.to_path_buf(), 0o755);
            }
        }
    }
    dirs.insert("/etc".into(), 0o755);
    dirs.insert("/tmp".into(), 0o1777);

    let io = |e: std::io::Error| DockerError::io("building the image archive", e);
    let mut b = tar::Builder::new(Vec::new());
    let rel = |p: &Path| p.strip_prefix("/").unwrap_or(p).to_path_buf();
    for (d, mode) in &dirs {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(*mode);
        h.set_size(0);
        b.append_data(&mut h, rel(d), std::io::empty())
            .map_err(io)?;
    }
    for (name, data) in [("etc/passwd", PASSWD), ("etc/group", GROUP)] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data.as_bytes()).map_err(io)?;
    }
    for (image_path, host) in &content {
        // Read through links: the image gets the file itself at the path the loader and
        // `execve` will ask for.
        let data = std::fs::read(host)
            .map_err(|e| DockerError::io(format!("reading {}", host.display()), e))?;
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o755);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, rel(image_path), &data[..])
            .map_err(io)?;
    }
    b.into_inner().map_err(io)
}

/// The label that records what an image built here holds, so an unchanged rebuild is
/// skipped instead of piling up untagged copies on the engine.
const CONTENT_LABEL: &str = "sandbox.content";

/// A digest of the archive (not cryptographic: it only decides whether to rebuild our own
/// image).
fn content_key(archive: &[u8]) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    archive.hash(&mut h);
    format!("{:016x}-{}", h.finish(), archive.len())
}

/// Build image `tag` FROM scratch on the engine, without a registry: each `(host_path,
/// image_path)` binary is copied to its path in the image with the shared libraries it
/// needs (as `ldd` lists them), plus `/etc/passwd`, `/etc/group` (root and nobody) and a
/// world-writable `/tmp`. The image has no entrypoint or command of its own.
///
/// An image with the same contents already under `tag` is kept as it is; otherwise the
/// new one replaces it and the old one is removed (unless a container still uses it).
///
/// Used by this crate's tests and by the conformance suite, which builds
/// `sandbox-conformance:latest` around its probe.
pub async fn build_image_from_binaries(
    docker: &Docker,
    tag: &str,
    files: &[(PathBuf, PathBuf)],
) -> Result<(), SandboxError> {
    let files = files.to_vec();
    let archive = tokio::task::spawn_blocking(move || rootfs_archive(&files))
        .await
        .map_err(|e| SandboxError::io("building the image archive", std::io::Error::other(e)))??;
    let key = content_key(&archive);
    let old = docker.inspect_image(tag).await.ok();
    let old_key = old
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .and_then(|c| c.labels.as_ref())
        .and_then(|l| l.get(CONTENT_LABEL));
    if old_key == Some(&key) {
        return Ok(());
    }
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
    }

    #[test]
    fn the_rootfs_holds_the_binary_its_libraries_and_the_basics() {
        // The test binary itself is dynamically linked against libc.
        let me = std::env::current_exe().unwrap();
        let ar = rootfs_archive(&[(me, PathBuf::from("/usr/local/bin/t"))]).unwrap();
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
        assert!(rootfs_archive(&[("/nonexistent".into(), "/x".into())]).is_err());
        assert!(rootfs_archive(&[("/bin/sh".into(), "rel".into())]).is_err());
    }
}
