//! The tables that make a pipeline stateful: `[watermark]` (event time, lateness), `[dedup]`,
//! and the keyed operator, `[window]` with `[aggregate]` or `[process]`, each with the output
//! modes and tombstones that apply to it.

use super::stages::Stages;
use super::windows::window_spec;
use super::*;
use crate::file::{DedupFile, OutputFile, ProcessFile, WatermarkFile, WindowFile};

/// The stateful tables of a pipeline file, taken out of it together.
pub(super) struct StatefulFile {
    pub window: Option<WindowFile>,
    pub aggregate: Option<StageFile>,
    pub process: Option<ProcessFile>,
    pub watermark: Option<WatermarkFile>,
    pub dedup: Option<DedupFile>,
}

/// The pipeline's state, or `None` for a stateless one; `interval_join` says whether a `[join]`
/// of two streams (which needs the watermark) comes before.
pub(super) fn stateful(
    f: StatefulFile,
    output: &OutputFile,
    tombstones: bool,
    interval_join: bool,
    stages: &Stages,
) -> Result<Option<Stateful>, PipelineError> {
    let invalid = stages.invalid;
    let dedup = f.dedup;
    Ok(match (f.window, f.aggregate, f.process, f.watermark) {
        (None, None, None, None) if dedup.is_some() => {
            return Err(invalid(
                "dedup",
                "deduplication keeps each key until the watermark passes it: add [watermark] with a delay, \
                 e.g. delay = \"10 minutes\""
                    .into(),
            ));
        }
        (None, None, None, None) => {
            if output.mode != OutputMode::Append {
                return Err(invalid("output.mode", "only `append` applies to a pipeline without [window]".into()));
            }
            None
        }
        (Some(_), _, Some(_), _) | (_, Some(_), Some(_), _) => {
            return Err(invalid(
                "process",
                "a pipeline either aggregates in windows ([window], [aggregate]) or runs a processor \
                 ([process]); remove one"
                    .into(),
            ));
        }
        (None, None, None, Some(_)) if dedup.is_none() && !interval_join => {
            return Err(invalid(
                "watermark",
                "only meaningful with [window] and [aggregate], [process], [dedup] or an interval [join]".into(),
            ));
        }
        (None, Some(_), None, _) => return Err(invalid("window", "[aggregate] needs a [window] table".into())),
        (Some(_), None, None, _) => return Err(invalid("aggregate", "[window] needs an [aggregate] table".into())),
        (_, _, _, None) => {
            return Err(invalid(
                "watermark",
                "a stateful pipeline needs [watermark] with a delay, e.g. delay = \"10 minutes\"".into(),
            ));
        }
        (w, a, p, Some(wm)) => {
            let (time, dedup) = time_and_dedup(wm, dedup, stages)?;
            let keyed = keyed(w, a, p, output, tombstones, stages)?;
            Some(Stateful { dedup, time, keyed })
        }
    })
}

/// `[watermark]` as event time, and `[dedup]` (whose horizon defaults to the watermark's delay).
fn time_and_dedup(
    wm: WatermarkFile,
    dedup: Option<DedupFile>,
    stages: &Stages,
) -> Result<(EventTime, Option<Dedup>), PipelineError> {
    let invalid = stages.invalid;
    let rel = |p: &Path| stages.base.join(p);
    let late_path = match (wm.late, wm.late_path) {
        (LatePolicy::Drop, Some(_)) => {
            return Err(invalid("watermark.late_path", "only with late = \"side-output\"".into()));
        }
        (_, p) => p.map(|p| rel(&p)),
    };
    let time = EventTime {
        delay_ms: millis(span("watermark.delay", wm.delay.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?),
        idle_timeout: wm
            .idle_timeout
            .map(|d| span("watermark.idle_timeout", d.0, MIN_WINDOW, MAX_TIME_SPAN, invalid))
            .transpose()?,
        allowed_lateness_ms: match wm.allowed_lateness {
            Some(d) => millis(span("watermark.allowed_lateness", d.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?),
            None => 0,
        },
        late: wm.late,
        late_path,
        flush_at_end: wm.flush_at_end,
    };
    let dedup = match dedup {
        None => None,
        Some(d) => Some(Dedup {
            field: key_field("dedup.key", d.key, invalid)?,
            within_ms: match d.within {
                Some(w) => millis(span("dedup.within", w.0, MIN_WINDOW, MAX_TIME_SPAN, invalid)?),
                None => time.delay_ms,
            },
        }),
    };
    Ok((time, dedup))
}

/// The keyed operator: a window's aggregation, a processor, or the rows as they are.
fn keyed(
    w: Option<WindowFile>,
    a: Option<StageFile>,
    p: Option<ProcessFile>,
    output: &OutputFile,
    tombstones: bool,
    stages: &Stages,
) -> Result<Keyed, PipelineError> {
    let invalid = stages.invalid;
    Ok(match (w, a, p) {
        (Some(w), Some(a), None) => {
            let window = window_spec(w, invalid)?;
            if tombstones && output.mode != OutputMode::Update {
                return Err(invalid(
                    "output.tombstones",
                    "a window's state is dropped as it becomes final; only mode = \"update\" makes that \
                     a change worth a tombstone. Set output.mode = \"update\", or remove it"
                        .into(),
                ));
            }
            if tombstones && matches!(window, WindowSpec::Session { .. }) {
                return Err(invalid(
                    "output.tombstones",
                    "a session's key (its start and end) changes as it grows and merges, so its \
                     changelog would keep stale keys; tombstones apply to tumbling and sliding windows \
                     and to [process]. Remove it"
                        .into(),
                ));
            }
            Keyed::Window(Windowed {
                window,
                aggregate: stages.stage("aggregate", a)?,
                output: output.mode,
                tombstones,
            })
        }
        (None, None, Some(p)) => {
            if output.mode != OutputMode::Append {
                return Err(invalid(
                    "output.mode",
                    "a processor's rows leave as it emits them: only `append` applies with [process]".into(),
                ));
            }
            let ttl = match (p.ttl, p.ttl_clock) {
                (None, Some(_)) => {
                    return Err(invalid("process.ttl_clock", "only with process.ttl; remove it".into()));
                }
                (None, None) => None,
                (Some(d), clock) => Some(Ttl {
                    ms: millis(span("process.ttl", d.0, MIN_WINDOW, MAX_TIME_SPAN, invalid)?),
                    clock: clock.unwrap_or_default(),
                }),
            };
            let key = key_field("process.key", p.key, invalid)?;
            let plugin = stages.stage(
                "process",
                StageFile { plugin: p.plugin, parallelism: None, config: p.config, grants: p.grants, limits: p.limits },
            )?;
            Keyed::Process(Process { plugin, key, ttl, tombstones })
        }
        (None, None, None) => {
            if tombstones {
                return Err(invalid(
                    "output.tombstones",
                    "only state that is deleted makes a tombstone: a window in update mode or a \
                     [process]; remove it"
                        .into(),
                ));
            }
            if output.mode != OutputMode::Append {
                return Err(invalid("output.mode", "only `append` applies to a pipeline without [window]".into()));
            }
            Keyed::Rows
        }
        _ => return Err(invalid("window", "[window] and [aggregate] go together".into())),
    })
}
