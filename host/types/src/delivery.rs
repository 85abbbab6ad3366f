//! The identity of one delivery of a batch to a sink: what exactly-once sinks, native or Wasm,
//! dedupe on. It sits at the bottom because the sandbox hands it to sink plugins and the engine's
//! sinks take it, and neither should depend on the other for it.

/// Which delivery a batch is. Exactly-once sinks dedupe on the pair: a batch id alone would make
/// a replay from a fresh checkpoint, or a second pipeline writing to the same place, look like a
/// re-delivery and be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// The checkpoint's identity, created with it and kept for its life (`weir inspect` shows it).
    pub checkpoint: &'a str,
    pub batch_id: u64,
}
