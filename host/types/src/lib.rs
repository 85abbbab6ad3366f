//! The bottom of Weir's host: types and helpers every layer above shares, with no knowledge of
//! plugins, operators, state or deployment. Nothing here depends on another crate of the host.
//!
//! - [`columns`]: a batch's rows as one buffer and their ends, and [`bytes`], the readers and
//!   writers of the host's binary records;
//! - [`json`]: the checks a row passes before it leaves Weir, on the scanner plugins share;
//! - [`keys`]: the field a row is keyed by, and the one rule that makes key bytes of it;
//! - [`rows`]: the rows a batch emits, with their keys and event times;
//! - [`Delivery`]: which delivery of which batch a sink is given;
//! - [`Dur`]: durations as configuration files spell them;
//! - [`watermark`] and [`window`]: event time, and the windows a time falls in;
//! - [`own_files`], [`retry`]: opening files only the process owns, and bounded retries;
//! - [`workload`]: the reference order workload (`weir gen orders`).

pub mod bytes;
pub mod columns;
mod delivery;
mod dur;
pub mod json;
pub mod keys;
pub mod own_files;
pub mod retry;
pub mod rows;
pub mod watermark;
pub mod window;
pub mod workload;

pub use delivery::Delivery;
pub use dur::Dur;
