//! An orders parser (like `plugins/orders-json`) that turns hostile on the records that ask it
//! to: `{"attack": "..."}`. The tests feed it orders with such records mixed in and check that
//! each attack is contained, named in the dead letters, and costs no other record.
//!
//! - `loop`: never returns (the call deadline must stop it);
//! - `sleep`: sleeps for a minute in the host (`wasi:clocks` + `wasi:io/poll`), where epoch
//!   interruption cannot reach it; then emits `{"slept": true}`;
//! - `memory`: allocates until refused (the memory cap);
//! - `recursion`: recurses until the stack runs out;
//! - `panic`: panics;
//! - `read`: reads `/etc/passwd`, outside any grant;
//! - `net`: connects to the TCP address in `"to"`;
//! - `output`: emits a 16 MiB row (the output cap);
//! - `leak`: keeps 1 MiB forever in a static, then parses as an order (instance recycling);
//! - `clock`, `env`, `random`: emit what the sandbox lets them see, for the test to check;
//! - `symlink`: plants `/scratch/dead-letters.jsonl -> ../victim.txt` in its writable grant (a
//!   relative target, which WASI allows), for a host that writes there to follow;
//! - `disk`: writes 256 MiB into `/scratch/flood` (the disk limit);
//! - `disk-links`: 1 MiB files, each hard-linked and then unlinked, 256 times: the data stays on
//!   disk under the links, so unlinking must not give its bytes back.
//!
//! It is also an aggregator that counts events, and attacks on the events that ask it to:
//! `{"aggregate": "loop" | "panic", "order_ts": ...}` (the parser passes those through). It
//! claims the same state version as `plugins/error-rate` but cannot read its accumulators:
//! state that does not decode.
//!
//! And it is a keyed processor that counts each key's events and emits the running count
//! (`{"key": .., "n": ..}`) per event, attacking on the events that ask it to with
//! `{"process": ...}`: `timers` sets a million timers, `fanout` the thousand one key may have,
//! `state` makes its state 2 MiB, `panic` panics (after the key's events before it in the call
//! were counted).

use std::hint::black_box;
use std::sync::Mutex;

static LEAKED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

use serde::Deserialize;
use serde::Serialize;
use weir_guest::{
    Aggregator, Config, Context, Emitter, Event, Parser, PluginError, Processor, Record, RecordError, Timer,
    export_plugin,
};

struct Hostile;

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    attack: Option<&'a str>,
    to: Option<&'a str>,
    order_ts: Option<i64>,
}

// Unbounded on purpose: the attack is the stack overflow.
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    let here = black_box([depth; 64]);
    black_box(recurse(depth + 1)) + here[0]
}

impl Parser for Hostile {
    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Hostile)
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let line: Line = record.json()?;
        let Some(attack) = line.attack else {
            let ts = line.order_ts.ok_or_else(|| RecordError::missing_field("order_ts"))?;
            return out.emit_json(ts, None, record.value);
        };
        match attack {
            "loop" => {
                let mut n = 0u64;
                loop {
                    n = black_box(n.wrapping_add(1));
                }
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_secs(60));
                out.emit(0, None, &serde_json::json!({ "slept": true }))
            }
            "leak" => {
                if let Ok(mut l) = LEAKED.lock() {
                    l.push(black_box(vec![1u8; 1 << 20]));
                }
                out.emit_json(line.order_ts.unwrap_or(0), None, record.value)
            }
            "memory" => {
                // Reserved, not written: linear memory grows to the cap in a few milliseconds,
                // so the cap (not the deadline) stops it however loaded the machine is.
                let mut hoard = Vec::new();
                loop {
                    hoard.push(black_box(Vec::<u8>::with_capacity(1 << 20)));
                }
            }
            "recursion" => {
                black_box(recurse(0));
                Ok(())
            }
            "panic" => panic!("hostile record asked for a panic"),
            "read" => match std::fs::read_to_string("/etc/passwd") {
                Ok(text) => out.emit(0, None, &serde_json::json!({ "stolen": text })),
                Err(e) => Err(RecordError::invalid_value(format!("read /etc/passwd: {e}"))),
            },
            "net" => match std::net::TcpStream::connect(line.to.unwrap_or("127.0.0.1:9")) {
                Ok(_) => out.emit(0, None, &serde_json::json!({ "connected": true })),
                Err(e) => Err(RecordError::invalid_value(format!("connect: {e}"))),
            },
            "output" => out.emit(0, None, &serde_json::json!({ "big": "x".repeat(16 << 20) })),
            "clock" => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                out.emit(0, None, &serde_json::json!({ "clock_ms": now.as_millis() as u64 }))
            }
            "env" => out.emit(0, None, &serde_json::json!({ "env": std::env::vars().collect::<Vec<_>>() })),
            "random" => {
                let seed = std::collections::hash_map::RandomState::new();
                use std::hash::BuildHasher;
                out.emit(0, None, &serde_json::json!({ "hash": seed.hash_one(1u8) }))
            }
            "symlink" => {
                let (target, link) = (c"../victim.txt", c"/scratch/dead-letters.jsonl");
                // SAFETY: two NUL-terminated strings; wasi-libc's symlink reads nothing else.
                match unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) } {
                    0 => out.emit(0, None, &serde_json::json!({ "planted": true })),
                    _ => Err(RecordError::invalid_value(format!("symlink: {}", std::io::Error::last_os_error()))),
                }
            }
            "disk" => {
                use std::io::Write;
                let chunk = vec![7u8; 1 << 20];
                let written = std::fs::File::create("/scratch/flood")
                    .and_then(|mut f| (0..256).try_for_each(|_| f.write_all(&chunk)));
                match written {
                    Ok(()) => out.emit(0, None, &serde_json::json!({ "wrote_mb": 256 })),
                    Err(e) => Err(RecordError::invalid_value(format!("disk: {e}"))),
                }
            }
            "disk-links" => {
                let chunk = vec![7u8; 1 << 20];
                let linked = (0..256).try_for_each(|i| {
                    std::fs::write("/scratch/f", &chunk)?;
                    std::fs::hard_link("/scratch/f", format!("/scratch/link-{i}"))?;
                    std::fs::remove_file("/scratch/f")
                });
                match linked {
                    Ok(()) => out.emit(0, None, &serde_json::json!({ "linked_mb": 256 })),
                    Err(e) => Err(RecordError::invalid_value(format!("disk-links: {e}"))),
                }
            }
            other => Err(RecordError::invalid_value(format!("unknown attack {other}"))),
        }
    }
}

/// An accumulator no other plugin writes.
#[derive(Default, Serialize, Deserialize)]
struct Strange {
    only_mine: u64,
}

impl Aggregator for Hostile {
    type Acc = Strange;
    type Output = Strange;
    // `plugins/error-rate`'s, so that a test can hand this build error-rate's accumulators and
    // get past the version check to the decoding.
    const STATE_VERSION: u32 = 2;

    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Hostile)
    }
    fn add(&self, acc: &mut Strange, event: &Event<'_>) -> Result<(), PluginError> {
        match event.field_str("aggregate").ok().flatten().as_deref() {
            Some("loop") => loop {
                acc.only_mine = black_box(acc.only_mine.wrapping_add(1));
            },
            Some("panic") => panic!("hostile event asked for a panic"),
            _ => {}
        }
        acc.only_mine += 1;
        Ok(())
    }
    fn merge(&self, acc: &mut Strange, other: Strange) {
        acc.only_mine += other.only_mine;
    }
    fn finish(&self, acc: &Strange) -> Option<Strange> {
        Some(Strange { only_mine: acc.only_mine })
    }
}

/// A key's count, and padding an attack grows.
#[derive(Default, Serialize, Deserialize)]
struct Count {
    n: u64,
    pad: String,
}

impl Processor for Hostile {
    type State = Count;

    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Hostile)
    }

    fn process(
        &self,
        key: &[u8],
        state: &mut Option<Count>,
        events: &[Event<'_>],
        ctx: &mut Context,
    ) -> Result<(), PluginError> {
        let count = state.get_or_insert_with(Count::default);
        for e in events {
            match e.field_str("process").ok().flatten().as_deref() {
                Some("timers") => {
                    for t in 0..1_000_000 {
                        ctx.set_timer(Timer::event_time(e.time + t));
                    }
                }
                // Within every per-key limit (`limits.max_timers`' default), on each key that
                // asks: over many keys, the stage's total is what grows.
                Some("fanout") => {
                    for t in 1..=1_000 {
                        ctx.set_timer(Timer::event_time(e.time + t));
                    }
                }
                Some("state") => count.pad = "x".repeat(2 << 20),
                Some("panic") => panic!("hostile event asked for a panic"),
                _ => {}
            }
            count.n += 1;
            let key = String::from_utf8_lossy(key);
            ctx.emit(e.time, &serde_json::json!({ "key": key, "n": count.n }))?;
        }
        Ok(())
    }
}

export_plugin!(parser: Hostile, aggregator: Hostile, processor: Hostile);
