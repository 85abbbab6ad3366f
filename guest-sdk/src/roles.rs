//! The traits a plugin implements, one per role.
//!
//! Each role's value is built once per instance by `new` from the stage's `config` table and then
//! reused for every batch that instance serves; it should hold configuration, not results.

use serde::{Serialize, de::DeserializeOwned};

use crate::{Config, Delivery, Emitter, Event, PluginError, Record, RecordError, Rows};

/// Turns raw source records into events.
pub trait Parser: Sized + Send + Sync + 'static {
    fn new(config: &Config) -> Result<Self, PluginError>;

    /// Parses one record into 0..n events via `out`. An error sends the record to the dead-letter
    /// output (with this reason) and takes back whatever was emitted for it.
    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError>;

    #[doc(hidden)]
    const IMPLEMENTED: bool = true;
}

/// Filters, maps or flat-maps events.
pub trait Transformer: Sized + Send + Sync + 'static {
    fn new(config: &Config) -> Result<Self, PluginError>;

    /// Emits 0..n events for `event` via `out` (emit nothing to filter it out). An error sends
    /// the event to the dead-letter output.
    fn transform(&self, event: &Event<'_>, out: &mut Emitter) -> Result<(), RecordError>;

    #[doc(hidden)]
    const IMPLEMENTED: bool = true;
}

/// An incremental aggregate. The host owns the accumulators (as [`Aggregator::encode_acc`] writes them),
/// stores them in its state store and passes them back in; the plugin keeps none of them.
pub trait Aggregator: Sized + Send + Sync + 'static {
    /// The running state of one group (window x key). `Default` is a new, empty accumulator.
    type Acc: Serialize + DeserializeOwned + Default;
    /// One result row.
    type Output: Serialize;

    fn new(config: &Config) -> Result<Self, PluginError>;

    /// Adds one event to the accumulator. A window's events come in input order; the SDK may
    /// interleave several windows' within a call (`docs/plugins.md`, "The order of events"), so
    /// this should depend on the accumulator and the event alone.
    fn add(&self, acc: &mut Self::Acc, event: &Event<'_>) -> Result<(), PluginError>;

    /// Folds `other` into `acc` (session windows that grow together, sliding-window panes).
    fn merge(&self, acc: &mut Self::Acc, other: Self::Acc);

    /// The result row of a group, or `None` for no row.
    fn finish(&self, acc: &Self::Acc) -> Option<Self::Output>;

    /// The version of `Acc`'s encoding. Change it whenever a new build could not read the
    /// accumulators an older build wrote: the host then asks [`Aggregator::migrate`] to convert
    /// the checkpointed state, and refuses to run if it cannot.
    const STATE_VERSION: u32 = 1;

    /// Converts one accumulator (its encoded bytes) written by state version `from`. The
    /// default converts nothing: a checkpoint of another version is refused.
    fn migrate(&self, from: u32, _acc: &[u8]) -> Result<Self::Acc, PluginError> {
        Err(PluginError::Unsupported(format!("no migration from state version {from} to {}", Self::STATE_VERSION)))
    }

    /// An accumulator's bytes, as the host stores them: never empty (empty stands for a new
    /// accumulator). The default is `Acc`'s compact JSON, which the Python SDK writes too, so
    /// the two builds of a plugin can resume each other's checkpoints. Override this and
    /// [`Aggregator::decode_acc`] together for a cheaper encoding: the SDK decodes and encodes
    /// every group's accumulator once per call, which is most of an aggregator's cost when
    /// groups are many and small (per-user sessions). Changing it is a new [`Aggregator::STATE_VERSION`].
    fn encode_acc(&self, acc: &Self::Acc) -> Result<Vec<u8>, PluginError> {
        serde_json::to_vec(acc).map_err(|e| PluginError::Internal(format!("accumulator does not encode: {e}")))
    }

    /// Reads what [`Aggregator::encode_acc`] wrote.
    fn decode_acc(&self, bytes: &[u8]) -> Result<Self::Acc, PluginError> {
        serde_json::from_slice(bytes).map_err(|e| PluginError::BadState(format!("accumulator does not decode: {e}")))
    }

    #[doc(hidden)]
    const IMPLEMENTED: bool = true;
}

/// A foreachBatch-style sink. The same [`Delivery`] always carries the same rows, and a batch
/// may be delivered again after a crash: skip (or overwrite) a delivery already written to be
/// exactly-once. Key on the whole delivery, not the batch id alone: another checkpoint's batch 7
/// (a replay from scratch, a second pipeline writing to the same place) is other rows.
pub trait Sink: Sized + Send + Sync + 'static {
    fn new(config: &Config) -> Result<Self, PluginError>;

    /// Called on each new instance before its first write.
    fn open(&self) -> Result<(), PluginError> {
        Ok(())
    }

    /// Writes, or stages for [`Sink::commit`], the rows of one delivery.
    fn write_batch(&self, delivery: &Delivery<'_>, rows: Rows<'_>) -> Result<(), PluginError>;

    /// Makes a staged delivery visible. Must be idempotent.
    fn commit(&self, _delivery: &Delivery<'_>) -> Result<(), PluginError> {
        Ok(())
    }

    #[doc(hidden)]
    const IMPLEMENTED: bool = true;
}

/// Fills the roles a plugin does not play; calling one answers `unsupported`.
#[doc(hidden)]
pub struct Unsupported;

impl Parser for Unsupported {
    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Unsupported)
    }
    fn parse(&self, _: &Record<'_>, _: &mut Emitter) -> Result<(), RecordError> {
        Ok(())
    }
    const IMPLEMENTED: bool = false;
}

impl Transformer for Unsupported {
    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Unsupported)
    }
    fn transform(&self, _: &Event<'_>, _: &mut Emitter) -> Result<(), RecordError> {
        Ok(())
    }
    const IMPLEMENTED: bool = false;
}

impl Aggregator for Unsupported {
    type Acc = ();
    type Output = ();
    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Unsupported)
    }
    fn add(&self, _: &mut (), _: &Event<'_>) -> Result<(), PluginError> {
        Ok(())
    }
    fn merge(&self, _: &mut (), _: ()) {}
    fn finish(&self, _: &()) -> Option<()> {
        None
    }
    const IMPLEMENTED: bool = false;
}

impl Sink for Unsupported {
    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(Unsupported)
    }
    fn write_batch(&self, _: &Delivery<'_>, _: Rows<'_>) -> Result<(), PluginError> {
        Ok(())
    }
    const IMPLEMENTED: bool = false;
}
