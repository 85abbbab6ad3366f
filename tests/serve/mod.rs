//! `weir serve` end to end: the real binary, real HTTP requests (ureq), real plugins uploaded
//! through the API, the orders pipeline run to the oracle's windows; tenants that cannot see
//! each other; requests that are refused with the field to blame; and the service killed with
//! SIGKILL again and again while three pipelines run, each ending with an uninterrupted run's
//! output.
//!
//! The service's helpers are in `tests/common/serve.rs`; each file here is one area: what a
//! tenant deploys and what others cannot see, refused requests, a pipeline's life through
//! pauses, updates and kills, the routes and the thin client, and HTTPS.

mod client;
mod https;
mod lifecycle;
mod quota;
mod refusals;
mod tenants;
