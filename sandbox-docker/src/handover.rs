//! Who the command runs as, and how each named host path reaches the container: pure
//! decisions over the plan and the owners of the paths.
//!
//! # The uid
//!
//! Root on the host must not be root in the container: a uid-0 process, even with every
//! capability dropped, owns root's files (it reads a root-only secret it was granted only
//! the directory of, and `chmod u+s` on a file it made leaves a setuid-root program in the
//! workspace for the host to run later). So:
//!
//! - a caller that is not root runs the command as itself (its own uid and gid), and the
//!   workspace is writable because it is the caller's;
//! - a root caller runs it as the **owner of the workspace** when that is not root (the
//!   usual `sudo` over a user's checkout): files the command makes belong to the tree's
//!   owner, exactly as if that user had run it;
//! - a root caller with a root-owned workspace (CI, where everything is root's) runs it as
//!   `nobody` (65534:65534). `nobody` cannot write root's tree, and changing the
//!   ownership or ACLs of the user's files is not ours to do, so the tree is bind-mounted
//!   through an idmapped mount ([`crate::idmap`]) on which root's files appear as
//!   `nobody`'s: the command writes it live, and what it makes is root's on disk (with
//!   setuid and setgid bits refused by the system-call filter). Where the kernel or the
//!   filesystem cannot make idmapped mounts, the tree travels by copy instead: uploaded
//!   owned by the command's uid and the changes copied back after the end.
//!
//! The same holds for named writable paths the command's uid does not own.
//!
//! Group 0 is never handed to the command either: a workspace owned by `alice:root` runs
//! as `alice:nogroup`.

use std::path::{Path, PathBuf};

use sandbox_core::record::ChosenUid;
use sandbox_host::idmap::{not_group_root, root_host_identity};

use crate::config::WorkspaceMode;

pub use sandbox_host::idmap::NOBODY;

/// Why the command runs as the uid it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdentityReason {
    /// The caller is not root: its own uid.
    Caller,
    /// The caller is root: the workspace's owner.
    WorkspaceOwner,
    /// The caller is root and so is the workspace's owner: `nobody`.
    Unprivileged,
}

/// The uid and gid of the command inside the container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub reason: IdentityReason,
}

impl Identity {
    /// The record for the effective policy.
    pub(crate) fn record(&self) -> sandbox_core::record::Identity {
        sandbox_core::record::Identity::InContainer {
            uid: self.uid,
            gid: self.gid,
            chosen: match self.reason {
                IdentityReason::Caller => ChosenUid::Caller,
                IdentityReason::WorkspaceOwner => ChosenUid::WorkspaceOwner,
                IdentityReason::Unprivileged => ChosenUid::Nobody,
            },
        }
    }
}

/// Choose the command's uid: see the module docs.
pub(crate) fn choose_identity(
    host_uid: u32,
    host_gid: u32,
    workspace_owner: Option<(u32, u32)>,
) -> Identity {
    if host_uid != 0 {
        return Identity {
            uid: host_uid,
            gid: not_group_root(host_gid),
            reason: IdentityReason::Caller,
        };
    }
    let (uid, gid) = root_host_identity(workspace_owner);
    let reason = match workspace_owner {
        Some((owner, _)) if owner != 0 => IdentityReason::WorkspaceOwner,
        _ => IdentityReason::Unprivileged,
    };
    Identity { uid, gid, reason }
}

/// What a handed-over path is, for the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The workspace: writable, the working directory.
    Workspace,
    /// A read-only carve-out inside the workspace.
    Carveout,
    /// A named read-only path.
    ReadOnly,
    /// A named writable path.
    Writable,
}

/// How a path travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// Bind-mounted from the engine's host at the same path.
    Bind,
    /// Bind-mounted at the same path through an idmapped mount on which files of on-disk
    /// owner `from` (uid, gid) appear owned by the command.
    IdmappedBind {
        /// The tree's owner on disk.
        from: (u32, u32),
    },
    /// Uploaded into a volume of its own before the start; when `write_back`, the changed
    /// files are copied back to the host after the end.
    Volume {
        /// Copy the changes back.
        write_back: bool,
    },
    /// Part of a copied workspace: uploaded owned by root and without write permission,
    /// never copied back.
    InsideCopy,
}

/// One host path and how the command gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Handover {
    /// The canonical host path; also the path inside the container.
    pub path: PathBuf,
    /// Where its contents are on the host: `path` itself, or for the workspace (and the
    /// carve-outs inside it) of a run on a layer, the same place in the layer's tree.
    pub source: PathBuf,
    /// What it is.
    pub role: Role,
    /// How it travels.
    pub via: Via,
    /// The command may not write it (read-only paths, carve-outs, and a workspace that is
    /// itself named as a carve-out).
    pub read_only: bool,
}

/// What [`plan_handovers`] decides from.
pub(crate) struct Request<'a> {
    /// The workspace (canonical).
    pub workspace: &'a Path,
    /// The tree of the run's layer over the workspace, bound at the workspace's path
    /// instead of the workspace itself (a run whose changes are held for review).
    pub layer: Option<&'a Path>,
    /// Read-only carve-outs inside the workspace.
    pub carveouts: &'a [PathBuf],
    /// Named read-only paths.
    pub read_only: &'a [PathBuf],
    /// Read-only paths named through a host symlink: `(as named, canonical)`.
    pub read_only_links: &'a [(PathBuf, PathBuf)],
    /// Named writable paths.
    pub writable: &'a [PathBuf],
    /// The backend's workspace mode.
    pub mode: WorkspaceMode,
    /// A throwaway copy of the workspace (changes discarded).
    pub snapshot: bool,
    /// The host runs as root.
    pub host_is_root: bool,
    /// Who the command runs as.
    pub identity: &'a Identity,
    /// Idmapped staging is possible.
    pub idmap: bool,
    /// A host path's owner (None when it cannot be read).
    pub owner: &'a dyn Fn(&Path) -> Option<(u32, u32)>,
}

/// Decide how each path of the plan reaches the container.
///
/// A writable tree is copied instead of bound when the workspace mode says so, or in
/// snapshot mode without a layer (the workspace only: the original must not be touched). When the host is
/// root and a writable tree's host side is not the command uid's own, it is bound through
/// an idmapped mount, or copied when `idmap` is false (the host cannot make one). With a
/// layer, the workspace's host side is the layer's tree (and the carve-outs inside it are
/// the same places in the layer), decided by the layer's owner. Duplicates keep the most
/// capable role: a path named both read-only and writable is writable; a path equal to
/// the workspace is the workspace; carve-outs always stay read-only.
pub(crate) fn plan_handovers(r: &Request<'_>) -> Vec<Handover> {
    let copy = r.mode == WorkspaceMode::Copy;
    let identity = r.identity;
    // How a writable tree the command uid does not own travels, when the host is root.
    let writable_via = |p: &Path| -> Via {
        match (r.owner)(p) {
            Some((uid, _)) if uid == identity.uid => Via::Bind,
            _ if !r.host_is_root => Via::Bind,
            Some(from) if r.idmap => Via::IdmappedBind { from },
            _ => Via::Volume { write_back: true },
        }
    };
    // Where a path inside the workspace is on the host.
    let source_of = |p: &Path| -> PathBuf {
        match (r.layer, p.strip_prefix(r.workspace)) {
            (Some(layer), Ok(rel)) if rel.as_os_str().is_empty() => layer.to_path_buf(),
            (Some(layer), Ok(rel)) => layer.join(rel),
            _ => p.to_path_buf(),
        }
    };
    let workspace = r.workspace;
    let mut out = Vec::new();
    // A snapshot over a layer binds the layer (a host copy that keeps holes, under core's
    // cap); without one it is a volume, which the engine fills densely.
    let ws_via = if copy || (r.snapshot && r.layer.is_none()) {
        Via::Volume {
            write_back: !r.snapshot,
        }
    } else {
        writable_via(&source_of(workspace))
    };
    out.push(Handover {
        path: workspace.to_path_buf(),
        source: source_of(workspace),
        role: Role::Workspace,
        via: ws_via,
        read_only: false,
    });
    let taken = |out: &Vec<Handover>, p: &Path| out.iter().any(|h| h.path == p);
    for p in r.writable {
        if taken(&out, p) {
            continue;
        }
        let via = if copy {
            Via::Volume { write_back: true }
        } else {
            writable_via(p)
        };
        out.push(Handover {
            path: p.clone(),
            source: p.clone(),
            role: Role::Writable,
            via,
            read_only: false,
        });
    }
    for p in r.read_only {
        if taken(&out, p) {
            continue;
        }
        let via = if copy {
            Via::Volume { write_back: false }
        } else {
            Via::Bind
        };
        out.push(Handover {
            path: p.clone(),
            source: p.clone(),
            role: Role::ReadOnly,
            via,
            read_only: true,
        });
    }
    // A read path named through a host symlink (`--read /lib` with `/lib -> usr/lib`):
    // the container has a root of its own, where the name is the image's entry (or
    // nothing), so the target is bound at the name too, read-only, as the process
    // backends show it; the outcome's notes say so.
    for (named, canon) in r.read_only_links {
        if taken(&out, named) || !out.iter().any(|h| h.path == *canon) {
            continue;
        }
        out.push(Handover {
            path: named.clone(),
            source: canon.clone(),
            role: Role::ReadOnly,
            via: if copy {
                Via::Volume { write_back: false }
            } else {
                Via::Bind
            },
            read_only: true,
        });
    }
    for p in r.carveouts {
        if p == workspace {
            // The caller made the whole workspace read-only: one read-only mount, not two
            // mounts on the same path (which the engine refuses).
            out[0].read_only = true;
            continue;
        }
        let via = if matches!(ws_via, Via::Volume { .. }) {
            Via::InsideCopy
        } else {
            Via::Bind
        };
        // A carve-out wins over a writable path named at the same place.
        out.retain(|h| h.path != *p);
        out.push(Handover {
            path: p.clone(),
            source: source_of(p),
            role: Role::Carveout,
            via,
            read_only: true,
        });
    }
    // Each directory between a bound writable tree and a carve-out in it is bound onto
    // itself, writable and the same way as the tree: a mount point cannot be renamed, so the
    // command cannot move it away with the carve-out in it and make its own in its place
    // (`mv .git x; mkdir -p .git/hooks`). A copied tree holds its carve-outs root-owned.
    let carveouts: Vec<PathBuf> = out
        .iter()
        .filter(|h| h.role == Role::Carveout)
        .map(|h| h.path.clone())
        .collect();
    for c in &carveouts {
        let Some(holder) = out
            .iter()
            .filter(|h| {
                matches!(h.role, Role::Workspace | Role::Writable)
                    && !h.read_only
                    && h.path != *c
                    && c.starts_with(&h.path)
            })
            .max_by_key(|h| h.path.components().count())
            .cloned()
        else {
            continue;
        };
        if !matches!(holder.via, Via::Bind | Via::IdmappedBind { .. }) {
            continue;
        }
        let Ok(rel) = c.strip_prefix(&holder.path) else {
            continue;
        };
        let (mut at, mut source) = (holder.path.clone(), holder.source.clone());
        for part in rel.parent().into_iter().flat_map(Path::components) {
            at.push(part);
            source.push(part);
            if taken(&out, &at) {
                continue;
            }
            out.push(Handover {
                path: at.clone(),
                source: source.clone(),
                role: holder.role,
                via: holder.via,
                read_only: false,
            });
        }
    }
    out
}

impl Handover {
    /// Bind-mounted from its own path, as it is: what a pooled container, made before any
    /// run's staging mounts or layer existed, can hold.
    pub(crate) fn bound_as_is(&self) -> bool {
        self.via == Via::Bind && self.source == self.path
    }
}

/// The handovers strictly inside `root`, other than `root` itself: their contents travel
/// on their own and are left out of `root`'s upload and download. Carve-outs inside a
/// copied workspace are the exception: they travel with it.
pub(crate) fn nested_in<'a>(root: &Path, all: &'a [Handover]) -> Vec<&'a Handover> {
    all.iter()
        .filter(|h| h.path != root && h.path.starts_with(root))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn a_non_root_caller_runs_as_itself() {
        let id = choose_identity(1000, 1000, Some((0, 0)));
        assert_eq!(
            (id.uid, id.gid, id.reason),
            (1000, 1000, IdentityReason::Caller)
        );
    }

    #[test]
    fn root_runs_as_the_workspace_owner_or_nobody_never_as_root() {
        let id = choose_identity(0, 0, Some((1000, 1001)));
        assert_eq!(
            (id.uid, id.gid, id.reason),
            (1000, 1001, IdentityReason::WorkspaceOwner)
        );
        let id = choose_identity(0, 0, Some((0, 0)));
        assert_eq!((id.uid, id.gid), (NOBODY, NOBODY));
        let id = choose_identity(0, 0, None);
        assert_eq!((id.uid, id.gid), (NOBODY, NOBODY));
        // Group root is not handed over either.
        let id = choose_identity(0, 0, Some((1000, 0)));
        assert_eq!((id.uid, id.gid), (1000, NOBODY));
        let id = choose_identity(1000, 0, None);
        assert_eq!(id.gid, NOBODY);
    }

    fn plan(mode: WorkspaceMode, snapshot: bool, root: bool, owner: u32, id: u32) -> Vec<Handover> {
        plan_idmap(mode, snapshot, root, owner, id, true)
    }

    fn plan_idmap(
        mode: WorkspaceMode,
        snapshot: bool,
        root: bool,
        owner: u32,
        id: u32,
        idmap: bool,
    ) -> Vec<Handover> {
        let ident = Identity {
            uid: id,
            gid: id,
            reason: IdentityReason::Caller,
        };
        plan_handovers(&Request {
            workspace: &p("/ws"),
            layer: None,
            carveouts: &[p("/ws/.git/hooks")],
            read_only: &[p("/ro"), p("/both")],
            read_only_links: &[(p("/lib"), p("/ro")), (p("/gone"), p("/elsewhere"))],
            writable: &[p("/rw"), p("/both")],
            mode,
            snapshot,
            host_is_root: root,
            identity: &ident,
            idmap,
            owner: &|_| Some((owner, owner)),
        })
    }

    fn via(hs: &[Handover], path: &str) -> (Role, Via) {
        let h = hs.iter().find(|h| h.path == p(path)).unwrap();
        (h.role, h.via)
    }

    #[test]
    fn a_read_path_named_through_a_link_is_bound_at_its_name_too() {
        for (mode, via) in [
            (WorkspaceMode::Bind, Via::Bind),
            (WorkspaceMode::Copy, Via::Volume { write_back: false }),
        ] {
            let hs = plan(mode, false, false, 1000, 1000);
            let lib = hs.iter().find(|h| h.path == p("/lib")).unwrap();
            assert_eq!(
                (&lib.source, lib.role, lib.via, lib.read_only),
                (&p("/ro"), Role::ReadOnly, via, true)
            );
            assert_eq!(via_of(&hs, "/ro"), via);
            // Only for a path that is handed over.
            assert!(hs.iter().all(|h| h.path != p("/gone")));
        }
    }

    fn via_of(hs: &[Handover], path: &str) -> Via {
        via(hs, path).1
    }

    #[test]
    fn bind_mode_binds_everything() {
        let hs = plan(WorkspaceMode::Bind, false, false, 1000, 1000);
        assert_eq!(via(&hs, "/ws"), (Role::Workspace, Via::Bind));
        assert_eq!(via(&hs, "/rw"), (Role::Writable, Via::Bind));
        assert_eq!(via(&hs, "/ro"), (Role::ReadOnly, Via::Bind));
        assert_eq!(via(&hs, "/ws/.git/hooks"), (Role::Carveout, Via::Bind));
        // Named both ways: writable, once.
        assert_eq!(via(&hs, "/both"), (Role::Writable, Via::Bind));
        assert_eq!(hs.iter().filter(|h| h.path == p("/both")).count(), 1);
    }

    #[test]
    fn copy_mode_copies_everything_and_writes_back_only_writable_trees() {
        let hs = plan(WorkspaceMode::Copy, false, false, 1000, 1000);
        assert_eq!(
            via(&hs, "/ws"),
            (Role::Workspace, Via::Volume { write_back: true })
        );
        assert_eq!(
            via(&hs, "/rw"),
            (Role::Writable, Via::Volume { write_back: true })
        );
        assert_eq!(
            via(&hs, "/ro"),
            (Role::ReadOnly, Via::Volume { write_back: false })
        );
        assert_eq!(
            via(&hs, "/ws/.git/hooks"),
            (Role::Carveout, Via::InsideCopy)
        );
    }

    #[test]
    fn snapshot_copies_the_workspace_and_never_writes_it_back() {
        let hs = plan(WorkspaceMode::Bind, true, false, 1000, 1000);
        assert_eq!(
            via(&hs, "/ws"),
            (Role::Workspace, Via::Volume { write_back: false })
        );
        assert_eq!(via(&hs, "/rw"), (Role::Writable, Via::Bind));
    }

    #[test]
    fn a_root_host_binds_foreign_trees_through_an_idmap_or_copies_them() {
        let hs = plan(WorkspaceMode::Bind, false, true, 0, NOBODY);
        assert_eq!(
            via(&hs, "/ws"),
            (Role::Workspace, Via::IdmappedBind { from: (0, 0) })
        );
        assert_eq!(
            via(&hs, "/rw"),
            (Role::Writable, Via::IdmappedBind { from: (0, 0) })
        );
        // Read-only paths keep their host permissions through a plain bind.
        assert_eq!(via(&hs, "/ro"), (Role::ReadOnly, Via::Bind));
        // Carve-outs sit on top of the live workspace as read-only binds.
        assert_eq!(via(&hs, "/ws/.git/hooks"), (Role::Carveout, Via::Bind));
        // Without idmapped mounts: copied, carve-outs travelling inside the copy.
        let hs = plan_idmap(WorkspaceMode::Bind, false, true, 0, NOBODY, false);
        assert_eq!(
            via(&hs, "/ws"),
            (Role::Workspace, Via::Volume { write_back: true })
        );
        assert_eq!(
            via(&hs, "/ws/.git/hooks"),
            (Role::Carveout, Via::InsideCopy)
        );
        // What the command uid owns is bound as it is.
        let hs = plan(WorkspaceMode::Bind, false, true, 1000, 1000);
        assert_eq!(via(&hs, "/ws"), (Role::Workspace, Via::Bind));
        // A non-root host never maps anything: the caller's rights are the command's.
        let hs = plan(WorkspaceMode::Bind, false, false, 0, 1000);
        assert_eq!(via(&hs, "/ws"), (Role::Workspace, Via::Bind));
    }

    #[test]
    fn the_directories_on_the_way_to_a_carveout_are_bound_onto_themselves_writable() {
        for (root, id, via) in [
            (false, 1000, Via::Bind),
            (true, NOBODY, Via::IdmappedBind { from: (1000, 1000) }),
        ] {
            let ident = Identity {
                uid: id,
                gid: id,
                reason: IdentityReason::Caller,
            };
            let hs = plan_handovers(&Request {
                workspace: &p("/ws"),
                layer: None,
                carveouts: &[p("/ws/vendor/lib/.git/hooks"), p("/rw/state/cache")],
                read_only: &[],
                read_only_links: &[],
                writable: &[p("/rw")],
                mode: WorkspaceMode::Bind,
                snapshot: false,
                host_is_root: root,
                identity: &ident,
                idmap: true,
                owner: &|_| Some((1000, 1000)),
            });
            for (d, role) in [
                ("/ws/vendor", Role::Workspace),
                ("/ws/vendor/lib", Role::Workspace),
                ("/ws/vendor/lib/.git", Role::Workspace),
                ("/rw/state", Role::Writable),
            ] {
                let h = hs
                    .iter()
                    .find(|h| h.path == p(d))
                    .unwrap_or_else(|| panic!("{d} is not pinned"));
                assert_eq!((h.role, h.via, h.read_only), (role, via, false), "{d}");
                assert_eq!(h.source, p(d));
            }
            // Nothing past the carve-out's parent, and the carve-out stays read-only.
            assert_eq!(hs.len(), 8);
            assert!(hs
                .iter()
                .any(|h| h.path == p("/ws/vendor/lib/.git/hooks") && h.read_only));
        }
        // A copied workspace holds its carve-outs root-owned: nothing to pin.
        let hs = plan_idmap(WorkspaceMode::Bind, false, true, 0, NOBODY, false);
        assert!(!hs.iter().any(|h| h.path == p("/ws/.git")));
        // On a layer the pinned directory comes from the layer's tree.
        let hs = plan_layer(false, 1000, true);
        assert_eq!(at(&hs, "/ws/.git"), (p("/tmp/layer/copy/.git"), Via::Bind));
    }

    #[test]
    fn a_carveout_equal_to_the_workspace_makes_it_read_only() {
        let ident = choose_identity(1000, 1000, None);
        let hs = plan_handovers(&Request {
            workspace: &p("/ws"),
            layer: None,
            carveouts: &[p("/ws")],
            read_only: &[],
            read_only_links: &[],
            writable: &[],
            mode: WorkspaceMode::Bind,
            snapshot: false,
            host_is_root: false,
            identity: &ident,
            idmap: true,
            owner: &|_| Some((1000, 1000)),
        });
        assert_eq!(hs.len(), 1);
        assert!(hs[0].read_only && hs[0].role == Role::Workspace);
    }

    fn plan_layer(root: bool, id: u32, idmap: bool) -> Vec<Handover> {
        plan_layer_as(root, id, idmap, false)
    }

    fn plan_layer_as(root: bool, id: u32, idmap: bool, snapshot: bool) -> Vec<Handover> {
        let ident = Identity {
            uid: id,
            gid: id,
            reason: IdentityReason::Caller,
        };
        // The layer is the host's (root's, or the caller's own); the real trees are 1000's.
        let layer_owner = if root { 0 } else { id };
        plan_handovers(&Request {
            workspace: &p("/ws"),
            layer: Some(&p("/tmp/layer/copy")),
            carveouts: &[p("/ws/.git/hooks")],
            read_only: &[p("/ro")],
            read_only_links: &[],
            writable: &[p("/rw")],
            mode: WorkspaceMode::Bind,
            snapshot,
            host_is_root: root,
            identity: &ident,
            idmap,
            owner: &|q| {
                Some(if q.starts_with("/tmp/layer") {
                    (layer_owner, layer_owner)
                } else {
                    (1000, 1000)
                })
            },
        })
    }

    fn at(hs: &[Handover], path: &str) -> (PathBuf, Via) {
        let h = hs.iter().find(|h| h.path == p(path)).unwrap();
        (h.source.clone(), h.via)
    }

    #[test]
    fn a_layer_is_bound_at_the_workspace_path_with_its_carveouts_and_nothing_else() {
        // Not root: the layer is the caller's, bound as it is at the workspace's path.
        let hs = plan_layer(false, 1000, true);
        assert_eq!(at(&hs, "/ws"), (p("/tmp/layer/copy"), Via::Bind));
        assert_eq!(
            at(&hs, "/ws/.git/hooks"),
            (p("/tmp/layer/copy/.git/hooks"), Via::Bind)
        );
        // Paths outside the workspace are the real ones.
        assert_eq!(at(&hs, "/rw"), (p("/rw"), Via::Bind));
        assert_eq!(at(&hs, "/ro"), (p("/ro"), Via::Bind));
        // The workspace is not bound from its own path: never a pooled container's.
        assert!(!hs[0].bound_as_is());
        // Within the workspace (a carve-out, a directory pinned on the way to one), from
        // the layer.
        assert_eq!(at(&hs, "/ws/.git"), (p("/tmp/layer/copy/.git"), Via::Bind));
        assert!(hs[1..]
            .iter()
            .all(|h| h.bound_as_is() || h.source.starts_with("/tmp/layer/copy")));
        // Root: the layer is root's, handed to the command's uid by an idmapped mount,
        // whoever owns the real workspace.
        for id in [1000, NOBODY] {
            let hs = plan_layer(true, id, true);
            assert_eq!(
                at(&hs, "/ws"),
                (p("/tmp/layer/copy"), Via::IdmappedBind { from: (0, 0) })
            );
        }
        // Without idmapped mounts it would travel by copy, which a run refuses.
        let hs = plan_layer(true, 1000, false);
        assert_eq!(at(&hs, "/ws").1, Via::Volume { write_back: true });
    }

    #[test]
    fn a_snapshot_on_a_layer_binds_the_layer_instead_of_a_volume() {
        let hs = plan_layer_as(false, 1000, true, true);
        assert_eq!(at(&hs, "/ws"), (p("/tmp/layer/copy"), Via::Bind));
        let hs = plan_layer_as(true, NOBODY, true, true);
        assert_eq!(
            at(&hs, "/ws"),
            (p("/tmp/layer/copy"), Via::IdmappedBind { from: (0, 0) })
        );
        // The original is never bound writable.
        assert!(hs.iter().all(|h| h.source != p("/ws")));
    }

    #[test]
    fn nested_handovers_are_found() {
        let hs = plan(WorkspaceMode::Bind, false, false, 1000, 1000);
        let nested: Vec<_> = nested_in(&p("/ws"), &hs).iter().map(|h| &h.path).collect();
        assert_eq!(nested, vec![&p("/ws/.git/hooks"), &p("/ws/.git")]);
    }
}
