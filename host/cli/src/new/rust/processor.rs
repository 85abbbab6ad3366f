//! {{name}}: a keyed processor. Keeps a running total of each user's `amount` and emits it with
//! every event; a minute after a user's first event (event time) a timer emits the total and
//! clears the state. The host owns each key's state (`Total`, stored as JSON) and timers.
//!
//! `weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.

use serde::{Deserialize, Serialize};
use weir_guest::{
    Config, Context, Emitter, Event, Parser, Paths, PluginError, Processor, Record, RecordError, Timer,
    export_plugin,
};

/// A minute, the span a total covers.
const SPAN_MS: i64 = 60_000;

struct {{Type}};

#[derive(Serialize, Deserialize)]
struct Total {
    since: i64,
    total: f64,
}

#[derive(Serialize)]
struct Running<'a> {
    user: &'a str,
    total: f64,
}

#[derive(Serialize)]
struct Closed<'a> {
    user: &'a str,
    since: i64,
    closed_total: f64,
}

impl Processor for {{Type}} {
    type State = Total;

    fn new(_config: &Config) -> Result<Self, PluginError> {
        Ok({{Type}})
    }

    fn process(&self, key: &[u8], state: &mut Option<Total>, events: &[Event<'_>], ctx: &mut Context) -> Result<(), PluginError> {
        let user = String::from_utf8_lossy(key);
        for e in events {
            let amount: f64 = e.field("amount").map_err(|e| PluginError::Internal(format!("{e:?}")))?.unwrap_or(0.0);
            let s = state.get_or_insert_with(|| {
                ctx.set_timer(Timer::event_time(e.time + SPAN_MS));
                Total { since: e.time, total: 0.0 }
            });
            s.total += amount;
            ctx.emit(e.time, &Running { user: &user, total: s.total })?;
        }
        Ok(())
    }

    fn on_timers(&self, key: &[u8], state: &mut Option<Total>, timers: &[Timer], ctx: &mut Context) -> Result<(), PluginError> {
        if let (Some(s), Some(t)) = (state.take(), timers.first()) {
            let user = String::from_utf8_lossy(key);
            ctx.emit(t.at, &Closed { user: &user, since: s.since, closed_total: s.total })?;
        }
        Ok(())
    }
}
{{events}}
export_plugin!(parser: Events, processor: {{Type}});

#[cfg(test)]
mod tests {
    use weir_guest::testing;

    use super::*;

    #[test]
    fn a_running_total_and_a_timer_a_minute_on() {
        let events = [testing::event(1_000, r#"{"amount":3}"#), testing::event(2_000, r#"{"amount":4}"#)];
        let out = testing::run_processor::<{{Type}}>("{}", b"ada", None, &events, i64::MIN).expect("config");
        assert_eq!(out.rows.len(), 2);
        assert_eq!(out.state.map(|s| s.total), Some(7.0));
        assert_eq!(out.set_timers, [Timer::event_time(61_000)]);
    }
}
