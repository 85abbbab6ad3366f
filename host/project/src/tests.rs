use std::path::Path;

use super::*;

/// A project in `dir`: `datasets` is the `[datasets]` part of weir.toml, each flow a name and
/// the body of its file (a parser is added; validation does not open plugin files).
fn write(dir: &Path, datasets: &str, flows: &[(&str, &str)]) -> PathBuf {
    let list: Vec<String> = flows.iter().map(|(n, _)| format!("\"{n}.toml\"")).collect();
    std::fs::write(dir.join("weir.toml"), format!("name = \"p\"\nflows = [{}]\n{datasets}", list.join(", "))).unwrap();
    for (name, body) in flows {
        std::fs::write(
            dir.join(format!("{name}.toml")),
            format!("name = \"{name}\"\n[parse]\nplugin = \"p.wasm\"\n{body}"),
        )
        .unwrap();
    }
    dir.join("weir.toml")
}

const FILE: &str = "[source]\ntype = \"replay\"\npath = \"in.jsonl\"\n";

fn from(ds: &str) -> String {
    format!("[source]\ntype = \"dataset\"\ndataset = \"{ds}\"\n")
}

fn into(ds: &str) -> String {
    format!("[sink]\ntype = \"dataset\"\ndataset = \"{ds}\"\n")
}

#[test]
fn flows_run_in_dependency_order_whatever_order_they_are_listed_in() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "[datasets.a]\n[datasets.b]\n",
        &[
            ("gold", &from("b")),
            ("silver", &format!("{}{}", from("a"), into("b"))),
            ("bronze", &format!("{FILE}{}", into("a"))),
        ],
    );
    let p = Project::load(&file).unwrap();
    let names: Vec<&str> = p.flows.iter().map(Flow::name).collect();
    assert_eq!(names, ["bronze", "silver", "gold"]);
    assert!(p.bounded, "a recorded-events file is bounded, and so the whole project");
    // The embedded log is under the state directory, the checkpoints too.
    let SourceKind::Dataset(d) = &p.flows[1].pipeline.source.kind else { panic!("a dataset source") };
    assert_eq!(d.log.as_deref(), Some(dir.path().join(".weir/datasets/a").as_path()));
    assert!(d.bounded);
    assert_eq!(p.flows[1].checkpoint, dir.path().join(".weir/flows/silver"));
    assert_eq!(refresh::downstream(&p, "a"), BTreeSet::from(["a".to_string(), "b".to_string()]));
    assert_eq!(refresh::downstream(&p, "b"), BTreeSet::from(["b".to_string()]));
}

#[test]
fn a_cycle_is_named_flow_by_flow() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "[datasets.x]\n[datasets.y]\n",
        &[("one", &format!("{}{}", from("x"), into("y"))), ("two", &format!("{}{}", from("y"), into("x")))],
    );
    let e = Project::load(&file).unwrap_err().to_string();
    assert!(
        e.contains(
            "the flows one → two → one form a cycle (one writes `y`, which two reads; two writes `x`, which one reads)"
        ) || e.contains(
            "the flows two → one → two form a cycle (two writes `x`, which one reads; one writes `y`, which two reads)"
        ),
        "{e}"
    );
    // A flow reading its own output is the smallest ring.
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "[datasets.x]\n", &[("self", &format!("{}{}", from("x"), into("x")))]);
    let e = Project::load(&file).unwrap_err().to_string();
    assert!(e.contains("the flows self → self form a cycle (self writes `x`, which self reads)"), "{e}");
}

#[test]
fn bad_datasets_name_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    for (datasets, says) in [
        ("[datasets.a]\ntopic = \"t\"\n", "datasets.a.topic: applies to storage = \"kafka\" only"),
        ("[datasets.a]\nstorage = \"kafka\"\n", "datasets.a.kafka.bootstrap.servers: required"),
        ("[datasets.a]\nkind = \"view\"\n", "datasets.a.kind"),
        ("[datasets.\"a b\"]\n", "datasets.a b"),
        ("[datasets.a]\nretention = \"0s\"\n", "datasets.a.retention"),
        ("[datasets.a]\nappend_file_bytes = 0\n", "datasets.a.append_file_bytes: give a size in bytes"),
        (
            "[datasets.a]\nkind = \"table\"\nappend_file_bytes = 100\n",
            "datasets.a.append_file_bytes: applies to kind = \"stream\" only",
        ),
        (
            "[datasets.a]\nstorage = \"kafka\"\nappend_file_bytes = 100\n",
            "datasets.a.append_file_bytes: applies to storage = \"embedded\" only",
        ),
    ] {
        let file = write(dir.path(), datasets, &[("f", &format!("{FILE}{}", into("a")))]);
        let e = Project::load(&file).unwrap_err().to_string();
        assert!(e.contains(says), "{datasets}: {e}");
    }
    let file =
        write(dir.path(), "[datasets.a]\n", &[("f", &format!("{FILE}{}[checkpoint]\nlocation = \"cp\"\n", into("a")))]);
    assert!(Project::load(&file).unwrap_err().to_string().contains("remove [checkpoint]"));
}

#[test]
fn a_refresh_a_crash_interrupted_is_finished_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "[datasets.a]\n[datasets.b]\n",
        &[("bronze", &format!("{FILE}{}", into("a"))), ("silver", &format!("{}{}", from("a"), into("b")))],
    );
    let p = Project::load(&file).unwrap();
    for d in ["datasets/a", "datasets/b", "flows/bronze", "flows/silver"] {
        std::fs::create_dir_all(p.state.join(d)).unwrap();
        std::fs::write(p.state.join(d).join("data"), "x").unwrap();
    }
    assert_eq!(refresh::resume(&p.state).unwrap(), None, "nothing to finish");
    // A refresh of b, as far as its plan (the crash comes before any deletion).
    let plan = serde_json::json!({
        "datasets": ["b"],
        "remove": [p.state.join("datasets/b"), p.state.join("flows/silver")],
        "bases": { "b": { "topic": "tb", "offsets": [[0, 5], [1, 7]] } },
    });
    std::fs::write(p.state.join("refresh.json"), plan.to_string()).unwrap();
    // A reader before the plan is finished already sees where a Kafka-backed b now begins.
    let b = super::bases::Base { topic: "tb".into(), offsets: vec![(0, 5), (1, 7)] };
    assert_eq!(refresh::bases(&p.state).unwrap().get("b"), Some(&b));
    assert!(super::bases::load(&p.state).unwrap().is_empty(), "not recorded before the plan is carried out");
    assert_eq!(refresh::resume(&p.state).unwrap(), Some(vec!["b".to_string()]));
    assert_eq!(super::bases::load(&p.state).unwrap().get("b"), Some(&b), "recorded by the plan");
    assert!(!p.state.join("datasets/b").exists() && !p.state.join("flows/silver").exists());
    assert!(p.state.join("datasets/a").exists() && p.state.join("flows/bronze").exists());
    assert!(!p.state.join("refresh.json").exists());
    // Not while a flow it would reset runs (it holds its checkpoint's lock): nothing goes.
    let running = crate::checkpoint::CheckpointDir::lock(&p.state.join("flows/bronze")).unwrap();
    assert!(matches!(refresh::full_refresh(&p, "a"), Err(refresh::RefreshError::Running(_))));
    assert!(p.state.join("datasets/a").exists() && p.state.join("flows/bronze/data").exists());
    assert!(!p.state.join("refresh.json").exists());
    drop(running);
    // And a refresh run whole resets what is downstream, and nothing upstream.
    std::fs::create_dir_all(p.state.join("datasets/b")).unwrap();
    assert_eq!(refresh::full_refresh(&p, "a").unwrap(), vec!["a".to_string(), "b".to_string()]);
    assert!(!p.state.join("flows/bronze").exists() && !p.state.join("datasets/a").exists());
}
