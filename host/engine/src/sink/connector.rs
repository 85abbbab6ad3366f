//! A built-in connector's sink (`weir_connectors`: Parquet files, a PostgreSQL or Iceberg
//! table) as the driver delivers to a sink: the connector writes each delivery once and names
//! the rows that did not fit, which the driver dead-letters as it does the Kafka sink's.

use weir_connectors::TableSink;

use super::{Delivery, RowSink, Rows, SinkError};

pub struct ConnectorSink(pub Box<dyn TableSink>);

impl RowSink for ConnectorSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        Ok(self.0.deliver(delivery, rows)?)
    }

    fn rejected(&mut self) -> Vec<(usize, String)> {
        self.0.rejected()
    }
}
