//! The sink a pipeline file asks for, opened where the sinks live: a Wasm sink plugin, a Kafka
//! topic, a project's dataset, Parquet files, a PostgreSQL or Iceberg table, or standard output
//! without a `[sink]`. A new sink is a new file in this module (or a connector of
//! `weir_connectors`) and one arm here; the driver delivers to whatever [`open`] returns.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::connector::ConnectorSink;
use super::framed::FramedSink;
use super::{KafkaSink, LineSink, LogSink, RowSink, SinkError, WasmSink};
use crate::pipeline::{KafkaSinkConfig, Pipeline, SinkConfig, Trigger};
use crate::plugin::{PluginError, Runtime, Sink};

/// The pipeline's own sink; a Wasm sink needs `runtime`.
pub fn open(
    p: &Pipeline,
    runtime: Option<&Arc<Runtime>>,
    stop: &Arc<AtomicBool>,
) -> Result<Box<dyn RowSink>, SinkError> {
    let continuous = matches!(p.trigger, Trigger::Continuous { .. });
    Ok(match &p.sink {
        Some(SinkConfig::Wasm(spec)) => {
            let runtime = runtime
                .ok_or_else(|| PluginError::Engine(format!("{}: a Wasm sink needs the Wasm runtime", spec.name)))?;
            Box::new(WasmSink(Sink::new(runtime, spec.clone())?))
        }
        Some(SinkConfig::Kafka(k)) => match &k.encoded {
            None => Box::new(KafkaSink::open(k, continuous, stop.clone())?),
            // The framed sink reads `sink.key` from the rows before they are encoded.
            Some(out) => {
                let plain = KafkaSinkConfig { key: None, ..k.clone() };
                let kafka = Box::new(KafkaSink::open(&plain, continuous, stop.clone())?);
                Box::new(FramedSink::open(out, &k.topic, k.key.as_deref(), kafka).map_err(Box::new)?)
            }
        },
        Some(SinkConfig::Dataset { dataset, key }) => match &dataset.log {
            Some(dir) => Box::new(LogSink::open(dataset, dir, key.clone())?),
            None => return Err(SinkError::NoProject(dataset.name.clone())),
        },
        Some(SinkConfig::Parquet(s)) => {
            Box::new(ConnectorSink(Box::new(weir_connectors::parquet::ParquetSink::open(s)?)))
        }
        Some(SinkConfig::Postgres(s)) => {
            Box::new(ConnectorSink(Box::new(weir_connectors::postgres::PostgresSink::open(s)?)))
        }
        Some(SinkConfig::Iceberg(s)) => {
            Box::new(ConnectorSink(Box::new(weir_connectors::iceberg::IcebergSink::open(s)?)))
        }
        None => Box::new(LineSink(std::io::stdout())),
    })
}
