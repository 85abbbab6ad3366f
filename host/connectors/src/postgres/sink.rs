//! The PostgreSQL sink: each delivery in one transaction that claims the delivery in the
//! deliveries table, copies the batch into a staging table, applies it to the target table
//! (each key's last row upserted, or deleted by a tombstone) and records the delivery with its
//! rejected rows. See `mod.rs` for why that is exactly-once.
//!
//! Rows that do not fit the table are found by halving: a range that fails for its data is
//! rolled back to a savepoint and applied as two halves, in order, down to single rows, which
//! are rejected naming the column (or the constraint) they break. A database that goes away is
//! reconnected to, the delivery started again, for up to `retry_for`.

use std::io::Write;

use postgres::error::SqlState;
use postgres::{Client, NoTls, Transaction};
use weir_types::Delivery;
use weir_types::rows::Rows;

use super::settings::{Settings, quote};
use super::stage::{Staged, stage};
use super::table::{STAGE, STAGE_DDL, Table};
use crate::retry::Patience;
use crate::{ConnectorError, TableSink};

pub struct PostgresSink {
    s: Settings,
    client: Option<Client>,
    table: Table,
    apply: String,
    /// The table as the deliveries table names it.
    target: String,
    rejected: Vec<(usize, String)>,
}

/// A failed database call, with what was being done.
pub(super) fn pg(what: &'static str) -> impl Fn(postgres::Error) -> ConnectorError {
    move |e| ConnectorError::Remote { what: what.to_string(), transient: transient(&e), why: describe(&e) }
}

impl PostgresSink {
    pub fn open(s: &Settings) -> Result<Self, ConnectorError> {
        let mut patience = Patience::new("PostgreSQL", &s.address, s.retry_for);
        let (client, table) = loop {
            let described = connect(s, None).and_then(|mut c| {
                let t = Table::describe(&mut c, s)?;
                c.batch_execute(&t.probe_ddl()).map_err(pg("cannot make the probe table"))?;
                Ok((c, t))
            });
            match described {
                Ok((c, t)) => break (Some(c), t),
                Err(e) => patience.wait(e)?,
            }
        };
        let mut sink = PostgresSink {
            s: s.clone(),
            client,
            apply: table.apply_sql(),
            target: table.name.to_string(),
            table,
            rejected: Vec::new(),
        };
        sink.ledger()?;
        Ok(sink)
    }

    /// Makes the deliveries table if it is missing.
    fn ledger(&mut self) -> Result<(), ConnectorError> {
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} (target text NOT NULL, checkpoint text NOT NULL, batch_id bigint NOT NULL, \
             rejected text NOT NULL, delivered_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (target, checkpoint))",
            self.s.deliveries.quoted()
        );
        let Some(c) = self.client.as_mut() else { return Ok(()) };
        match c.batch_execute(&ddl) {
            // Two sinks creating it at once: one wins, and the table is there for both.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) || e.code() == Some(&SqlState::DUPLICATE_TABLE) => {
                Ok(())
            }
            r => r.map_err(pg("cannot make the deliveries table")),
        }
    }

    /// One attempt at a delivery, in one transaction; returns the rows rejected.
    fn attempt(&mut self, d: &Delivery, staged: &Staged) -> Result<Vec<(usize, String)>, ConnectorError> {
        if self.client.is_none() {
            self.client = Some(connect(&self.s, Some(&self.table))?);
        }
        let Some(client) = self.client.as_mut() else { unreachable!("connected above") };
        let deliveries = self.s.deliveries.quoted();
        let mut tx = client.transaction().map_err(pg("cannot begin a transaction"))?;
        let (target, checkpoint, batch) = (&self.target, &d.checkpoint, d.batch_id as i64);
        tx.execute(
            &format!(
                "INSERT INTO {deliveries} (target, checkpoint, batch_id, rejected) VALUES ($1, $2, -1, '[]') \
                 ON CONFLICT DO NOTHING"
            ),
            &[target, checkpoint],
        )
        .map_err(pg("cannot claim the delivery"))?;
        // Locked until commit: a second writer of this checkpoint (a process the group gave up
        // on) waits here, then finds the batch delivered.
        let row = tx
            .query_one(
                &format!(
                    "SELECT batch_id, rejected FROM {deliveries} WHERE target = $1 AND checkpoint = $2 FOR UPDATE"
                ),
                &[target, checkpoint],
            )
            .map_err(pg("cannot read the deliveries table"))?;
        if row.get::<_, i64>(0) >= batch {
            let rejected: String = row.get(1);
            tx.commit().map_err(pg("cannot commit"))?;
            return serde_json::from_str(&rejected).map_err(|e| ConnectorError::Remote {
                what: "the deliveries table".into(),
                transient: false,
                why: e.to_string(),
            });
        }
        let mut rejected = staged.rejected.clone();
        if !staged.rows.is_empty() {
            let mut w = tx
                .copy_in(&format!("COPY pg_temp.{STAGE} (ord, tomb, doc) FROM STDIN"))
                .map_err(pg("cannot stage the batch"))?;
            w.write_all(&staged.copy).map_err(|e| ConnectorError::Remote {
                what: "cannot stage the batch".into(),
                transient: true,
                why: e.to_string(),
            })?;
            w.finish().map_err(pg("cannot stage the batch"))?;
            apply(&mut tx, &self.apply, &self.table, staged, 0, staged.rows.len() as i32 - 1, &mut rejected)?;
        }
        rejected.sort_unstable_by_key(|r| r.0);
        let record = serde_json::to_string(&rejected).unwrap_or_else(|_| "[]".into());
        tx.execute(
            &format!("UPDATE {deliveries} SET batch_id = $3, rejected = $4, delivered_at = now() WHERE target = $1 AND checkpoint = $2"),
            &[target, checkpoint, &batch, &record],
        )
        .map_err(pg("cannot record the delivery"))?;
        tx.commit().map_err(pg("cannot commit"))?;
        Ok(rejected)
    }
}

impl TableSink for PostgresSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), ConnectorError> {
        let keys: Vec<&str> = self.table.keys.iter().map(|&k| self.table.columns[k].name.as_str()).collect();
        let staged = stage(rows, &keys);
        let mut patience = Patience::new("PostgreSQL", &self.s.address, self.s.retry_for);
        loop {
            match self.attempt(delivery, &staged) {
                Ok(rejected) => {
                    self.rejected = rejected;
                    return Ok(());
                }
                Err(e) => {
                    // The connection may be broken, or mid-transaction: start afresh.
                    self.client = None;
                    patience.wait(e)?;
                }
            }
        }
    }

    fn rejected(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.rejected)
    }
}

/// Applies staged operations `lo..=hi`; a range that fails for its data is halved, and a single
/// operation that fails is rejected.
fn apply(
    tx: &mut Transaction<'_>,
    sql: &str,
    table: &Table,
    staged: &Staged,
    lo: i32,
    hi: i32,
    rejected: &mut Vec<(usize, String)>,
) -> Result<(), ConnectorError> {
    let mut sp = tx.savepoint("weir_apply").map_err(pg("cannot make a savepoint"))?;
    let e = match sp.execute(sql, &[&lo, &hi]) {
        Ok(_) => return sp.commit().map_err(pg("cannot release a savepoint")),
        Err(e) if is_data(&e) => e,
        Err(e) => return Err(pg("cannot apply the batch")(e)),
    };
    sp.rollback().map_err(pg("cannot roll back to a savepoint"))?;
    if lo == hi {
        let row = staged.rows[lo as usize];
        let why = column_at_fault(tx, table, staged, lo)?.unwrap_or_else(|| describe(&e));
        rejected.push((row, format!("does not fit table {}: {why}", table.name)));
        return Ok(());
    }
    let mid = lo + (hi - lo) / 2;
    apply(tx, sql, table, staged, lo, mid, rejected)?;
    apply(tx, sql, table, staged, mid + 1, hi, rejected)
}

/// The first column whose value in staged operation `at` does not read as its type, with why.
fn column_at_fault(
    tx: &mut Transaction<'_>,
    table: &Table,
    staged: &Staged,
    at: i32,
) -> Result<Option<String>, ConnectorError> {
    let line = staged.copy.split(|&b| b == b'\n').nth(at as usize).unwrap_or_default();
    let doc = line.splitn(3, |&b| b == b'\t').nth(2).unwrap_or_default();
    let doc = String::from_utf8_lossy(&super::stage::unescape(doc)).into_owned();
    for (i, c) in table.columns.iter().enumerate() {
        let mut sp = tx.savepoint("weir_column").map_err(pg("cannot make a savepoint"))?;
        let tried = sp.execute(&table.probe_sql(i), &[&doc]);
        sp.rollback().map_err(pg("cannot roll back to a savepoint"))?;
        match tried {
            Ok(_) => {}
            Err(e) if is_data(&e) => {
                return Ok(Some(format!("column {} ({}): {}", quote(&c.name), c.ty, describe(&e))));
            }
            Err(e) => return Err(pg("cannot check a column")(e)),
        }
    }
    Ok(None)
}

/// A session with the staging table (and, once the table is known, the probe table).
fn connect(s: &Settings, table: Option<&Table>) -> Result<Client, ConnectorError> {
    let config = s.connect_config().map_err(|e| ConnectorError::Remote {
        what: format!("cannot read {}", s.password_file.as_deref().unwrap_or(std::path::Path::new("?")).display()),
        transient: false,
        why: e.to_string(),
    })?;
    let mut c = config.connect(NoTls).map_err(pg("cannot connect"))?;
    c.batch_execute(STAGE_DDL).map_err(pg("cannot make the staging table"))?;
    if let Some(t) = table {
        c.batch_execute(&t.probe_ddl()).map_err(pg("cannot make the probe table"))?;
    }
    Ok(c)
}

/// A failure the data caused (a value that does not read as its column's type, a constraint
/// it breaks), which another row would not meet.
fn is_data(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| matches!(&c.code()[..2], "22" | "23" | "21"))
}

/// A failure that may pass by itself: the connection, the server shutting down or starting,
/// a lack of resources, a conflict with another transaction.
fn transient(e: &postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(c) => matches!(&c.code()[..2], "08" | "53" | "57" | "40") || c == &SqlState::CANNOT_CONNECT_NOW,
    }
}

/// The server's message, with its detail and the column it names; never the connection's
/// settings.
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut s = db.message().to_string();
            if let Some(d) = db.detail() {
                s.push_str(&format!(" ({d})"));
            }
            s
        }
        None => e.to_string(),
    }
}
