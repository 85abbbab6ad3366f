//! PostgreSQL: a changelog kept current in a table. Each row is upserted by the table's key
//! (`INSERT ... ON CONFLICT ... DO UPDATE`), each tombstone deletes its key's row, and within a
//! batch each key's last operation is the one applied. `docs/postgres.md` is the user's page.
//!
//! Exactly-once per delivery: the sink keeps, in a deliveries table in the same database, the
//! last batch delivered per (target table, checkpoint identity) and the rows it rejected. A
//! delivery is one transaction that locks its checkpoint's record, applies the batch only if
//! the record is behind it, and moves the record to it. The rows and the record commit
//! together or not at all, so a batch delivered again after a crash (or by a process that lost
//! its connection mid-commit) finds its record and changes nothing, and its rejected rows come
//! back from the record for the dead letters. Batches of a checkpoint are delivered in order,
//! so a record at or past a batch means that batch is in the table.

mod settings;
mod sink;
mod stage;
mod table;

pub use settings::{DEFAULT_DELIVERIES_TABLE, DEFAULT_PORT, Given, Settings, TableName};
pub use sink::PostgresSink;
