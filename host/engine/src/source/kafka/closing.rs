//! A Kafka client that is closed on a thread of its own when dropped. A consumer with a
//! `group.id` (the source's commits group offsets for lag monitoring) closes by talking to the
//! group coordinator, and rdkafka waits for that without a bound: with the broker down, a run
//! that has finished would never return. So the close is waited for a while, then left to
//! finish in the background.

use std::time::Duration;

/// How long dropping a client waits for its close before leaving it to the background.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A client that is closed on a thread of its own when dropped, waited for at most
/// [`CLOSE_WAIT`].
pub(super) struct Closing<T: Send + 'static>(pub Option<T>);

impl<T: Send + 'static> std::ops::Deref for Closing<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0.as_ref().unwrap_or_else(|| unreachable!("taken only in drop"))
    }
}

impl<T: Send + 'static> Drop for Closing<T> {
    fn drop(&mut self) {
        let Some(client) = self.0.take() else { return };
        let (done, closed) = std::sync::mpsc::channel();
        let closer = std::thread::Builder::new().name("weir-kafka-close".into()).spawn(move || {
            drop(client);
            let _ = done.send(());
        });
        if closer.is_ok() && closed.recv_timeout(CLOSE_WAIT).is_err() {
            tracing::warn!(
                "kafka: the consumer did not close within {CLOSE_WAIT:?} (broker unavailable?); closing it in the background"
            );
        }
    }
}
