//! `[join]` against naive references computed here. The stream-table join: orders looked up by
//! user in a table of users that is updated, deleted from (tombstones) and given bad records
//! between two runs on one checkpoint, and in a topic while a run reads it; then through
//! repeated `kill -9`. The changelog round trip on the mock Kafka cluster: windows into a keyed
//! topic, that topic back as a table, a join against it; and update mode's upserts and
//! tombstones, read back the same way. The interval join: orders with their shipments, across
//! two runs and through repeated `kill -9`.
//!
//! `support` holds the join pipeline and the table reference the other files share; each other
//! file is one kind of table or join.

mod changelog;
mod interval;
mod live_table;
mod support;
mod table;
