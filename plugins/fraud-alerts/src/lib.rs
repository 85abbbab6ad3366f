//! Per-user fraud alerts, a keyed processor: `threshold` ERROR orders (rows whose `status` is
//! `status`) of one user within `within_ms` of the first of them emit one alert. The first error
//! of a streak sets an event-time timer at its time + `within_ms`; when the watermark reaches it,
//! the streak is over and the count resets. An error after that window starts a new streak.
//!
//! With `reset_timer = false` no timer is set: a pipeline's `process.ttl` ends idle streaks
//! instead, and a late error past the window still starts a new one.
//!
//! Config: `status` (default "ERROR"), `threshold` (default 3), `within_ms` (default 120000),
//! `reset_timer` (default true), `report_resets` (default false: with true, each streak the
//! timer ends is a row `{"user", "reset_at", "errors"}` too).

use serde::{Deserialize, Serialize};
use weir_guest::{Config, Context, Event, PluginError, Processor, Timer, export_plugin};

struct FraudAlerts {
    status: String,
    threshold: u32,
    within_ms: i64,
    reset_timer: bool,
    report_resets: bool,
}

/// A user's current streak of errors.
#[derive(Serialize, Deserialize)]
struct Streak {
    /// Event time of its first error.
    first: i64,
    errors: u32,
    alerted: bool,
}

#[derive(Serialize)]
struct Alert<'a> {
    user: &'a str,
    errors: u32,
    first_error: i64,
    alert_at: i64,
}

#[derive(Serialize)]
struct Reset<'a> {
    user: &'a str,
    reset_at: i64,
    errors: u32,
}

impl Processor for FraudAlerts {
    type State = Streak;

    fn new(config: &Config) -> Result<Self, PluginError> {
        let threshold: u32 = config.get("threshold")?.unwrap_or(3);
        let within_ms: i64 = config.get("within_ms")?.unwrap_or(120_000);
        if threshold == 0 || within_ms <= 0 {
            return Err(PluginError::InvalidConfig("threshold and within_ms must be positive".into()));
        }
        Ok(FraudAlerts {
            status: config.get("status")?.unwrap_or_else(|| "ERROR".into()),
            threshold,
            within_ms,
            reset_timer: config.get("reset_timer")?.unwrap_or(true),
            report_resets: config.get("report_resets")?.unwrap_or(false),
        })
    }

    fn process(
        &self,
        key: &[u8],
        state: &mut Option<Streak>,
        events: &[Event<'_>],
        ctx: &mut Context,
    ) -> Result<(), PluginError> {
        let user = String::from_utf8_lossy(key);
        for e in events {
            if !e.field_is("status", &self.status).map_err(|e| PluginError::Internal(format!("bad row: {e:?}")))? {
                continue;
            }
            match state {
                Some(s) if e.time - s.first <= self.within_ms => s.errors += 1,
                _ => {
                    if let (Some(old), true) = (state.as_ref(), self.reset_timer) {
                        ctx.delete_timer(Timer::event_time(old.first + self.within_ms));
                    }
                    *state = Some(Streak { first: e.time, errors: 1, alerted: false });
                    if self.reset_timer {
                        ctx.set_timer(Timer::event_time(e.time + self.within_ms));
                    }
                }
            }
            if let Some(s) = state
                && s.errors >= self.threshold
                && !s.alerted
            {
                s.alerted = true;
                ctx.emit(e.time, &Alert { user: &user, errors: s.errors, first_error: s.first, alert_at: e.time })?;
            }
        }
        Ok(())
    }

    fn on_timers(
        &self,
        key: &[u8],
        state: &mut Option<Streak>,
        timers: &[Timer],
        ctx: &mut Context,
    ) -> Result<(), PluginError> {
        if let Some(s) = state
            && let Some(t) = timers.iter().find(|t| t.at == s.first + self.within_ms)
        {
            if self.report_resets {
                let user = String::from_utf8_lossy(key);
                ctx.emit(t.at, &Reset { user: &user, reset_at: t.at, errors: s.errors })?;
            }
            *state = None;
        }
        Ok(())
    }
}

export_plugin!(processor: FraudAlerts);
