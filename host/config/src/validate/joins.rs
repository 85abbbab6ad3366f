//! `[join]` and `[streams.NAME]`: a stream-table join reads a table written like `[source]`; an
//! interval join reads another stream with a parser of its own, within bounds on both sides.
//! Every stream declared must be the one a join reads.

use std::collections::BTreeMap;

use super::stages::Stages;
use super::*;
use crate::file::{JoinFile, StreamFile};

/// The `[join]` table and the streams it may read; `name` is the pipeline's.
pub(super) fn join(
    j: Option<JoinFile>,
    mut streams: BTreeMap<String, StreamFile>,
    name: &str,
    stages: &Stages,
) -> Result<Option<Join>, PipelineError> {
    let invalid = stages.invalid;
    let rel = |p: &Path| stages.base.join(p);
    let join = match j {
        None => None,
        Some(j) => joined(j, &mut streams, name, stages, &rel)?,
    };
    if let Some(name) = streams.keys().next() {
        return Err(invalid(
            &format!("streams.{name}"),
            "no [join] reads this stream: name it in join.stream, or remove it".into(),
        ));
    }
    Ok(join)
}

fn joined(
    j: JoinFile,
    streams: &mut BTreeMap<String, StreamFile>,
    name: &str,
    stages: &Stages,
    rel: &dyn Fn(&Path) -> PathBuf,
) -> Result<Option<Join>, PipelineError> {
    let invalid = stages.invalid;
    let not_for = |key: &str, present: bool, kind: &str| {
        if present {
            Err(invalid(&format!("join.{key}"), format!("does not apply to a {kind} join; remove it")))
        } else {
            Ok(())
        }
    };
    let on = key_field("join.on", j.on, invalid)?;
    let field = key_field("join.as", j.field, invalid)?;
    if field.as_ref().is_some_and(|f| f.contains('.')) {
        return Err(invalid(
            "join.as",
            "the top-level field the joined row gets: a name without dots, e.g. as = \"user\"".into(),
        ));
    }
    Ok(match j.join_type {
        JoinType::Table => {
            not_for("stream", j.stream.is_some(), "table")?;
            not_for("before", j.before.is_some(), "table")?;
            not_for("after", j.after.is_some(), "table")?;
            let table = j.table.ok_or_else(|| {
                invalid(
                    "join.table",
                    "the table's source, written like [source], e.g. table = { type = \"replay\", path = \
                     \"users.jsonl\" }; or set type = \"interval\" to join another stream"
                        .into(),
                )
            })?;
            if let SourceFile::Replay { max_offsets_per_trigger: Some(_), .. }
            | SourceFile::Kafka { max_offsets_per_trigger: Some(_), .. } = &table
            {
                return Err(invalid(
                    "join.table.max_offsets_per_trigger",
                    "a table is read as far as it goes when each batch is planned; remove it".into(),
                ));
            }
            Some(Join::Table(TableJoin {
                // The table's consumer group (lag monitoring only) is not the stream's.
                table: source_config("join.table", table, &format!("{name}-table"), rel, invalid)?,
                on,
                field: field.unwrap_or_else(|| DEFAULT_JOIN_AS.to_string()),
                kind: j.kind.unwrap_or_default(),
            }))
        }
        JoinType::Interval => {
            not_for("table", j.table.is_some(), "interval")?;
            if j.kind == Some(JoinKind::Left) {
                return Err(invalid(
                    "join.kind",
                    "an interval join is inner: a pair is emitted when its later half arrives. Remove it".into(),
                ));
            }
            let stream = j
                .stream
                .ok_or_else(|| invalid("join.stream", "the other stream's name, with a [streams.NAME] table".into()))?;
            let s = streams.remove(&stream).ok_or_else(|| {
                invalid("join.stream", format!("no [streams.{stream}] table: add one with its source and parse tables"))
            })?;
            let bound = |key: &str, d: Option<Dur>| match d {
                Some(d) => Ok(millis(span(key, d.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?)),
                None => Err(invalid(key, "required, from 0, e.g. \"10 minutes\"".into())),
            };
            let key = format!("streams.{stream}");
            Some(Join::Interval(Box::new(IntervalJoin {
                source: source_config(&format!("{key}.source"), s.source, &format!("{name}-{stream}"), rel, invalid)?,
                parse: stages.stage(&format!("{key}.parse"), s.parse)?,
                on,
                field: field.unwrap_or_else(|| stream.clone()),
                before_ms: bound("join.before", j.before)?,
                after_ms: bound("join.after", j.after)?,
                stream,
            })))
        }
    })
}

/// An interval join needs a watermark, and its rows go to the sink as they are.
pub(super) fn check_interval(
    join: &Option<Join>,
    stateful: &Option<Stateful>,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<(), PipelineError> {
    if let Some(Join::Interval(_)) = join {
        match &stateful {
            None => {
                return Err(invalid(
                    "join",
                    "an interval join buffers both streams until the watermark passes them: add [watermark] \
                     with a delay, e.g. delay = \"10 minutes\""
                        .into(),
                ));
            }
            Some(s) if !matches!(s.keyed, Keyed::Rows) => {
                return Err(invalid(
                    "join",
                    "an interval join's rows go to the sink; [window] and [process] after it are not supported \
                     yet. Remove them, or aggregate the joined rows in a pipeline that reads them"
                        .into(),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}
