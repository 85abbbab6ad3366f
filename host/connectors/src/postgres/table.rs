//! The target table as the database's catalog describes it (its columns, their types, the key
//! a conflict is found by), read when the sink opens, and the SQL that applies a staged batch
//! to it. A table that cannot take the sink's rows (missing, no such column, no unique index
//! on the key) is refused then, naming the fix; a row that does not fit is found per row.
//!
//! Each JSON field becomes its column's type by PostgreSQL's own text input (`'12.50'::numeric`),
//! except where JSON and SQL write a value differently: a number in a date or timestamp column
//! is epoch milliseconds (Weir's event times and windows), a JSON array fills an array column,
//! and a json or jsonb column takes the value as it is.

use postgres::GenericClient;

use super::settings::{Settings, TableName, quote};
use crate::ConnectorError;

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// As `format_type` writes it (`numeric(10,2)`, `character varying(20)`).
    pub ty: String,
    /// The type without its modifier (`numeric`, `character varying`), what a value is cast to:
    /// an explicit cast to `varchar(4)` would cut a longer value short, where the insert's own
    /// assignment to the column refuses it.
    base: String,
    /// `pg_type.typcategory`: `A` array, `D` date and time, `U` user-defined (json, jsonb).
    category: char,
}

impl Column {
    /// The column's value from the JSON object `j`, as SQL.
    pub fn expr(&self) -> String {
        let (f, ty) = (literal(&self.name), &self.base);
        let text = format!("(j->>{f})");
        match (self.category, ty.as_str()) {
            (_, "json") => format!("CASE json_typeof(j->{f}) WHEN 'null' THEN NULL ELSE j->{f} END"),
            (_, "jsonb") => format!("CASE json_typeof(j->{f}) WHEN 'null' THEN NULL ELSE (j->{f})::jsonb END"),
            ('A', _) => format!(
                "CASE json_typeof(j->{f}) WHEN 'array' THEN ARRAY(SELECT json_array_elements_text(j->{f}))::{ty} \
                 ELSE {text}::{ty} END"
            ),
            ('D', "timestamp with time zone" | "timestamp without time zone" | "date") => {
                let epoch = if ty == "timestamp with time zone" { "timestamptz" } else { "timestamp" };
                format!(
                    "CASE json_typeof(j->{f}) WHEN 'number' THEN ('epoch'::{epoch} + {text}::bigint * interval \
                     '1 millisecond')::{ty} ELSE {text}::{ty} END"
                )
            }
            _ => format!("{text}::{ty}"),
        }
    }
}

/// The table a sink writes: the columns it writes, which of them are the key, and the SQL.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: TableName,
    pub columns: Vec<Column>,
    /// Indexes into `columns`.
    pub keys: Vec<usize>,
}

impl Table {
    /// Reads the table's description from the catalog and checks it against the settings.
    pub fn describe(c: &mut impl GenericClient, s: &Settings) -> Result<Table, ConnectorError> {
        let name = s.table.quoted();
        let refuse = |why: String| ConnectorError::Refused { key: "sink.table".into(), why };
        let rows = c
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typcategory::text, \
                 a.attgenerated <> '', format_type(a.atttypid, NULL) FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
                 WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                &[&name],
            )
            .map_err(super::sink::pg("cannot read the table's columns"))?;
        if rows.is_empty() {
            return Err(refuse(format!(
                "{} does not exist in database {:?}: create it (CREATE TABLE {} (...), with a primary key)",
                s.table,
                s.config.get_dbname().unwrap_or_default(),
                s.table
            )));
        }
        let all: Vec<(Column, bool)> = rows
            .iter()
            .map(|r| {
                let category: String = r.get(2);
                let category = category.chars().next().unwrap_or('X');
                let c = Column { name: r.get(0), ty: r.get(1), base: r.get(4), category };
                (c, r.get::<_, bool>(3))
            })
            .collect();
        let names: Vec<&str> = all.iter().map(|(c, _)| c.name.as_str()).collect();
        let key_names = match &s.key_columns {
            Some(k) => k.clone(),
            None => primary_key(c, &name)?.ok_or_else(|| ConnectorError::Refused {
                key: "sink.key_columns".into(),
                why: format!(
                    "{} has no primary key: name the columns that identify a row, e.g. key_columns = [\"{}\"] \
                     (a unique index must cover them), or give the table a primary key",
                    s.table, names[0]
                ),
            })?,
        };
        let wanted = s
            .columns
            .clone()
            .unwrap_or_else(|| all.iter().filter(|(_, generated)| !generated).map(|(c, _)| c.name.clone()).collect());
        let mut columns = Vec::new();
        for n in wanted.iter().chain(key_names.iter().filter(|k| !wanted.contains(k))) {
            let field =
                if s.columns.as_ref().is_some_and(|w| w.contains(n)) { "sink.columns" } else { "sink.key_columns" };
            match all.iter().find(|(c, _)| &c.name == n) {
                Some((_, true)) => {
                    return Err(ConnectorError::Refused {
                        key: field.into(),
                        why: format!("{n:?} is a generated column of {}, which cannot be written", s.table),
                    });
                }
                Some((c, false)) => columns.push(c.clone()),
                None => {
                    return Err(ConnectorError::Refused {
                        key: field.into(),
                        why: format!("{n:?} is not a column of {} (its columns: {})", s.table, names.join(", ")),
                    });
                }
            }
        }
        let keys = key_names.iter().filter_map(|k| columns.iter().position(|c| &c.name == k)).collect();
        let table = Table { name: s.table.clone(), columns, keys };
        table.check_unique(c, &name, &key_names)?;
        Ok(table)
    }

    /// `ON CONFLICT (keys)` needs a unique index on exactly those columns.
    fn check_unique(&self, c: &mut impl GenericClient, name: &str, keys: &[String]) -> Result<(), ConnectorError> {
        let rows = c
            .query(
                "SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) k JOIN pg_attribute a \
                 ON a.attrelid = i.indrelid AND a.attnum = k) FROM pg_index i WHERE i.indrelid = to_regclass($1) \
                 AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL",
                &[&name],
            )
            .map_err(super::sink::pg("cannot read the table's indexes"))?;
        let mut want: Vec<&String> = keys.iter().collect();
        want.sort();
        let covered = rows.iter().any(|r| {
            let mut have: Vec<String> = r.get(0);
            have.sort();
            have.iter().collect::<Vec<_>>() == want
        });
        if covered {
            return Ok(());
        }
        let list = keys.iter().map(|k| quote(k)).collect::<Vec<_>>().join(", ");
        Err(ConnectorError::Refused {
            key: "sink.key_columns".into(),
            why: format!(
                "{} has no unique index on ({}), which an upsert finds a row's conflict by: CREATE UNIQUE INDEX \
                 ON {} ({list}), or name the columns of its primary key",
                self.name,
                keys.join(", "),
                self.name.quoted()
            ),
        })
    }

    /// Applies the staged operations whose `ord` is in `$1..=$2`: each key's last one, a
    /// tombstone deleting its row, any other upserting it.
    pub fn apply_sql(&self) -> String {
        let cast: Vec<String> =
            self.columns.iter().enumerate().map(|(i, c)| format!("{} AS \"weir${i}\"", c.expr())).collect();
        let keys: Vec<String> = self.keys.iter().map(|k| format!("\"weir${k}\"")).collect();
        let matched: Vec<String> =
            self.keys.iter().map(|&k| format!("t.{} = last.\"weir${k}\"", quote(&self.columns[k].name))).collect();
        let names: Vec<String> = self.columns.iter().map(|c| quote(&c.name)).collect();
        let values: Vec<String> = (0..self.columns.len()).map(|i| format!("\"weir${i}\"")).collect();
        let key_names: Vec<String> = self.keys.iter().map(|&k| quote(&self.columns[k].name)).collect();
        let updates: Vec<String> = (0..self.columns.len())
            .filter(|i| !self.keys.contains(i))
            .map(|i| format!("{0} = EXCLUDED.{0}", quote(&self.columns[i].name)))
            .collect();
        let on_conflict = if updates.is_empty() {
            format!("ON CONFLICT ({}) DO NOTHING", key_names.join(", "))
        } else {
            format!("ON CONFLICT ({}) DO UPDATE SET {}", key_names.join(", "), updates.join(", "))
        };
        let t = self.name.quoted();
        format!(
            "WITH src AS (SELECT s.ord AS \"weir$ord\", s.tomb AS \"weir$tomb\", s.doc::json AS j \
             FROM pg_temp.{STAGE} s WHERE s.ord BETWEEN $1 AND $2), \
             typed AS (SELECT \"weir$ord\", \"weir$tomb\", {cast} FROM src), \
             last AS MATERIALIZED (SELECT DISTINCT ON ({keys}) * FROM typed ORDER BY {keys}, \"weir$ord\" DESC), \
             gone AS (DELETE FROM {t} t USING last WHERE last.\"weir$tomb\" AND {matched}) \
             INSERT INTO {t} ({names}) SELECT {values} FROM last WHERE NOT \"weir$tomb\" {on_conflict}",
            cast = cast.join(", "),
            keys = keys.join(", "),
            matched = matched.join(" AND "),
            names = names.join(", "),
            values = values.join(", "),
        )
    }

    /// Column `i`'s value from one row (`$1`) into the probe table, to find which column a row
    /// that does not fit fails on (run in a savepoint, always rolled back).
    pub fn probe_sql(&self, i: usize) -> String {
        format!(
            "INSERT INTO pg_temp.{PROBE} ({}) SELECT {} FROM (SELECT $1::text::json AS j) s",
            quote(&self.columns[i].name),
            self.columns[i].expr()
        )
    }

    /// The probe table: the written columns' types, without the table's constraints, so that
    /// a value is checked against its own column alone.
    pub fn probe_ddl(&self) -> String {
        let names: Vec<String> = self.columns.iter().map(|c| quote(&c.name)).collect();
        format!(
            "DROP TABLE IF EXISTS pg_temp.{PROBE}; CREATE TEMPORARY TABLE {PROBE} AS SELECT {} FROM {} WITH NO DATA",
            names.join(", "),
            self.name.quoted()
        )
    }
}

/// The session's table a row's values are tried in, one column at a time.
const PROBE: &str = "weir_probe";

/// The session's staging table: a batch's operations in order, copied in, applied, and
/// emptied at commit.
pub const STAGE: &str = "weir_stage";

pub const STAGE_DDL: &str = "CREATE TEMPORARY TABLE IF NOT EXISTS weir_stage (ord int4 NOT NULL, tomb bool NOT NULL, doc text NOT NULL) \
     ON COMMIT DELETE ROWS";

/// The primary key's columns in index order; `None` without one.
fn primary_key(c: &mut impl GenericClient, name: &str) -> Result<Option<Vec<String>>, ConnectorError> {
    let rows = c
        .query(
            "SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(n, o) \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n ORDER BY k.o) \
             FROM pg_index i WHERE i.indrelid = to_regclass($1) AND i.indisprimary",
            &[&name],
        )
        .map_err(super::sink::pg("cannot read the table's primary key"))?;
    Ok(rows.first().map(|r| r.get(0)))
}

/// A string as an SQL literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}
