//! `deploy/`: the Pod manifests give each lane exactly the securityContext docs/cluster.md
//! says, and no field outside the Pod schema: a misspelt or unknown field fails here rather
//! than being dropped by a lenient client. The field lists are a hand-kept subset of
//! `io.k8s.api.core.v1` (the part these manifests use), not the release's OpenAPI
//! document, which no registry this workspace uses ships.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::path::Path;

fn manifest(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The fields of each object kind these manifests may use, from the Pod schema
/// (`io.k8s.api.core.v1.*`); every key of the manifest must be one of its kind's.
fn known_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Pod" => &["apiVersion", "kind", "metadata", "spec"],
        "ObjectMeta" => &["name", "namespace", "labels", "annotations"],
        "PodSpec" => &[
            "automountServiceAccountToken",
            "containers",
            "hostUsers",
            "securityContext",
            "volumes",
            "serviceAccountName",
        ],
        "PodSecurityContext" => &[
            "runAsNonRoot",
            "runAsUser",
            "runAsGroup",
            "fsGroup",
            "seccompProfile",
        ],
        "Container" => &[
            "name",
            "image",
            "imagePullPolicy",
            "command",
            "args",
            "env",
            "securityContext",
            "volumeMounts",
        ],
        "SecurityContext" => &[
            "allowPrivilegeEscalation",
            "capabilities",
            "privileged",
            "procMount",
            "readOnlyRootFilesystem",
            "runAsNonRoot",
            "runAsUser",
            "seccompProfile",
        ],
        "SeccompProfile" => &["type", "localhostProfile"],
        "Capabilities" => &["add", "drop"],
        "VolumeMount" => &["name", "mountPath", "readOnly"],
        "Volume" => &["name", "emptyDir"],
        other => panic!("no schema for {other}"),
    }
}

fn check(kind: &str, v: &Value, at: &str) {
    let obj = v
        .as_object()
        .unwrap_or_else(|| panic!("{at}: not an object"));
    for (k, child) in obj {
        assert!(
            known_fields(kind).contains(&k.as_str()),
            "{at}.{k}: not a field of {kind}"
        );
        let here = format!("{at}.{k}");
        let sub = match (kind, k.as_str()) {
            ("Pod", "metadata") => Some("ObjectMeta"),
            ("Pod", "spec") => Some("PodSpec"),
            ("PodSpec", "securityContext") => Some("PodSecurityContext"),
            ("Container", "securityContext") => Some("SecurityContext"),
            (_, "seccompProfile") => Some("SeccompProfile"),
            ("SecurityContext", "capabilities") => Some("Capabilities"),
            _ => None,
        };
        if let Some(sub) = sub {
            check(sub, child, &here);
        }
        let each = match (kind, k.as_str()) {
            ("PodSpec", "containers") => Some("Container"),
            ("PodSpec", "volumes") => Some("Volume"),
            ("Container", "volumeMounts") => Some("VolumeMount"),
            _ => None,
        };
        if let Some(each) = each {
            for (i, item) in child.as_array().unwrap().iter().enumerate() {
                check(each, item, &format!("{here}[{i}]"));
            }
        }
    }
}

#[test]
fn every_field_of_both_manifests_is_in_the_pod_schema() {
    for name in ["pod-fast.json", "pod-strict.json"] {
        let m = manifest(name);
        assert_eq!(m["apiVersion"], "v1", "{name}");
        assert_eq!(m["kind"], "Pod", "{name}");
        check("Pod", &m, name);
        // The enums' values as the schema spells them.
        let p = &m["spec"]["securityContext"]["seccompProfile"]["type"];
        assert!(
            ["RuntimeDefault", "Localhost", "Unconfined"].contains(&p.as_str().unwrap()),
            "{name}: {p}"
        );
    }
}

/// `fast`: a default pod (the runtime's seccomp profile, masked /proc, no capabilities, a
/// non-root user): nothing beyond what any restricted pod has.
#[test]
fn the_fast_pod_is_a_default_restricted_pod() {
    let m = manifest("pod-fast.json");
    let spec = &m["spec"];
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert!(spec.get("hostUsers").is_none());
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert!(c["securityContext"].get("procMount").is_none());
    assert!(c["securityContext"].get("privileged").is_none());
    assert!(c["args"]
        .as_array()
        .unwrap()
        .windows(2)
        .any(|w| w[0] == "--lane" && w[1] == "fast"));
}

/// `strict`: what it needs and no more: namespaces (a seccomp profile that allows them, in
/// a user namespace of the pod's own) and an unmasked /proc; never privileged, no
/// capability added.
#[test]
fn the_strict_pod_allows_namespaces_and_its_own_proc_and_nothing_else() {
    let m = manifest("pod-strict.json");
    let spec = &m["spec"];
    assert_eq!(spec["hostUsers"], false);
    assert_ne!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["procMount"], "Unmasked");
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert!(c["securityContext"]["capabilities"].get("add").is_none());
    assert!(c["securityContext"].get("privileged").is_none());
}

/// The Dockerfile runs the sandbox as a non-root user.
#[test]
fn the_dockerfile_runs_the_sandbox_as_a_non_root_user() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/Dockerfile");
    let text = std::fs::read_to_string(path).unwrap();
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(
        !user.starts_with('0') && !user.starts_with("root"),
        "{user}"
    );
    assert!(text.contains("ENTRYPOINT [\"sandbox\"]"));
}
