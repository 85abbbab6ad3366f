//! Every default and bound of registry access, each named once; the docs quote these.

use std::time::Duration;

/// `registry.retry_for`: how long the host keeps retrying a registry that cannot be reached (or
/// answers 5xx) before the run stops with an error naming it. Records wait meanwhile; none is
/// skipped.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(60);
/// The longest `registry.retry_for`.
pub const MAX_RETRY_FOR: Duration = Duration::from_secs(86_400);
/// `registry.timeout`: how long one request may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait between retries; it doubles up to [`MAX_RETRY_WAIT`].
pub const FIRST_RETRY_WAIT: Duration = Duration::from_millis(100);
/// The longest wait between two retries.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);
/// The largest schema text the host takes from a registry: a schema is read into memory and
/// handed to plugins, so a hostile registry cannot make either allocate without bound.
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// The most schemas one schema may reference, directly or through others.
pub const MAX_REFERENCES: usize = 64;
