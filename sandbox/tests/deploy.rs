//! `deploy/`: the Pod manifests give each lane exactly the securityContext docs/cluster.md
//! says, and are valid Pods of a named Kubernetes release: each is walked against the Pod
//! schema of Kubernetes v1.33.0 kept in `deploy/schema/k8s-v1.33-pod.json` (the release's
//! definitions that `io.k8s.api.core.v1.Pod` reaches, unchanged; its `$comment` says where
//! they come from). A misspelt or unknown field, a value of the wrong JSON type, a value
//! outside an enum the schema has, or a missing required field fails here, as the API
//! server's strict field validation (`kubectl apply --validate=strict`) would refuse it,
//! rather than being dropped by a lenient client.
//!
//! v1.33 because it is the oldest release docs/cluster.md supports for `strict` (user
//! namespaces on by default): a field these manifests use must exist there.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::path::Path;
use std::sync::OnceLock;

fn read_json(relative: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn manifest(name: &str) -> Value {
    read_json(&format!("deploy/{name}"))
}

/// The kept definitions, by name.
fn definitions() -> &'static serde_json::Map<String, Value> {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| read_json("deploy/schema/k8s-v1.33-pod.json"))["$defs"]
        .as_object()
        .expect("a `$defs` object")
}

const POD: &str = "#/$defs/io.k8s.api.core.v1.Pod";

/// Whether `v` is of the JSON Schema type `ty`.
fn is_type(v: &Value, ty: &str) -> bool {
    match ty {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        other => panic!("the schema names a type this walker does not know: {other}"),
    }
}

/// Every way `v` at `at` breaks `schema`, walking into objects and arrays. What the
/// Kubernetes schemas use is read: `$ref` (to `#/$defs/NAME`), `type` (one or a list),
/// `enum`, `oneOf` (int-or-string, quantities), `properties` (a key not among them is an
/// error unless `additionalProperties` gives the others' schema), `additionalProperties`,
/// `required` and `items`. `format` is not checked.
fn violations(v: &Value, schema: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("{at}: a $ref outside the kept definitions: {r}"));
        let target = definitions()
            .get(name)
            .unwrap_or_else(|| panic!("{at}: {name} is not in the kept definitions"));
        // Beside a `$ref` these schemas have only a description.
        return violations(v, target, at, out);
    }
    if let Some(ty) = schema.get("type") {
        let types: Vec<&str> = match ty {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => panic!("{at}: a type that is neither a name nor a list: {other}"),
        };
        if !types.iter().any(|t| is_type(v, t)) {
            out.push(format!("{at}: {v} is not of type {}", types.join(" or ")));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            out.push(format!("{at}: {v} is not one of {allowed:?}"));
        }
    }
    if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = branches
            .iter()
            .filter(|b| {
                let mut errs = Vec::new();
                violations(v, b, at, &mut errs);
                errs.is_empty()
            })
            .count();
        if matching != 1 {
            out.push(format!(
                "{at}: {v} matches {matching} of the schema's oneOf"
            ));
        }
    }
    if let Some(obj) = v.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        let others = schema.get("additionalProperties");
        for (k, child) in obj {
            let here = format!("{at}.{k}");
            match (properties.and_then(|p| p.get(k)), others) {
                (Some(s), _) => violations(child, s, &here, out),
                (None, Some(s)) if s.is_object() => violations(child, s, &here, out),
                (None, Some(Value::Bool(true))) => {}
                // Strict, as the API server's strict validation is: a key the schema does
                // not name is an error, also where it names none (no such schema is among
                // the kept definitions).
                (None, _) => out.push(format!("{here}: not a field of this object")),
            }
        }
        for key in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(key) {
                out.push(format!("{at}: the required field `{key}` is missing"));
            }
        }
    }
    if let (Some(items), Some(schema)) = (v.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            violations(item, schema, &format!("{at}[{i}]"), out);
        }
    }
}

/// The ways `pod` is not a Pod of the kept release.
fn pod_violations(pod: &Value, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    violations(pod, &json!({ "$ref": POD }), name, &mut out);
    out
}

#[test]
fn both_manifests_are_pods_of_kubernetes_v1_33() {
    for name in ["pod-fast.json", "pod-strict.json"] {
        let m = manifest(name);
        let errs = pod_violations(&m, name);
        assert!(errs.is_empty(), "{errs:#?}");
        // What the schema says only in prose (no enum in this release's OpenAPI): the
        // profile types and the procMount values the API server accepts.
        let p = &m["spec"]["securityContext"]["seccompProfile"]["type"];
        assert!(
            ["RuntimeDefault", "Localhost", "Unconfined"].contains(&p.as_str().unwrap()),
            "{name}: {p}"
        );
        if let Some(pm) = m["spec"]["containers"][0]["securityContext"].get("procMount") {
            assert!(
                ["Default", "Unmasked"].contains(&pm.as_str().unwrap()),
                "{name}"
            );
        }
    }
}

/// The walk can fail, each way it claims to: a misspelt field, a wrong JSON type, a value
/// outside an enum, a missing required field, each named by its path.
#[test]
fn a_misspelt_field_a_wrong_type_an_unknown_enum_value_and_a_missing_field_fail() {
    let strict = manifest("pod-strict.json");
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut m = strict.clone();
        edit(&mut m);
        pod_violations(&m, "pod")
    };
    let errs = broken(&|m| {
        let sc = m["spec"]["containers"][0]["securityContext"]
            .as_object_mut()
            .unwrap();
        let v = sc.remove("procMount").unwrap();
        sc.insert("procmount".into(), v);
    });
    assert_eq!(
        errs,
        ["pod.spec.containers[0].securityContext.procmount: not a field of this object"]
    );
    let errs = broken(&|m| m["spec"]["securityContext"]["runAsUser"] = json!("1000"));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("pod.spec.securityContext.runAsUser: \"1000\" is not of type integer"),
        "{errs:?}"
    );
    let errs = broken(&|m| m["spec"]["hostUsers"] = json!("false"));
    assert!(errs[0].contains("hostUsers"), "{errs:?}");
    let errs = broken(&|m| m["apiVersion"] = json!("v2"));
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].starts_with("pod.apiVersion: \"v2\" is not one of"),
        "{errs:?}"
    );
    let errs = broken(&|m| {
        m["spec"]["securityContext"]["seccompProfile"]
            .as_object_mut()
            .unwrap()
            .remove("type");
    });
    assert_eq!(
        errs,
        ["pod.spec.securityContext.seccompProfile: the required field `type` is missing"]
    );
    // A label's value is a string (an `additionalProperties` schema), a quantity is a
    // string or a number (`oneOf`).
    let errs = broken(&|m| m["metadata"]["labels"]["n"] = json!(1));
    assert!(
        errs[0].starts_with("pod.metadata.labels.n: 1 is not of type string"),
        "{errs:?}"
    );
    let limits = |v: Value| {
        move |m: &mut Value| {
            m["spec"]["containers"][0]["resources"] = json!({ "limits": { "memory": v.clone() } })
        }
    };
    assert!(broken(&limits(json!("1Gi"))).is_empty());
    assert!(!broken(&limits(json!(true))).is_empty());
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
    // The profile `sandbox container-profile --engine kubernetes` prints, installed in the
    // kubelet's seccomp directory as docs/cluster.md says: never `Unconfined`.
    assert_eq!(
        spec["securityContext"]["seccompProfile"],
        json!({ "type": "Localhost", "localhostProfile": "sandbox.json" })
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
