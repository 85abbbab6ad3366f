//! `[window]`: tumbling, sliding and session windows, each with the durations that apply to it
//! and none of the others'.

use super::*;
use crate::file::{WindowFile, WindowKind};

pub(super) fn window_spec(
    w: WindowFile,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<WindowSpec, PipelineError> {
    let positive = |key: &str, d: Option<Dur>, example: &str| match d {
        Some(d) => Ok(millis(span(key, d.0, MIN_WINDOW, MAX_TIME_SPAN, invalid)?)),
        None => Err(invalid(key, format!("required for this window type, e.g. {example}"))),
    };
    let unused = |key: &str, d: Option<Dur>, kind: &str| match d {
        Some(_) => Err(invalid(key, format!("does not apply to a {kind} window; remove it"))),
        None => Ok(()),
    };
    let offset = match w.offset {
        Some(d) => millis(span("window.offset", d.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?),
        None => 0,
    };
    match w.kind {
        WindowKind::Tumbling => {
            unused("window.slide", w.slide, "tumbling")?;
            unused("window.gap", w.gap, "tumbling")?;
            let size = positive("window.size", w.size, "size = \"1 minute\"")?;
            Ok(WindowSpec::sliding(size, size, offset))
        }
        WindowKind::Sliding => {
            unused("window.gap", w.gap, "sliding")?;
            let size = positive("window.size", w.size, "size = \"10 minutes\"")?;
            let slide = positive("window.slide", w.slide, "slide = \"1 minute\"")?;
            if slide > size || size % slide != 0 {
                return Err(invalid("window.slide", format!("must divide window.size ({size} ms); got {slide} ms")));
            }
            if size / slide > MAX_WINDOWS_PER_EVENT {
                return Err(invalid(
                    "window.slide",
                    format!(
                        "{slide} ms puts every event in {} windows of {size} ms; at most {MAX_WINDOWS_PER_EVENT}: make \
                         the slide longer",
                        size / slide
                    ),
                ));
            }
            Ok(WindowSpec::sliding(size, slide, offset))
        }
        WindowKind::Session => {
            unused("window.size", w.size, "session")?;
            unused("window.slide", w.slide, "session")?;
            unused("window.offset", w.offset, "session")?;
            Ok(WindowSpec::Session { gap: positive("window.gap", w.gap, "gap = \"5 minutes\"")? })
        }
    }
}
