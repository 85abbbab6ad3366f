//! Waiting out an external system that went away (a database, a catalog, an object store): a
//! sink retries a delivery that failed for a reason that may pass, with a backoff, for up to its
//! `retry_for`, and says so once in the log. Redelivery is safe because every sink here keeps
//! each delivery once. Every default is a named constant here and nowhere else.

use std::time::{Duration, Instant};

use crate::{ConnectorError, Invalid};

/// How long a sink waits for a system that went away before the run fails, unless `retry_for`
/// says otherwise: long enough for a database or a store to restart or fail over, and what the
/// schema registry's `retry_for` waits by default.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(60);
/// The most `retry_for` may be.
pub const MAX_RETRY_FOR: Duration = Duration::from_secs(24 * 3600);
/// The first wait before another attempt; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// `sink.retry_for` as given (`None`: the default), checked against its range.
pub fn retry_for(given: Option<Duration>) -> Result<Duration, Invalid> {
    let retry_for = given.unwrap_or(DEFAULT_RETRY_FOR);
    if retry_for > MAX_RETRY_FOR {
        return Err(Invalid::new(
            "sink.retry_for",
            format!("at most {}h (default {}s)", MAX_RETRY_FOR.as_secs() / 3600, DEFAULT_RETRY_FOR.as_secs()),
        ));
    }
    Ok(retry_for)
}

/// One delivery's (or one start's) attempts at a system.
pub struct Patience {
    system: &'static str,
    address: String,
    retry_for: Duration,
    began: Instant,
    backoff: Duration,
}

impl Patience {
    pub fn new(system: &'static str, address: &str, retry_for: Duration) -> Self {
        Patience { system, address: address.to_string(), retry_for, began: Instant::now(), backoff: FIRST_BACKOFF }
    }

    /// Waits before the next attempt when `e` may pass, or returns it (once `retry_for` is
    /// over, saying so).
    pub fn wait(&mut self, e: ConnectorError) -> Result<(), ConnectorError> {
        let ConnectorError::Remote { what, transient: true, why } = e else { return Err(e) };
        if self.began.elapsed() >= self.retry_for {
            let what = format!(
                "{what} ({} at {}, tried for {}s: sink.retry_for)",
                self.system,
                self.address,
                self.retry_for.as_secs()
            );
            return Err(ConnectorError::Remote { what, transient: false, why });
        }
        if self.backoff == FIRST_BACKOFF {
            tracing::warn!(
                "{}: {what}: {why} (at {}); retrying for up to {}s",
                self.system.to_lowercase(),
                self.address,
                self.retry_for.as_secs()
            );
        }
        std::thread::sleep(self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Ok(())
    }
}
