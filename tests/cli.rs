//! The command line's contract (`docs/cli.md`): exit codes, logging, and errors in plain words
//! that name what to fix.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::common::*;

fn code(out: &std::process::Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// 2: the command line or what it names is wrong. Each says what to fix.
#[test]
fn usage_errors_exit_2_and_name_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = weir().arg("run").arg("--no-such-flag").output().unwrap();
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = weir().arg("run").arg(&empty).output().unwrap();
    assert_eq!(code(&out), Some(2), "a directory without pipelines does nothing: an error");
    assert!(stderr(&out).contains("no pipeline files"), "{}", stderr(&out));

    let out = weir().arg("test").arg(dir.path().join("missing.toml")).arg("--events").arg("x").output().unwrap();
    assert_eq!(code(&out), Some(2));
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));

    // A TOML syntax error says where.
    let p = pipeline(dir.path(), Spec { window: "type = \"tumbling\"\nsize = \"1 minute", ..Default::default() });
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert_eq!(code(&out), Some(2));
    let line = std::fs::read_to_string(&p).unwrap().lines().position(|l| l.starts_with("size =")).unwrap() + 1;
    let at = format!("pipeline.toml:{line}:");
    let err = stderr(&out);
    let column = err.split(&at).nth(1).map(|rest| rest.chars().take_while(char::is_ascii_digit).collect::<String>());
    assert!(column.is_some_and(|c| !c.is_empty()), "line and column of the error: {err}");
}

/// `weir broker` refuses a port in use and a malformed `--topic`, with exit 2 naming the flag.
#[test]
fn weir_broker_refuses_a_taken_port_and_a_bad_topic_naming_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = weir().args(["broker", "--port", &port]).output().unwrap();
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--port"), "{}", stderr(&out));
    let out = weir().args(["broker", "--port", "0", "--topic", "orders:none"]).output().unwrap();
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--topic orders:none"), "{}", stderr(&out));
}

/// A `config` key the plugin never reads is a typo or a setting it does not have: refused at
/// start-up with the key and the closest one it does read, exit 2, nothing computed.
#[test]
fn a_plugin_config_typo_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 1_000, 1);
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let text = std::fs::read_to_string(&p).unwrap();
    let agg = component("error_rate").display().to_string();
    let typo = text.replace(
        &format!("plugin = \"{agg}\""),
        &format!("plugin = \"{agg}\"\nconfig = {{ error_statsu = \"PENDING\" }}"),
    );
    std::fs::write(&p, typo).unwrap();
    let out = weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap();
    assert_eq!(code(&out), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(err.contains("config.error_statsu: unknown key; did you mean `error_status`?"), "{err}");
    assert!(err.contains("test/aggregate"), "{err}");
}

/// Errors read as sentences: no Rust debug output of the plugin's error.
#[test]
fn a_plugin_s_error_is_said_in_plain_words() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 1_000, 1);
    let sink = format!(
        "[sink]\nplugin = \"{}\"\nconfig = {{ dir = \"/not-granted\" }}\n",
        component("jsonl_file_sink").display()
    );
    let p = pipeline(dir.path(), Spec { window: TUMBLING, extra: &sink, ..Default::default() });
    let out = weir().arg("run").arg(&p).output().unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("test/sink") && err.contains("input/output error: /not-granted"), "{err}");
    assert!(!err.contains("PluginError") && !err.contains("Io(\""), "{err}");
}

/// 130: a stop before the end of bounded input; the run resumes from its checkpoint.
#[test]
fn sigterm_before_the_end_of_bounded_input_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 300_000, 7);
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let text =
        std::fs::read_to_string(&p).unwrap().replace("max_offsets_per_trigger = 5000", "max_offsets_per_trigger = 500");
    std::fs::write(&p, text).unwrap();
    let mut child = weir()
        .arg("test")
        .arg(&p)
        .arg("--events")
        .arg(&events)
        .arg("--progress-json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while !lines.next().expect("the run ended early").unwrap().starts_with('{') {}
    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    for line in lines {
        line.unwrap();
    }
    assert_eq!(child.wait().unwrap().code(), Some(130));
}

/// Logs: `WEIR_LOG`, else `RUST_LOG`; no colour codes when stderr is not a terminal.
#[test]
fn logging_follows_weir_log_then_rust_log_and_has_no_colour_off_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 1_000, 1);
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    // `weir run` logs at info where it resumes, and where input ends with windows open.
    let run = |envs: &[(&str, &str)]| {
        let mut c = weir();
        c.env_remove("WEIR_LOG").env_remove("RUST_LOG").arg("run").arg(&p);
        for (k, v) in envs {
            c.env(k, v);
        }
        stderr(&ok(c.output().unwrap()))
    };
    let debug = run(&[("RUST_LOG", "debug")]);
    assert!(debug.contains("DEBUG"), "RUST_LOG=debug is honoured:\n{debug}");
    assert!(!debug.contains('\u{1b}'), "no ANSI escapes in a pipe:\n{debug}");
    let quiet = run(&[("RUST_LOG", "debug"), ("WEIR_LOG", "error")]);
    assert!(!quiet.contains("DEBUG") && !quiet.contains("INFO"), "WEIR_LOG wins:\n{quiet}");
    let default = run(&[]);
    assert!(default.contains("INFO") && !default.contains("DEBUG"), "info by default:\n{default}");
}
