//! `cargo xtask layers`: the workspace's layering, checked from the code's own `use` lines,
//! so that it stays true after later merges.
//!
//! Two levels:
//!
//! - **Crates.** Each product crate sits on a floor ([`CRATES`]); its `[dependencies]` on
//!   workspace crates must all be on lower floors (so backends never depend on each other,
//!   and the contract depends on nothing of the workspace).
//! - **Modules.** In each product crate, a top-level module that names another (`crate::x`,
//!   `use crate::{x, …}`, or an item the crate root re-exports from `x`) is an arrow from the
//!   one to the other. No two modules may reach each other through arrows (a cycle), and
//!   in a crate whose floors are declared ([`MODULE_FLOORS`]) no arrow may point to a higher
//!   floor. Test modules (`#[cfg(test)] mod …` and what follows it in its file, and files
//!   named `tests.rs`), comments and doc comments are not read.
//!
//! It reads text, not the compiler's view: an arrow written through a path it does not
//! know (a re-export of a re-export, a macro) is not seen. What it does see is exactly what a
//! reader of the code sees, which is what the layering is for.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::{project_root, Result};

/// The product crates other than the backends, by directory, and their floors: a crate may
/// depend only on crates of lower floors. Test, bench and automation crates are not product
/// crates. The backend crates are not listed here: they are the ones the facade's
/// `backends` feature names ([`backend_crates`]), each on [`BACKEND_FLOOR`], so adding a
/// backend touches no line of this file.
const CRATES: &[(&str, u8)] = &[
    ("sandbox-core", 0),
    ("sandbox-proxy", 1),
    ("sandbox-host", 2),
    // The conformance suite is in the product for as long as `sandbox doctor --prove` runs
    // its cases from the shipped command; it depends on no backend, so it sits beside them.
    ("tests", 3),
    ("sandbox", 4),
    ("python", 5),
];

/// The floor of every backend crate: above the host crate, below the facade.
const BACKEND_FLOOR: u8 = 3;

/// The backend crates, from the facade's manifest: the features its `backends` feature
/// lists, each of which enables one `dep:CRATE` (the crate's directory is its name).
fn backend_crates(root: &Path) -> Result<Vec<String>> {
    let manifest = fs::read_to_string(root.join("sandbox").join("Cargo.toml"))?;
    let features = features(&manifest);
    let Some(backends) = features.get("backends") else {
        return Err(
            "sandbox/Cargo.toml has no `backends` feature to read the backends from".into(),
        );
    };
    let mut crates = Vec::new();
    for feature in backends {
        let deps: Vec<&str> = features
            .get(feature)
            .map(|v| v.iter().filter_map(|d| d.strip_prefix("dep:")).collect())
            .unwrap_or_default();
        match deps.as_slice() {
            [one] => crates.push((*one).to_owned()),
            _ => {
                return Err(format!(
                    "sandbox/Cargo.toml: the backend feature `{feature}` must enable exactly \
                     one `dep:` crate (its backend), found {deps:?}"
                )
                .into())
            }
        }
    }
    Ok(crates)
}

/// Every product crate with its floor: [`CRATES`] and the backends.
fn product_crates(root: &Path) -> Result<Vec<(String, u8)>> {
    let mut all: Vec<(String, u8)> = CRATES.iter().map(|(d, f)| ((*d).to_owned(), *f)).collect();
    all.extend(
        backend_crates(root)?
            .into_iter()
            .map(|c| (c, BACKEND_FLOOR)),
    );
    Ok(all)
}

/// A manifest's `[features]` table, one `name = [...]` per line (how this workspace
/// writes it; a feature whose list spans lines is read across them).
fn features(manifest: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut in_features = false;
    let mut pending = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') && pending.is_empty() {
            in_features = line == "[features]";
            continue;
        }
        if !in_features || line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        pending.push_str(line);
        pending.push(' ');
        if !pending.contains(']') {
            continue;
        }
        let entry = std::mem::take(&mut pending);
        let Some((name, list)) = entry.split_once('=') else {
            continue;
        };
        let items = list
            .trim()
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or("")
            .split(',')
            .map(|i| i.trim().trim_matches('"').to_owned())
            .filter(|i| !i.is_empty())
            .collect();
        out.insert(name.trim().to_owned(), items);
    }
    out
}

/// The floors of the modules of the crates that declare them: a module may name only
/// modules of its own floor or lower ones (and never in a circle).
const MODULE_FLOORS: &[(&str, &[(&str, u8)])] = &[
    (
        "sandbox-core",
        &[
            ("error", 0),
            ("escape", 0),
            ("policy", 0),
            ("changes", 0),
            ("egress", 1),
            ("secret", 1),
            ("denial", 2),
            ("capability", 3),
            ("options", 4),
            ("outcome", 4),
            ("record", 4),
            ("admission", 5),
            ("grants", 5),
            ("credentials", 5),
            ("plan", 6),
            ("output", 6),
            ("sandbox", 6),
            ("registry", 7),
            ("run", 7),
        ],
    ),
    (
        "sandbox-host",
        &[
            ("sys", 0),
            ("kernel", 0),
            ("container", 0),
            ("layout", 0),
            ("fs", 1),
            ("syscalls", 2),
            ("idmap", 2),
            ("owner", 2),
            ("seccomp", 3),
            ("changes", 3),
            ("facts", 3),
            ("handover", 3),
            ("process", 4),
            ("sweep", 5),
            ("door", 5),
            ("pipeline", 6),
        ],
    ),
];

pub fn run(args: &[String]) -> Result<()> {
    if !args.is_empty() {
        return Err(format!("unknown arguments {args:?} (see `cargo xtask help`)").into());
    }
    let root = project_root();
    let crates = product_crates(&root)?;
    let mut problems = Vec::new();
    for (dir, floor) in &crates {
        problems.extend(check_crate_deps(&root, &crates, dir, *floor)?);
        let floors = MODULE_FLOORS
            .iter()
            .find(|(d, _)| d == dir)
            .map(|(_, f)| *f);
        problems.extend(check_modules(&root.join(dir).join("src"), dir, floors)?);
    }
    if problems.is_empty() {
        println!(
            "layers: {} crates and their modules import only downward, with no cycle",
            crates.len()
        );
        Ok(())
    } else {
        for p in &problems {
            eprintln!("layers: {p}");
        }
        Err(format!("{} layering problem(s)", problems.len()).into())
    }
}

/// The workspace crates `dir`'s manifest depends on (not dev- or build-dependencies),
/// each checked against the floors.
fn check_crate_deps(
    root: &Path,
    crates: &[(String, u8)],
    dir: &str,
    floor: u8,
) -> Result<Vec<String>> {
    let manifest = fs::read_to_string(root.join(dir).join("Cargo.toml"))?;
    let mut problems = Vec::new();
    for dep in dependencies(&manifest) {
        let Some((_, dep_floor)) = crates
            .iter()
            .find(|(d, _)| package_name(root, d).as_deref() == Some(dep.as_str()))
        else {
            if dep.starts_with("sandbox") {
                problems.push(format!(
                    "{dir} depends on `{dep}`, which is not a product crate (test and bench \
                     crates belong in [dev-dependencies])"
                ));
            }
            continue;
        };
        if *dep_floor >= floor {
            problems.push(format!(
                "{dir} (floor {floor}) depends on `{dep}` (floor {dep_floor}): a crate may \
                 depend only on lower floors"
            ));
        }
    }
    Ok(problems)
}

/// The `name` of the package in `dir`.
fn package_name(root: &Path, dir: &str) -> Option<String> {
    let manifest = fs::read_to_string(root.join(dir).join("Cargo.toml")).ok()?;
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("name") {
                return Some(
                    v.trim_start()
                        .trim_start_matches('=')
                        .trim()
                        .trim_matches('"')
                        .to_owned(),
                );
            }
        }
    }
    None
}

/// The package names in a manifest's `[dependencies]` table.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if !in_deps || line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = line.split(['=', '.']).next().unwrap_or("").trim();
        // `foo = { package = "bar", … }` renames; none here, but say so rather than guess.
        let name = match line.split("package").nth(1) {
            Some(rest) if line.contains("package =") => rest
                .trim_start()
                .trim_start_matches('=')
                .trim()
                .split('"')
                .nth(1)
                .unwrap_or(key)
                .to_owned(),
            _ => key.to_owned(),
        };
        deps.push(name);
    }
    deps
}

/// One crate's module graph: arrows between top-level modules, and where each was seen.
#[derive(Debug, Default)]
struct Graph {
    modules: BTreeSet<String>,
    arrows: BTreeMap<(String, String), String>,
}

fn check_modules(src: &Path, dir: &str, floors: Option<&[(&str, u8)]>) -> Result<Vec<String>> {
    let root_file = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists());
    let Some(root_file) = root_file else {
        return Ok(Vec::new());
    };
    let graph = graph(src, &fs::read_to_string(&root_file)?)?;
    let mut problems = Vec::new();
    if let Some(floors) = floors {
        let floor_of = |m: &str| floors.iter().find(|(n, _)| *n == m).map(|(_, f)| *f);
        for m in &graph.modules {
            if floor_of(m).is_none() {
                problems.push(format!(
                    "{dir}: module `{m}` has no floor (add it to MODULE_FLOORS in xtask/src/layers.rs)"
                ));
            }
        }
        for ((from, to), at) in &graph.arrows {
            if let (Some(a), Some(b)) = (floor_of(from), floor_of(to)) {
                if b > a {
                    problems.push(format!(
                        "{dir}: `{from}` (floor {a}) names `{to}` (floor {b}) at {at}: modules \
                         import only downward"
                    ));
                }
            }
        }
    }
    for cycle in cycles(&graph) {
        let seen: Vec<String> = cycle
            .iter()
            .flat_map(|a| cycle.iter().map(move |b| (a, b)))
            .filter_map(|(a, b)| {
                graph
                    .arrows
                    .get(&(a.clone(), b.clone()))
                    .map(|at| format!("{a} -> {b} ({at})"))
            })
            .collect();
        problems.push(format!(
            "{dir}: modules {} reach each other: {}",
            cycle.join(", "),
            seen.join("; ")
        ));
    }
    Ok(problems)
}

/// The arrows between the top-level modules below `src`, whose root file is `root`.
fn graph(src: &Path, root: &str) -> Result<Graph> {
    let mut g = Graph::default();
    // The root's modules, and the names it re-exports from each (`pub use m::{A, B}`).
    let mut reexported: BTreeMap<String, String> = BTreeMap::new();
    for stmt in statements(root) {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "mod") {
            if let Some(name) = words.get(i + 1) {
                if !stmt.contains('{') {
                    g.modules.insert(name.trim_end_matches(';').to_owned());
                }
            }
        } else if let Some(rest) = stmt.strip_prefix("pub use ") {
            let rest = rest.trim_end_matches(';');
            if let Some((module, items)) = rest.split_once("::") {
                for item in leaf_names(items) {
                    reexported.insert(item, module.to_owned());
                }
            }
        }
    }
    for file in rust_files(src)? {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let top = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_owned()
            })
            .unwrap_or_default();
        if !g.modules.contains(&top) || is_test_file(rel) {
            continue;
        }
        let text = fs::read_to_string(&file)?;
        for (line_no, names) in crate_references(&text) {
            for name in names {
                let target = if g.modules.contains(&name) {
                    Some(name)
                } else {
                    reexported.get(&name).cloned()
                };
                if let Some(t) = target {
                    if t != top {
                        g.arrows
                            .entry((top.clone(), t))
                            .or_insert_with(|| format!("{}:{line_no}", rel.display()));
                    }
                }
            }
        }
    }
    Ok(g)
}

/// A file that holds a test module (`tests.rs`, or a file under a `tests/` directory of
/// `src`), declared `#[cfg(test)] mod tests;` beside the code it tests.
fn is_test_file(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n == "tests.rs")
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The code of a file without comments, up to its test module, as `;`- or `{`-ended
/// statements (enough to read `mod` and `use` lines).
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in code_lines(text) {
        cur.push(' ');
        cur.push_str(line.1.trim());
        let depth = cur.matches('{').count() as i64 - cur.matches('}').count() as i64;
        let end = cur.trim_end();
        if depth == 0 && (end.ends_with(';') || end.ends_with('}')) {
            out.push(cur.trim().to_owned());
            cur.clear();
        } else if depth == 0
            && !cur.trim_start().starts_with("pub use")
            && !cur.trim_start().starts_with("use")
        {
            cur.clear();
        }
    }
    out
}

/// Lines of code (numbered from 1) without comments, stopping at a test module.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t == "#[cfg(test)]"
            && lines.get(i + 1).is_some_and(|n| {
                n.trim_start().starts_with("mod ") || n.trim_start().starts_with("pub mod ")
            })
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match t.find("//") {
            // A `//` inside a string is rare in these crates' `use` lines; cut at the first.
            Some(at) if !t[..at].contains('"') => &t[..at],
            _ => t,
        };
        out.push((i + 1, code.to_owned()));
    }
    out
}

/// For each line that names `crate::…`, the first segments it names: `crate::a::B` gives
/// `a`; `use crate::{a::B, C}` gives `a` and `C`, also across lines.
fn crate_references(text: &str) -> Vec<(usize, Vec<String>)> {
    let lines = code_lines(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (no, line) = &lines[i];
        let mut names = Vec::new();
        let mut rest = line.as_str();
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().last();
            let after = &rest[at + "crate::".len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                continue; // `sandbox_core::…`, `$crate::…`
            }
            if let Some(list) = after.strip_prefix('{') {
                // A braced list, perhaps over several lines.
                let mut body = list.to_owned();
                let mut j = i;
                while !balanced_close(&body) && j + 1 < lines.len() {
                    j += 1;
                    body.push(' ');
                    body.push_str(&lines[j].1);
                }
                names.extend(top_names(&body));
                i = j;
                break;
            }
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
        if !names.is_empty() {
            out.push((*no, names));
        }
        i += 1;
    }
    out
}

/// Whether the braced list that `body` continues (its `{` already read) is closed.
fn balanced_close(body: &str) -> bool {
    let mut depth = 1i64;
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// The first segment of each item of a braced list (its `{` already read).
fn top_names(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i64;
    let mut cur = String::new();
    for c in body.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.iter()
        .filter_map(|item| {
            let first: String = item
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            (!first.is_empty() && first != "self").then_some(first)
        })
        .collect()
}

/// The names a `pub use` brings in: `{A, B as C, d::E}` gives `A`, `C`, `E`.
fn leaf_names(items: &str) -> Vec<String> {
    let items = items.trim().trim_start_matches('{').trim_end_matches('}');
    items
        .split(',')
        .filter_map(|i| {
            let i = i.trim();
            let name = match i.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => i.rsplit("::").next().unwrap_or(i).trim(),
            };
            (!name.is_empty() && name != "*").then(|| name.to_owned())
        })
        .collect()
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        let targets: Vec<&'a str> =
            s.g.arrows
                .keys()
                .filter(|(a, _)| a == v)
                .map(|(_, b)| b.as_str())
                .collect();
        for w in targets {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.found.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for m in &g.modules {
        if !s.index.contains_key(m.as_str()) {
            visit(&mut s, m);
        }
    }
    s.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braced_lists_across_lines_name_their_first_segments() {
        let text = "use crate::{\n    a::B,\n    C, d::{e, F},\n};\nfn f() { crate::g::h(); }\n";
        let refs = crate_references(text);
        assert_eq!(refs[0].1, vec!["a", "C", "d"]);
        assert_eq!(refs[1].1, vec!["g"]);
    }

    #[test]
    fn comments_tests_and_other_crates_are_not_read() {
        let text = "// crate::a\n/// [`x`](crate::b)\nuse sandbox_core::c;\n$crate::d\n\
                    #[cfg(test)]\nmod tests {\n use crate::e;\n}\n";
        assert!(crate_references(text).is_empty());
    }

    #[test]
    fn a_cycle_is_found_and_a_chain_is_not() {
        let mut g = Graph::default();
        for m in ["a", "b", "c", "d"] {
            g.modules.insert(m.into());
        }
        for (x, y) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
            g.arrows.insert((x.into(), y.into()), String::new());
        }
        assert_eq!(
            cycles(&g),
            vec![vec!["a".to_owned(), "b".into(), "c".into()]]
        );
        g.arrows.remove(&("c".into(), "a".into()));
        assert!(cycles(&g).is_empty());
    }

    #[test]
    fn the_root_reexports_lead_to_their_modules() {
        let dir = std::env::temp_dir().join(format!("xtask-layers-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a.rs"), "use crate::Thing;\n").unwrap();
        fs::write(dir.join("b.rs"), "pub struct Thing;\n").unwrap();
        let g = graph(
            &dir,
            "mod a;\npub mod b;\npub use b::{Thing, Other as O};\n",
        )
        .unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert!(g.arrows.contains_key(&("a".into(), "b".into())), "{g:?}");
    }

    #[test]
    fn the_backends_are_the_crates_the_facades_backends_feature_enables() {
        let manifest = "[package]\nname = \"x\"\n\n[features]\ndefault = [\"backends\"]\n\
                        backends = [\"a\", \"b\"]\na = [\"dep:sandbox-a\", \"host\"]\n\
                        b = [\n    \"dep:sandbox-b\",\n]\nhost = [\"dep:sandbox-host\"]\n\n\
                        [dependencies]\n";
        let f = features(manifest);
        assert_eq!(f["backends"], ["a", "b"]);
        assert_eq!(f["a"], ["dep:sandbox-a", "host"]);
        assert_eq!(f["b"], ["dep:sandbox-b"]);
        // And the real facade: its five backends, on their floor.
        let crates = product_crates(&project_root()).unwrap();
        for b in [
            "sandbox-none",
            "sandbox-bwrap",
            "sandbox-landlock",
            "sandbox-docker",
            "sandbox-gvisor",
        ] {
            assert!(
                crates.contains(&(b.to_owned(), BACKEND_FLOOR)),
                "{b}: {crates:?}"
            );
        }
    }

    #[test]
    fn dependencies_are_read_from_their_table_only() {
        let m = "[package]\nname = \"x\"\n[dependencies]\nsandbox-core.workspace = true\n\
                 tokio = { workspace = true }\n[dev-dependencies]\nsandbox-conformance.workspace = true\n";
        assert_eq!(dependencies(m), vec!["sandbox-core", "tokio"]);
    }
}
