//! `cargo xtask backends [--packages | --programs | --github-matrix]`: the registry's
//! backends, as the built suite lists them (`conformance --list-backends`), for scripts
//! that must not keep a list of their own: `scripts/test-all` installs `--packages`,
//! `scripts/fresh-machine` hides `--programs`, CI's first job turns `--github-matrix` into
//! one conformance job per backend.

use serde_json::{json, Value};

use crate::conformance::{build, known_backends, Known};
use crate::Result;

/// What to print.
#[derive(Debug, PartialEq, Eq)]
enum Show {
    /// One backend a line: the name, then what it is (`unconfined`, `unprivileged`) and
    /// the packages it needs (`needs:PKG`).
    List,
    /// The Debian packages every backend needs on the host, one a line, each once.
    Packages,
    /// The host programs the backends run, one a line.
    Programs,
    /// A GitHub Actions matrix: `{"include": [{"backend": NAME, "packages": "A B"}]}`.
    GithubMatrix,
}

fn parse(args: &[String]) -> Result<Show> {
    match args {
        [] => Ok(Show::List),
        [a] if a == "--packages" => Ok(Show::Packages),
        [a] if a == "--programs" => Ok(Show::Programs),
        [a] if a == "--github-matrix" => Ok(Show::GithubMatrix),
        _ => Err(format!("unknown arguments {args:?} (see `cargo xtask help`)").into()),
    }
}

fn packages_of<'a>(known: &'a Known, backend: &str) -> &'a [String] {
    known
        .packages
        .iter()
        .find(|(b, _)| b == backend)
        .map_or(&[], |(_, p)| p.as_slice())
}

fn render(known: &Known, show: &Show) -> String {
    match show {
        Show::List => known
            .every
            .iter()
            .map(|b| {
                let mut line = b.clone();
                if known.unconfined.as_ref() == Some(b) {
                    line.push_str(" unconfined");
                }
                if known.unprivileged.contains(b) {
                    line.push_str(" unprivileged");
                }
                for p in packages_of(known, b) {
                    line.push_str(&format!(" needs:{p}"));
                }
                line + "\n"
            })
            .collect(),
        Show::Packages => {
            let mut all: Vec<&String> = known.packages.iter().flat_map(|(_, p)| p).collect();
            all.sort();
            all.dedup();
            all.into_iter().map(|p| format!("{p}\n")).collect()
        }
        Show::Programs => known.programs.iter().map(|p| format!("{p}\n")).collect(),
        Show::GithubMatrix => {
            let include: Vec<Value> = known
                .every
                .iter()
                .map(|b| json!({"backend": b, "packages": packages_of(known, b).join(" ")}))
                .collect();
            format!("{}\n", json!({ "include": include }))
        }
    }
}

/// The task.
pub fn run(args: &[String]) -> Result<()> {
    let show = parse(args)?;
    let known = known_backends(&build()?)?;
    print!("{}", render(&known, &show));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        Known {
            every: vec!["a".into(), "b".into(), "c".into()],
            unprivileged: vec!["b".into()],
            packages: vec![
                ("b".into(), vec!["tool".into()]),
                ("c".into(), vec!["tool".into(), "other".into()]),
            ],
            programs: vec!["tool-run".into()],
            unconfined: Some("a".into()),
        }
    }

    #[test]
    fn packages_are_listed_once_each_and_the_matrix_has_a_job_per_backend() {
        assert_eq!(render(&known(), &Show::Packages), "other\ntool\n");
        assert_eq!(render(&known(), &Show::Programs), "tool-run\n");
        let m: Value = serde_json::from_str(&render(&known(), &Show::GithubMatrix)).unwrap();
        assert_eq!(
            m,
            json!({"include": [
                {"backend": "a", "packages": ""},
                {"backend": "b", "packages": "tool"},
                {"backend": "c", "packages": "tool other"},
            ]})
        );
        assert_eq!(
            render(&known(), &Show::List),
            "a unconfined\nb unprivileged needs:tool\nc needs:tool needs:other\n"
        );
        assert_eq!(parse(&[]).unwrap(), Show::List);
        assert!(parse(&["--bogus".to_string()]).is_err());
    }
}
