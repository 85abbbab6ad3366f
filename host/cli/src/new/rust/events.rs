
/// The pipeline's parser: each record is a JSON object whose `ts` is its event time (epoch ms)
/// and whose `user` is its key; the row is the record as it came. Keep it, or use the standard
/// library's `json_parser.wasm` in `[parse]` instead.
struct Events;

impl Parser for Events {
    fn new(_config: &Config) -> Result<Self, PluginError> {
        Ok(Events)
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let [ts, user] = record.fields(&Paths::new(["ts", "user"]))?;
        let ts = ts.ok_or_else(|| RecordError::missing_field("ts"))?.as_i64()?;
        let user = user.ok_or_else(|| RecordError::missing_field("user"))?.as_str()?;
        out.emit_json(ts, Some(user.as_bytes()), record.value)
    }
}
