//! Reads the plugin contract's version from the `package` line of `wit/plugin.wit`, its one
//! definition, and hands it to the code as `WEIR_WIT_VERSION` (`plugin::WIT_VERSION`).

fn main() {
    let wit = "../../wit/plugin.wit";
    println!("cargo:rerun-if-changed={wit}");
    let text = std::fs::read_to_string(wit).unwrap_or_else(|e| panic!("cannot read {wit}: {e}"));
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("package weir:plugin@")?.strip_suffix(';'))
        .unwrap_or_else(|| panic!("{wit} has no `package weir:plugin@VERSION;` line"));
    println!("cargo:rustc-env=WEIR_WIT_VERSION={version}");
}
