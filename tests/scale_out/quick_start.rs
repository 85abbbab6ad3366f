//! The scale-out quick start of `docs/scale-out.md`, run as written there: `weir broker` with
//! the group's file and `--orders`, two `weir run` processes of the group, `weir inspect`, and
//! Ctrl-C for each. Only the port differs (a free one, not 9092) and the paths the file names.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::common::*;
use crate::harness::{Bell, one_at_a_time};

/// Windows the two processes must have printed between them before the test looks at them.
const WINDOWS: usize = 4;

#[test]
fn the_scale_out_quick_start_works_as_written() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let file = quick_start_file(dir.path(), port);
    let port_arg = port.to_string();
    let args = [
        "broker".as_ref(),
        file.as_os_str(),
        "--orders".as_ref(),
        "5000".as_ref(),
        "--port".as_ref(),
        port_arg.as_ref(),
    ];
    // Rung by every line a process of the quick start prints, and by the end of its output.
    let bell = Arc::new(Bell::new());
    let broker = Proc::spawn(&args, &bell);
    broker.wait_out("Ctrl-C stops it");
    let a = Proc::run(&file, dir.path(), "a", &bell);
    a.wait_err("assigned to this process");
    let b = Proc::run(&file, dir.path(), "b", &bell);
    b.wait_err("assigned to this process");
    b.wait_err("claimed");
    bell.until(
        || windows(&[&a.out(), &b.out()]).len() >= WINDOWS,
        || format!("fewer than {WINDOWS} windows; a:\n{}\nb:\n{}", a.err(), b.err()),
    );
    let inspect = ok(weir().arg("inspect").arg(&file).output().unwrap());
    let text = String::from_utf8_lossy(&inspect.stdout).into_owned();
    let members: Vec<&str> = text.lines().filter(|l| l.starts_with("member ") && l.contains("tasks [")).collect();
    assert_eq!(members.len(), 2, "both processes hold tasks:\n{text}");
    let (mut a_out, mut b_out) = (String::new(), String::new());
    for (p, out) in [(a, &mut a_out), (b, &mut b_out)] {
        let (status, printed, err) = p.stop();
        assert!(status.success(), "a process of the group failed: {status}\n{err}");
        // Its summary's final watermark is that of the tasks it held at the end: past every
        // window it printed, not held back by a task it gave up long before.
        let last_end = windows(&[&printed]).iter().filter_map(|w| w["window_end"].as_i64()).max();
        if let Some(end) = last_end {
            let line = err.lines().rev().find(|l| l.contains("final watermark ")).expect("a summary line");
            let at = line.rsplit("final watermark ").next().unwrap_or_default().trim();
            let at = humantime::parse_rfc3339(at).unwrap_or_else(|e| panic!("{e}: {line}"));
            let ms = at.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
            assert!(ms >= end, "final watermark {line} before the last window it printed (end {end})");
        }
        *out = printed;
    }
    let (status, out, _) = broker.stop();
    assert!(status.success(), "the broker failed: {status}\n{out}");
    assert!(out.contains("produced "), "the broker says what it produced:\n{out}");
    // Every window is printed once, by whichever process held its stage-2 task, and the
    // windows follow one another minute by minute.
    let found = windows(&[&a_out, &b_out]);
    let starts: Vec<i64> = found.iter().map(|w| w["window_start"].as_i64().unwrap()).collect();
    let mut unique = starts.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), starts.len(), "a window printed twice: {starts:?}");
    for pair in unique.windows(2) {
        assert_eq!(pair[1] - pair[0], 60_000, "windows follow one another: {unique:?}");
    }
    for w in &found {
        let (count, errors) = (w["count"].as_u64().unwrap(), w["errors"].as_u64().unwrap());
        assert!(count > 0 && errors <= count, "a window of orders: {w}");
    }
}

/// What a process printed on one stream so far, and whether the stream has ended.
#[derive(Default)]
struct Printed {
    text: Mutex<String>,
    ended: AtomicBool,
}

impl Printed {
    /// Reads `from` to its end, ringing `bell` at each line.
    fn follow(from: impl std::io::Read + Send + 'static, bell: Arc<Bell>) -> (Arc<Printed>, JoinHandle<()>) {
        let printed = Arc::new(Printed::default());
        let mine = printed.clone();
        let reader = std::thread::spawn(move || {
            // Lines as bytes: a line that is not UTF-8 must not end the reading.
            for line in BufReader::new(from).split(b'\n').map_while(Result::ok) {
                let line = String::from_utf8_lossy(&line).into_owned();
                if let Ok(mut t) = mine.text.lock() {
                    t.push_str(&line);
                    t.push('\n');
                }
                bell.ring();
            }
            mine.ended.store(true, Ordering::SeqCst);
            bell.ring();
        });
        (printed, reader)
    }

    fn text(&self) -> String {
        self.text.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

/// A `weir` process of the quick start, its stdout and stderr followed.
struct Proc {
    child: Child,
    out: Arc<Printed>,
    err: Arc<Printed>,
    readers: Vec<JoinHandle<()>>,
    bell: Arc<Bell>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn spawn(args: &[&std::ffi::OsStr], bell: &Arc<Bell>) -> Proc {
        let mut child = weir()
            .args(args)
            .env("WEIR_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (out, out_reader) = Printed::follow(child.stdout.take().unwrap(), bell.clone());
        let (err, err_reader) = Printed::follow(child.stderr.take().unwrap(), bell.clone());
        Proc { child, out, err, readers: vec![out_reader, err_reader], bell: bell.clone() }
    }

    /// `weir run FILE --checkpoint DIR/NAME`.
    fn run(file: &Path, dir: &Path, name: &str, bell: &Arc<Bell>) -> Proc {
        let checkpoint = dir.join(name);
        Proc::spawn(&["run".as_ref(), file.as_os_str(), "--checkpoint".as_ref(), checkpoint.as_os_str()], bell)
    }

    fn out(&self) -> String {
        self.out.text()
    }

    fn err(&self) -> String {
        self.err.text()
    }

    fn wait_out(&self, text: &str) {
        self.wait(text, &self.out);
    }

    fn wait_err(&self, text: &str) {
        self.wait(text, &self.err);
    }

    /// Waits until `stream` has `text`; fails if the stream ends first.
    fn wait(&self, text: &str, stream: &Printed) {
        let what = || format!("never printed {text:?}:\n{}\n{}", self.out(), self.err());
        self.bell.until(|| stream.ended.load(Ordering::SeqCst) || stream.text().contains(text), what);
        assert!(stream.text().contains(text), "exited before printing {text:?}:\n{}\n{}", self.out(), self.err());
    }

    /// Ctrl-C, as a user stops it; its exit status, stdout and stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String, String) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        for r in std::mem::take(&mut self.readers) {
            let _ = r.join();
        }
        (status, self.out(), self.err())
    }
}

/// The windows printed to `outs` so far, in the order printed (a last line being written is
/// left for later).
fn windows(outs: &[&str]) -> Vec<serde_json::Value> {
    outs.iter()
        .flat_map(|o| o.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).collect::<Vec<_>>())
        .filter(|v| v.get("window_start").is_some())
        .collect()
}

/// `plugins/orders-error-rate/group.toml` as the quick start runs it, on `port`, its plugins
/// and checkpoint where this checkout and `dir` have them.
fn quick_start_file(dir: &Path, port: u16) -> PathBuf {
    let text = std::fs::read_to_string(root().join("plugins/orders-error-rate/group.toml")).unwrap();
    assert!(text.contains("127.0.0.1:9092"), "the quick start's file names the broker's default port");
    let dist = root().join("plugins/dist");
    let text = text
        .replace("127.0.0.1:9092", &format!("127.0.0.1:{port}"))
        .replace("../dist/", &format!("{}/", dist.display()))
        .replace("../../out/orders-error-rate-group/checkpoint", &dir.join("checkpoint").display().to_string());
    let file = dir.join("group.toml");
    std::fs::write(&file, text).unwrap();
    file
}
