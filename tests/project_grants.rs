//! A flow's plugin granted a place the host keeps for the project: another flow's dataset or
//! checkpoint, read-only or writable, or the same through a folder link an earlier run left
//! behind. `weir validate` and `weir run` refuse each before any plugin runs, naming the flow's
//! stage, the grant's key and whose place it reaches; the project's data is untouched.

use std::path::Path;

use crate::common::weir;
use crate::project::{FROM_FILE, refused, small_project};

/// Flow `a` writes dataset `x` with a grant of `host` in its parser; flow `b` reads `x` into `y`.
fn project_granting(dir: &Path, host: &str, writable: bool) -> std::path::PathBuf {
    let grant = format!("grants.dirs = [{{ host = \"{host}\", guest = \"/g\", writable = {writable} }}]\n");
    small_project(
        dir,
        "[datasets.x]\n[datasets.y]\n",
        &[
            ("a", &format!("{grant}{FROM_FILE}[sink]\ntype = \"dataset\"\ndataset = \"x\"\n")),
            ("b", "[source]\ntype = \"dataset\"\ndataset = \"x\"\n[sink]\ntype = \"dataset\"\ndataset = \"y\"\n"),
        ],
    )
}

/// Runs the project once without grants, so its datasets and checkpoints exist on disk (a grant
/// of a place that is already there is the case that matters).
fn run_once(dir: &Path) {
    let p = small_project(
        dir,
        "[datasets.x]\n[datasets.y]\n",
        &[
            ("a", &format!("{FROM_FILE}[sink]\ntype = \"dataset\"\ndataset = \"x\"\n")),
            ("b", "[source]\ntype = \"dataset\"\ndataset = \"x\"\n[sink]\ntype = \"dataset\"\ndataset = \"y\"\n"),
        ],
    );
    std::fs::write(dir.join("orders.jsonl"), "{\"user_id\":1,\"amount\":2,\"order_ts\":1000}\n").unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.join(".weir/datasets/x").is_dir() && dir.join(".weir/flows/b").is_dir());
}

fn refused_by_run(project: &Path) -> String {
    let out = weir().arg("run").arg(project).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "run should refuse: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_flow_granted_another_flow_s_dataset_or_checkpoint_is_refused_read_only_or_writable() {
    let dir = tempfile::tempdir().unwrap();
    run_once(dir.path());
    let listing = |d: &Path| {
        let mut all: Vec<_> = walk(d);
        all.sort();
        all
    };
    let before = listing(&dir.path().join(".weir"));
    for (host, whose) in
        [(".weir/datasets/x", "dataset `x`, written by `a`"), (".weir/flows/b", "flow `b`'s checkpoint")]
    {
        for writable in [false, true] {
            let p = project_granting(dir.path(), host, writable);
            for e in [refused(&p), refused_by_run(&p)] {
                assert!(e.contains("grants.dirs[0]") && e.contains(whose) && e.contains("a/"), "{host}: {e}");
            }
        }
    }
    // A grant of the project's state folder, or of the folder holding it, reaches them all.
    for host in [".weir", "."] {
        let e = refused(&project_granting(dir.path(), host, false));
        assert!(e.contains("grants.dirs[0]") && e.contains("reaches"), "{host}: {e}");
    }
    assert_eq!(listing(&dir.path().join(".weir")), before, "nothing ran");
}

/// An earlier run left a folder link in a directory its plugin could write (here made by the
/// test, as a plugin with a writable grant could): granting the link is granting what it leads
/// to.
#[test]
fn the_same_grant_through_a_planted_folder_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    run_once(dir.path());
    std::fs::create_dir_all(dir.path().join("share")).unwrap();
    std::os::unix::fs::symlink("../.weir/datasets/x", dir.path().join("share/x")).unwrap();
    std::os::unix::fs::symlink("../.weir/flows/b", dir.path().join("share/b")).unwrap();
    for (host, whose) in [("share/x", "dataset `x`"), ("share/b", "flow `b`'s checkpoint")] {
        for writable in [false, true] {
            let p = project_granting(dir.path(), host, writable);
            for e in [refused(&p), refused_by_run(&p)] {
                assert!(e.contains("grants.dirs[0]") && e.contains(whose), "{host}: {e}");
            }
        }
    }
}

fn walk(d: &Path) -> Vec<(std::path::PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push((p.clone(), e.metadata().map_or(0, |m| m.len())));
        }
    }
    out
}
