//! The exit codes of `weir`, defined here and nowhere else (`docs/cli.md` lists them;
//! `tests/cli.rs` checks each).

use std::process::ExitCode;

use crate::checkpoint::CheckpointError;
use crate::driver::RunError;
use crate::pipeline::PipelineError;
use crate::plugin::PluginError;

/// How a `weir` command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It did what was asked.
    Done,
    /// `weir test --expect`: the rows differ from the expected ones; `weir query TABLE KEY`:
    /// the table has no row for the key.
    Mismatch,
    /// The command line, a pipeline file, a plugin it names or its configuration is wrong: fix
    /// the input and run again.
    Usage,
    /// Something failed while running.
    Failed,
    /// A stop (SIGTERM, Ctrl-C) ended a run before the end of its bounded input; it resumes
    /// from its checkpoint.
    Interrupted,
}

impl Exit {
    pub(crate) const fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Mismatch => 1,
            Exit::Usage => 2,
            Exit::Failed => 3,
            Exit::Interrupted => 130,
        }
    }

    /// The exit for an error: [`Exit::Usage`] when any cause in its chain is one the user's
    /// input is to blame for, else [`Exit::Failed`].
    pub(crate) fn of(e: &anyhow::Error) -> Exit {
        let usage = e.chain().any(|cause| {
            cause.is::<PipelineError>()
                || cause.is::<crate::project::ProjectError>()
                || cause.is::<Usage>()
                || cause.downcast_ref::<PluginError>().is_some_and(PluginError::is_config)
                || cause.downcast_ref::<RunError>().is_some_and(RunError::is_config)
                || cause.downcast_ref::<weir_engine::schemas::SchemaError>().is_some_and(|e| e.is_config())
                || matches!(cause.downcast_ref::<CheckpointError>(), Some(CheckpointError::Foreign { .. }))
        });
        if usage { Exit::Usage } else { Exit::Failed }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// A command line that asks for something that cannot be: exits with [`Exit::Usage`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Usage(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_the_user_can_fix_are_usage_errors_wherever_they_are_in_the_chain() {
        let usage = anyhow::Error::new(Usage("--checkpoint names one checkpoint".into())).context("weir run");
        assert_eq!(Exit::of(&usage), Exit::Usage);
        let io = anyhow::Error::new(std::io::Error::other("disk full")).context("writing rows");
        assert_eq!(Exit::of(&io), Exit::Failed);
        let codes: Vec<u8> =
            [Exit::Done, Exit::Mismatch, Exit::Usage, Exit::Failed, Exit::Interrupted].map(Exit::code).to_vec();
        assert_eq!(codes, vec![0, 1, 2, 3, 130]);
    }
}
