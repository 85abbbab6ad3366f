//! The commands of the `weir` CLI that are more than a call into the library.

pub mod demo;
pub mod inspect;
pub mod latency;
pub mod metrics;
pub mod record;
