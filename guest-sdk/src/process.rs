//! The `processor` role: keyed state with timers. The host owns each key's state and timers and
//! hands them in; a [`Processor`] reads and changes them through `&mut Option<State>` and the
//! [`Context`], and keeps nothing itself. Everything a call does to a key (its state, rows and
//! timers) is applied by the host only when the whole call succeeds.

use serde::{Serialize, de::DeserializeOwned};

use crate::__bindings::exports::weir::plugin::processor as wit;
use crate::{Config, Event, PluginError};

/// Which clock a timer is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimeDomain {
    /// Fires in the first batch whose watermark reaches the timer's time.
    EventTime,
    /// Fires in the first batch planned at or after the timer's time (the host's clock).
    ProcessingTime,
}

/// One timer of a key: at most one per domain and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timer {
    pub domain: TimeDomain,
    /// Epoch milliseconds.
    pub at: i64,
}

impl Timer {
    /// Fires when the watermark reaches `at`.
    pub fn event_time(at: i64) -> Self {
        Timer { domain: TimeDomain::EventTime, at }
    }

    /// Fires in the first batch planned at or after `at`.
    pub fn processing_time(at: i64) -> Self {
        Timer { domain: TimeDomain::ProcessingTime, at }
    }

    pub(crate) fn from_wit(t: &wit::Timer) -> Self {
        let domain = match t.domain {
            wit::TimeDomain::EventTime => TimeDomain::EventTime,
            wit::TimeDomain::ProcessingTime => TimeDomain::ProcessingTime,
        };
        Timer { domain, at: t.at }
    }

    fn to_wit(self) -> wit::Timer {
        let domain = match self.domain {
            TimeDomain::EventTime => wit::TimeDomain::EventTime,
            TimeDomain::ProcessingTime => wit::TimeDomain::ProcessingTime,
        };
        wit::Timer { domain, at: self.at }
    }
}

/// What a processor can do for the key it is handling: emit rows, set and cancel timers, and
/// read the batch's clocks.
pub struct Context {
    watermark: i64,
    processing_time: i64,
    times: Vec<i64>,
    rows: Vec<u8>,
    row_ends: Vec<u32>,
    set: Vec<wit::Timer>,
    delete: Vec<wit::Timer>,
}

impl Context {
    pub(crate) fn new(clock: &wit::Clock) -> Self {
        Context {
            watermark: clock.watermark,
            processing_time: clock.processing_time,
            times: Vec::new(),
            rows: Vec::new(),
            row_ends: Vec::new(),
            set: Vec::new(),
            delete: Vec::new(),
        }
    }

    /// The watermark in force for this batch (epoch ms; `i64::MIN` before there is one).
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// When the batch was planned (epoch ms): the same when a batch is re-run after a crash.
    pub fn processing_time(&self) -> i64 {
        self.processing_time
    }

    /// Emits a row (serialized as a JSON object) at event time `time`.
    pub fn emit<T: Serialize + ?Sized>(&mut self, time: i64, row: &T) -> Result<(), PluginError> {
        let start = self.rows.len();
        if let Err(e) = serde_json::to_writer(&mut self.rows, row) {
            self.rows.truncate(start);
            return Err(PluginError::Internal(format!("row does not serialize: {e}")));
        }
        self.end_row(time)
    }

    /// Emits a row that is already a JSON object (an input event's row, say).
    pub fn emit_json(&mut self, time: i64, row: &[u8]) -> Result<(), PluginError> {
        self.rows.extend_from_slice(row);
        self.end_row(time)
    }

    fn end_row(&mut self, time: i64) -> Result<(), PluginError> {
        let end = u32::try_from(self.rows.len()).map_err(|_| PluginError::Internal("rows exceed 4 GiB".into()))?;
        self.times.push(time);
        self.row_ends.push(end);
        Ok(())
    }

    /// Sets a timer for this key (setting one that is set changes nothing).
    pub fn set_timer(&mut self, timer: Timer) {
        self.set.push(timer.to_wit());
    }

    /// Cancels a timer of this key (cancelling one that is not set changes nothing).
    pub fn delete_timer(&mut self, timer: Timer) {
        self.delete.push(timer.to_wit());
    }

    /// This key's result, and a clean context for the next key.
    pub(crate) fn take(&mut self, state: Option<Vec<u8>>) -> wit::KeyResult {
        wit::KeyResult {
            state,
            times: std::mem::take(&mut self.times),
            rows: std::mem::take(&mut self.rows),
            row_ends: std::mem::take(&mut self.row_ends),
            set_timers: std::mem::take(&mut self.set),
            delete_timers: std::mem::take(&mut self.delete),
        }
    }
}

/// A keyed, stateful processor with timers: Flink's `KeyedProcessFunction` in a sandbox. The
/// host stores `State` (as its JSON encoding) per key; `None` is a key with no state, and setting
/// it to `None` deletes it.
pub trait Processor: Sized + Send + Sync + 'static {
    /// One key's state.
    type State: Serialize + DeserializeOwned;

    fn new(config: &Config) -> Result<Self, PluginError>;

    /// Handles one key's events of a batch, in event-time order.
    fn process(
        &self,
        key: &[u8],
        state: &mut Option<Self::State>,
        events: &[Event<'_>],
        ctx: &mut Context,
    ) -> Result<(), PluginError>;

    /// Handles one key's timers that fired, by time. The default ignores them.
    fn on_timers(
        &self,
        _key: &[u8],
        _state: &mut Option<Self::State>,
        _timers: &[Timer],
        _ctx: &mut Context,
    ) -> Result<(), PluginError> {
        Ok(())
    }

    /// The version of `State`'s encoding, as [`crate::Aggregator::STATE_VERSION`].
    const STATE_VERSION: u32 = 1;

    /// Converts one state (its encoded bytes) written by state version `from`. The default
    /// converts nothing: a checkpoint of another version is refused.
    fn migrate(&self, from: u32, _state: &[u8]) -> Result<Self::State, PluginError> {
        Err(PluginError::Unsupported(format!("no migration from state version {from} to {}", Self::STATE_VERSION)))
    }

    #[doc(hidden)]
    const IMPLEMENTED: bool = true;
}

impl Processor for crate::Unsupported {
    type State = ();
    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(crate::Unsupported)
    }
    fn process(&self, _: &[u8], _: &mut Option<()>, _: &[Event<'_>], _: &mut Context) -> Result<(), PluginError> {
        Ok(())
    }
    const IMPLEMENTED: bool = false;
}
