//! The catalog and the table, as the sink finds them when it opens: the SQL catalog loaded with
//! the warehouse's storage, the namespace and table made if missing (format v2, partitioned as
//! `partition_by` says), and a table that exists brought to the pipeline's columns: a column
//! the schema adds is added (schema evolution); a column whose type differs, or a required one
//! the rows cannot fill, is refused, naming it and the fix.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema as ArrowSchema, TimeUnit};
use iceberg::arrow::{arrow_schema_to_schema_auto_assign_ids, schema_to_arrow_schema};
use iceberg::spec::{NestedFieldRef, Transform, Type, UnboundPartitionSpec};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg::{Catalog, CatalogBuilder, NamespaceIdent, TableCreation, TableIdent};
use iceberg_catalog_sql::{
    SQL_CATALOG_PROP_BIND_STYLE, SQL_CATALOG_PROP_URI, SQL_CATALOG_PROP_WAREHOUSE, SqlBindStyle, SqlCatalog,
    SqlCatalogBuilder,
};
use iceberg_storage_opendal::OpenDalResolvingStorageFactory;

use super::settings::{CatalogDb, Settings, credentials};
use crate::ConnectorError;
use crate::partition::Partition;

/// Connections the catalog keeps to its database: one writer commits at a time.
const CATALOG_CONNECTIONS: &str = "2";

/// A failed catalog or store call, with what was being done.
pub(super) fn ice(what: &'static str) -> impl Fn(iceberg::Error) -> ConnectorError {
    move |e| {
        // Commit conflicts and I/O (a store or database that went away) may pass; a refused
        // schema or a missing table does not.
        let transient = e.retryable() || matches!(e.kind(), iceberg::ErrorKind::Unexpected);
        ConnectorError::Remote { what: what.to_string(), transient, why: format!("{e:#}") }
    }
}

/// The catalog, with the warehouse's storage.
pub async fn catalog(s: &Settings) -> Result<SqlCatalog, ConnectorError> {
    let mut props = HashMap::new();
    let (uri, style) = match &s.catalog {
        CatalogDb::Sqlite(path) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(ConnectorError::io(format!("cannot make {}", dir.display())))?;
            }
            let abs = std::path::absolute(path).map_err(ConnectorError::io(format!("{}", path.display())))?;
            (format!("sqlite://{}?mode=rwc", abs.display()), SqlBindStyle::QMark)
        }
        CatalogDb::Postgres { url, password_file, .. } => {
            let url = match password_file {
                Some(f) => with_password(url, f)?,
                None => url.clone(),
            };
            (url, SqlBindStyle::DollarNumeric)
        }
    };
    props.insert(SQL_CATALOG_PROP_URI.to_string(), uri);
    props.insert(SQL_CATALOG_PROP_WAREHOUSE.to_string(), s.warehouse.clone());
    props.insert(SQL_CATALOG_PROP_BIND_STYLE.to_string(), style.to_string());
    props.insert("pool.max-connections".to_string(), CATALOG_CONNECTIONS.to_string());
    if let Some(s3) = &s.s3 {
        if let Some(e) = &s3.endpoint {
            props.insert("s3.endpoint".into(), e.clone());
        }
        props.insert("s3.region".into(), s3.region.clone());
        props.insert("s3.path-style-access".into(), s3.path_style.to_string());
        if let Some(f) = &s3.credentials_file {
            let (id, secret) = credentials(f)
                .map_err(|why| ConnectorError::Refused { key: "sink.s3.credentials_file".into(), why })?;
            props.insert("s3.access-key-id".into(), id);
            props.insert("s3.secret-access-key".into(), secret);
            // The keys are the file's: no environment, profile or instance metadata.
            props.insert("s3.disable-config-load".into(), "true".into());
            props.insert("s3.disable-ec2-metadata".into(), "true".into());
        }
    }
    SqlCatalogBuilder::default()
        .with_storage_factory(Arc::new(OpenDalResolvingStorageFactory::new()))
        .load(&s.catalog_name, props)
        .await
        .map_err(ice("cannot open the catalog"))
}

/// `postgres://USER@HOST/DB` with the password from its file, percent-encoded.
fn with_password(url: &str, file: &std::path::Path) -> Result<String, ConnectorError> {
    let text = std::fs::read_to_string(file).map_err(ConnectorError::io(format!("cannot read {}", file.display())))?;
    let password: String = text
        .trim_end_matches(['\r', '\n'])
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (user, host) = rest.split_once('@').unwrap_or((rest, ""));
    Ok(format!("{scheme}://{user}:{password}@{host}"))
}

/// The pipeline's columns as Iceberg takes them: timestamps in microseconds (Iceberg has no
/// millisecond timestamp; the sink casts each batch).
pub fn iceberg_columns(schema: &ArrowSchema) -> ArrowSchema {
    ArrowSchema::new(schema.fields().iter().map(|f| Arc::new(micros(f))).collect::<Vec<_>>())
}

fn micros(f: &Field) -> Field {
    let t = match f.data_type() {
        DataType::Timestamp(TimeUnit::Millisecond | TimeUnit::Second, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.clone())
        }
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(|c| Arc::new(micros(c))).collect()),
        DataType::List(item) => DataType::List(Arc::new(micros(item))),
        other => other.clone(),
    };
    f.clone().with_data_type(t)
}

/// The table, made if missing and brought to the pipeline's columns.
pub async fn open(catalog: &SqlCatalog, s: &Settings) -> Result<Table, ConnectorError> {
    let wanted =
        arrow_schema_to_schema_auto_assign_ids(&iceberg_columns(&s.schema)).map_err(|e| ConnectorError::Refused {
            key: "sink.schema".into(),
            why: format!("{}: no Iceberg columns: {e}", s.schema_file.display()),
        })?;
    let ns = NamespaceIdent::new(s.namespace.clone());
    if !catalog.namespace_exists(&ns).await.map_err(ice("cannot read the catalog"))? {
        match catalog.create_namespace(&ns, HashMap::new()).await {
            Err(e) if e.kind() == iceberg::ErrorKind::NamespaceAlreadyExists => {}
            r => {
                r.map_err(ice("cannot make the namespace"))?;
            }
        }
    }
    let ident = TableIdent::new(ns.clone(), s.table.clone());
    if !catalog.table_exists(&ident).await.map_err(ice("cannot read the catalog"))? {
        let mut creation = TableCreation::builder().name(s.table.clone()).schema(wanted.clone()).build();
        if let Some(p) = &s.partition {
            creation.partition_spec = Some(spec(&wanted, p)?);
        }
        match catalog.create_table(&ns, creation).await {
            Err(e) if e.kind() == iceberg::ErrorKind::TableAlreadyExists => {}
            r => {
                r.map_err(ice("cannot make the table"))?;
            }
        }
    }
    let table = catalog.load_table(&ident).await.map_err(ice("cannot load the table"))?;
    evolve(catalog, table, &wanted, s).await
}

/// The partition spec of `p` over `schema`.
fn spec(schema: &iceberg::spec::Schema, p: &Partition) -> Result<UnboundPartitionSpec, ConnectorError> {
    let refused = |why: String| ConnectorError::Refused { key: "sink.partition_by".into(), why };
    let column = p.column();
    let field = schema.field_by_name(column).ok_or_else(|| refused(format!("{column:?} is not a column")))?;
    let (name, transform) = match p {
        Partition::Value(c) => (c.clone(), Transform::Identity),
        Partition::Day(c) => (format!("{c}_day"), Transform::Day),
        Partition::Hour(c) => (format!("{c}_hour"), Transform::Hour),
    };
    Ok(UnboundPartitionSpec::builder()
        .add_partition_field(field.id, name, transform)
        .map_err(|e| refused(format!("{e}")))?
        .build())
}

/// Adds the columns `wanted` has and the table lacks; refuses what the rows cannot fill.
async fn evolve(
    catalog: &SqlCatalog,
    table: Table,
    wanted: &iceberg::spec::Schema,
    s: &Settings,
) -> Result<Table, ConnectorError> {
    let current = table.metadata().current_schema().clone();
    let refused = |why: String| ConnectorError::Refused { key: "sink.schema".into(), why };
    let name = format!("{}.{}", s.namespace, s.table);
    let mut added: Vec<NestedFieldRef> = Vec::new();
    for f in wanted.as_struct().fields() {
        match current.field_by_name(&f.name) {
            Some(have) if *have.field_type != *f.field_type => {
                return Err(refused(format!(
                    "column {:?} of table {name} is {}, and {} gives it as {}: a column keeps its type; write \
                     to a new table, or give the column its table's type",
                    f.name,
                    have.field_type,
                    s.schema_file.display(),
                    f.field_type
                )));
            }
            Some(_) => {}
            None if f.required => {
                return Err(refused(format!(
                    "{} adds column {:?}, which table {name} lacks and its rows already written cannot fill: make \
                     it optional ([\"null\", T] in the schema)",
                    s.schema_file.display(),
                    f.name
                )));
            }
            None => added.push(f.clone()),
        }
    }
    for have in current.as_struct().fields() {
        if have.required && wanted.field_by_name(&have.name).is_none() {
            return Err(refused(format!(
                "table {name} requires column {:?}, which {} lacks: add it to the schema",
                have.name,
                s.schema_file.display()
            )));
        }
    }
    if added.is_empty() {
        return Ok(table);
    }
    let tx = Transaction::new(&table);
    let mut update = tx.update_schema();
    for f in &added {
        update = update.add_column(AddColumn::optional(f.name.clone(), Type::clone(&f.field_type)));
    }
    let tx = update.apply(tx).map_err(ice("cannot add the new columns"))?;
    let names: Vec<&str> = added.iter().map(|f| f.name.as_str()).collect();
    tracing::info!("iceberg: table {name} takes the new columns {}", names.join(", "));
    tx.commit(catalog).await.map_err(ice("cannot add the new columns"))
}

/// The Arrow schema a batch is written in: the table's current columns, with their field ids.
pub fn write_schema(table: &Table) -> Result<Arc<ArrowSchema>, ConnectorError> {
    schema_to_arrow_schema(table.metadata().current_schema())
        .map(Arc::new)
        .map_err(ice("cannot read the table's schema"))
}
