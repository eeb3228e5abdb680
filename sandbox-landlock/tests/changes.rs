//! The copy-on-write layer under landlock: the command writes the overlay, the host's
//! workspace stays as it was, and the change set says what the command did.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::fs;

use common::*;
use sandbox_core::{ChangeKind, Changes};

#[tokio::test(flavor = "multi_thread")]
async fn writes_go_to_the_layer_and_come_back_as_a_change_set() {
    let ws = tempdir();
    fs::write(ws.path().join("old"), "old\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut o = opts(
        ws.path(),
        &["sh", "-c", "echo new > new; echo changed > old; cat old"],
    );
    o.changes = Changes::Review;
    let out = run(o).await;
    assert_ok(&out);
    assert_eq!(fs::read_to_string(ws.path().join("old")).unwrap(), "old\n");
    assert!(!ws.path().join("new").exists());
    let set = out.changes.expect("a change set");
    let got: Vec<_> = set
        .changes()
        .iter()
        .map(|c| (c.path.clone(), c.kind.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("new".into(), ChangeKind::Added),
            ("old".into(), ChangeKind::Modified)
        ]
    );
    set.apply(false).unwrap();
    assert_eq!(
        fs::read_to_string(ws.path().join("old")).unwrap(),
        "changed\n"
    );
}
