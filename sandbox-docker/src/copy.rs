//! Copy mode on the engine: trees into their volumes before the start, the changes back
//! after the end, captured files out of a container whose workspace was a throwaway copy.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, UploadToContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use sandbox_core::{Plan, SandboxError};
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::error::DockerError;
use crate::handover::{nested_in, Handover, Identity, Via};
use crate::prepare::owner_of;
use crate::spec;
use crate::transfer::{self, ChannelWriter, Upload, WriteBack};

/// Uploads and downloads of a large workspace take longer than the client's default
/// request timeout.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(3600);

/// How handover `i` is uploaded.
pub(crate) fn upload_for(i: usize, handovers: &[Handover], identity: &Identity) -> Upload {
    let h = &handovers[i];
    let nested = nested_in(&h.path, handovers);
    let rel = |p: &Path| p.strip_prefix(&h.path).unwrap_or(p).to_path_buf();
    Upload {
        root: h.path.clone(),
        top: spec::loader_path(i).trim_start_matches('/').to_string(),
        // A writable tree belongs to the command; a read-only one keeps its host owners,
        // so what the command could not read on the host it cannot read here either.
        owner: (!h.read_only).then_some((identity.uid, identity.gid)),
        read_only_inside: nested
            .iter()
            .filter(|n| n.via == Via::InsideCopy)
            .map(|n| rel(&n.path))
            .collect(),
        read_only_group: identity.gid,
        skip: nested
            .iter()
            .filter(|n| n.via != Via::InsideCopy)
            .map(|n| rel(&n.path))
            .collect(),
    }
}

/// Stream the archive of `up` into the loader's mount of its volume.
///
/// The archive is unpacked at the loader's root, its entries named from there: the
/// engine refuses a relative link whose target climbs above the directory it unpacks
/// into, so unpacked into the volume's parent, a workspace link such as `up ->
/// ../../x` (legal, and copied as a link by every other backend) failed the run. Every
/// entry is still below the volume's mount point, and nothing is ever unpacked through a
/// link (the walk does not follow them).
pub(crate) async fn upload(
    docker: &Docker,
    loader: &str,
    up: Upload,
) -> Result<BTreeSet<PathBuf>, DockerError> {
    let root = up.root.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let builder = tokio::task::spawn_blocking(move || {
        let mut w = ChannelWriter::new(tx.clone());
        let r = transfer::write_archive(&up, &mut w);
        if let Err(e) = &r {
            // Fail the upload too, so the engine does not keep half an archive.
            let _ = tx.blocking_send(Err(std::io::Error::new(e.kind(), e.to_string())));
        }
        r
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let sent = docker
        .clone()
        .with_timeout(TRANSFER_TIMEOUT)
        .upload_to_container(
            loader,
            Some(
                UploadToContainerOptionsBuilder::new()
                    .path(transfer::UPLOAD_TO)
                    .build(),
            ),
            bollard::body_try_stream(body),
        )
        .await;
    let built = builder
        .await
        .map_err(|e| DockerError::io("building the upload archive", std::io::Error::other(e)))?;
    let seen = built.map_err(|e| {
        DockerError::io(format!("copying {} into the container", root.display()), e)
    })?;
    sent.map_err(|e| DockerError::engine(format!("upload {}", root.display()), e))?;
    Ok(seen)
}

/// Download a copied tree from the stopped container and apply it to the host.
pub(crate) async fn write_back(
    docker: &Docker,
    id: &str,
    h: &Handover,
    handovers: &[Handover],
    uploaded: &BTreeSet<PathBuf>,
) -> Result<(), SandboxError> {
    let path = h.path.to_string_lossy().into_owned();
    let mut stream = docker
        .clone()
        .with_timeout(TRANSFER_TIMEOUT)
        .download_from_container(
            id,
            Some(
                DownloadFromContainerOptionsBuilder::new()
                    .path(&path)
                    .build(),
            ),
        );
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let root = h.path.clone();
    let keep: Vec<PathBuf> = nested_in(&h.path, handovers)
        .iter()
        .map(|n| {
            n.path
                .strip_prefix(&h.path)
                .unwrap_or(&n.path)
                .to_path_buf()
        })
        .collect();
    let uploaded = uploaded.clone();
    // New files belong to the tree's owner, as they would after a bind-mounted run.
    let chown_new = owner_of(&h.path);
    // The chunks as one blocking `Read`, for the archive's reader on its own thread.
    let chunks = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let archive = SyncIoBridge::new(StreamReader::new(Box::pin(chunks)));
    let apply = tokio::task::spawn_blocking(move || {
        transfer::apply_archive(
            archive,
            &WriteBack {
                root: &root,
                uploaded: &uploaded,
                keep: &keep,
                chown_new,
            },
        )
    });
    let mut fetch_err = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => {
                if tx.send(Ok(b)).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                fetch_err = Some(e);
                break;
            }
        }
    }
    drop(tx);
    let applied = apply
        .await
        .map_err(|e| SandboxError::io("copying the changes back", std::io::Error::other(e)))?;
    if let Some(e) = fetch_err {
        return Err(DockerError::engine(format!("download {path}"), e).into());
    }
    applied.map_err(|e| SandboxError::io(format!("copying the changes back into {path}"), e))?;
    Ok(())
}

/// The files the caller asked for: from the host workspace (or the run's layer) when the
/// changes are there, from the container when the run was against a throwaway copy.
pub(crate) async fn captured_files(
    docker: &Docker,
    id: &str,
    plan: &Plan,
    handovers: &[Handover],
) -> Result<BTreeMap<PathBuf, Vec<u8>>, SandboxError> {
    let ws = &handovers[0];
    let cap = plan.output_limit;
    if ws.via != (Via::Volume { write_back: false }) {
        let names = plan.capture_files.clone();
        // The command's view: the workspace, or the layer bound at its path.
        let root = ws.source.clone();
        return tokio::task::spawn_blocking(move || {
            sandbox_host::process::files::capture_files(&root, &names, cap)
        })
        .await
        .map_err(|e| SandboxError::io("reading captured files", std::io::Error::other(e)));
    }
    let mut out = BTreeMap::new();
    for name in &plan.capture_files {
        let path = plan.workspace.join(name);
        let mut stream = docker.download_from_container(
            id,
            Some(
                DownloadFromContainerOptionsBuilder::new()
                    .path(&path.to_string_lossy())
                    .build(),
            ),
        );
        let mut bytes = Vec::new();
        let mut failed = false;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => bytes.extend_from_slice(&b),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
            // The archive of one file: its data plus headers and padding.
            if bytes.len() > cap + 64 * 1024 {
                break;
            }
        }
        if failed {
            continue;
        }
        if let Ok(Some(data)) = transfer::single_file(&bytes[..], cap) {
            out.insert(name.clone(), data);
        }
    }
    Ok(out)
}
