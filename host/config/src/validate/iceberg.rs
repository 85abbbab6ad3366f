//! `[sink] type = "iceberg"`: an Apache Iceberg table's settings, its columns from the Avro
//! record schema `schema` names (the table itself is checked against them when the run starts).

use super::sinks::{built_in, columns};
use super::*;
use crate::file::S3File;

pub(super) fn iceberg(
    s: SinkFile,
    rel: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<SinkConfig, PipelineError> {
    built_in(&s, SinkKindFile::Iceberg, invalid)?;
    let (schema_file, schema) = columns(&s, rel, invalid)?;
    let password = s.catalog_password_file.as_deref().map(rel);
    let dir = rel(Path::new(""));
    let s3 = s.s3.map(|f: S3File| weir_connectors::iceberg::S3 {
        endpoint: f.endpoint,
        region: f.region.unwrap_or_else(|| weir_connectors::iceberg::DEFAULT_S3_REGION.to_string()),
        path_style: f.path_style,
        credentials_file: f.credentials_file.as_deref().map(rel),
    });
    let settings = weir_connectors::iceberg::Settings::new(weir_connectors::iceberg::Given {
        catalog_uri: s.catalog_uri.as_deref(),
        catalog_password_file: password.as_deref(),
        catalog_name: s.catalog_name.as_deref(),
        warehouse: s.warehouse.as_deref(),
        table: s.table.as_deref(),
        schema_file: Some(&schema_file),
        schema: Some(schema),
        partition_by: s.partition_by.as_deref(),
        s3,
        retry_for: s.retry_for.map(|d| d.0),
        dir: Some(&dir),
    })
    .map_err(|e| invalid(&e.key, e.why))?;
    Ok(SinkConfig::Iceberg(settings))
}
