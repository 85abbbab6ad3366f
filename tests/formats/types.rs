//! `weir schema` and `weir new --schema`: types for plugin authors, from `.avsc` and `.proto`.

#[allow(unused_imports)]
use super::*;

use std::process::Command;

/// `weir schema` writes the types of a schema's rows, and they read the rows the Avro parser
/// writes; `weir new --schema` puts them in a new plugin project.
#[test]
fn weir_schema_writes_types_that_read_the_parser_s_rows() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(weir().args(["schema", "python"]).arg(formats("order.avsc")).output().unwrap());
    std::fs::write(dir.path().join("order_types.py"), &out.stdout).unwrap();
    let row = r#"{"order_id":7,"user_id":3,"status":"ERROR","amount":12.5,"order_ts":1700000000000}"#;
    let check = format!(
        "import json, order_types\no = order_types.Order.from_row(json.loads({row:?}))\n\
         assert (o.order_id, o.status, o.amount) == (7, 'ERROR', 12.5), o\nprint('ok')"
    );
    let run = Command::new(python()).arg("-c").arg(check).current_dir(dir.path()).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let rust = ok(weir().args(["schema", "rust"]).arg(formats("window.avsc")).output().unwrap());
    let rust = String::from_utf8(rust.stdout).unwrap();
    assert!(rust.contains("pub struct ErrorRate {") && rust.contains("pub key: Option<String>,"), "{rust}");
    let project = dir.path().join("typed");
    ok(weir()
        .args(["new", "transform", "typed", "--lang", "rust", "--schema"])
        .arg(formats("order.avsc"))
        .arg("--dir")
        .arg(&project)
        .output()
        .unwrap());
    let types = std::fs::read_to_string(project.join("src/schema.rs")).unwrap();
    assert!(types.contains("pub struct Order {") && types.contains("pub amount: f64,"), "{types}");
    assert!(std::fs::read_to_string(project.join("src/lib.rs")).unwrap().contains("pub mod schema;"));

    // From a `.proto`: the messages the Protobuf parser writes rows of.
    let proto = ok(weir().args(["schema", "python"]).arg(formats("order.proto")).output().unwrap());
    std::fs::write(dir.path().join("proto_types.py"), &proto.stdout).unwrap();
    let check = format!(
        "import json, proto_types\no = proto_types.Order.from_row(json.loads({row:?}))\n\
         assert (o.order_id, o.status) == (7, 'ERROR'), o\nprint('ok')"
    );
    let run = Command::new(python()).arg("-c").arg(check).current_dir(dir.path()).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let rust = ok(weir().args(["schema", "rust"]).arg(formats("order.proto")).output().unwrap());
    let rust = String::from_utf8(rust.stdout).unwrap();
    assert!(rust.contains("pub struct Order {") && rust.contains("pub order_id: i64,"), "{rust}");
}
