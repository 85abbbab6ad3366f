//! How a plugin stage fails: [`PluginError`], from a component that cannot be loaded to a call
//! that traps or breaks a limit, each naming the stage (`pipeline/stage (plugin file)`).

use std::path::PathBuf;

use super::limiter::LimitExceeded;

/// The plugin's own error variant (`plugin-error` in `wit/plugin.wit`).
pub use super::bindings::weir::plugin::types::PluginError as WitError;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error(transparent)]
    Columns(#[from] crate::columns::ColumnFull),
    #[error("wasm engine: {0}")]
    Engine(String),
    #[error("cannot read plugin {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot compile plugin {}: {message}", path.display())]
    Compile { path: PathBuf, message: String },
    #[error(
        "plugin {} is built for weir:plugin@{found}, but this host loads weir:plugin@{supported}; \
         rebuild it against a matching weir-guest",
        path.display()
    )]
    Version { path: PathBuf, found: String, supported: String },
    #[error("stage {stage}: plugin {} cannot be the {role}: it does not implement {interface}", path.display())]
    MissingRole { stage: String, path: PathBuf, role: &'static str, interface: &'static str },
    #[error("stage {stage}: cannot grant {what}: {message}")]
    Grant { stage: String, what: String, message: String },
    #[error("stage {stage}: cannot instantiate plugin: {message}")]
    Instantiate { stage: String, message: String },
    #[error("stage {stage}: the plugin failed: {}", say(error))]
    Failed { stage: String, error: WitError },
    #[error("stage {stage}: plugin trapped: {message}")]
    Trap { stage: String, message: String },
    #[error("stage {stage}: {limit}")]
    Limit { stage: String, limit: LimitExceeded },
    #[error("stage {stage}: stopped before the batch was done")]
    Stopped { stage: String },
    #[error("stage {stage}: {message}")]
    Contract { stage: String, message: String },
    /// The stage's schema registry could not serve the batch's schemas (after its retries):
    /// the run stops rather than fail records that are not at fault.
    #[error("stage {stage}: {error}")]
    Registry { stage: String, error: Box<weir_schema::RegistryError> },
}

/// A plugin's error in plain words (the bindings' own `Display` is Rust debug output).
fn say(e: &WitError) -> String {
    match e {
        WitError::InvalidConfig(m) => format!("its config is not valid: {m}"),
        WitError::BadState(m) => format!("it cannot read its state: {m}"),
        WitError::Unsupported(m) => format!("unsupported: {m}"),
        WitError::Io(m) => format!("input/output error: {m}"),
        WitError::Internal(m) => m.clone(),
    }
}

impl PluginError {
    /// Whether the failure is in what the pipeline file names (a component that cannot be read,
    /// built for another contract, not playing its role, refusing its config, or a grant that
    /// cannot be given) rather than in running it.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Self::Read { .. }
                | Self::Compile { .. }
                | Self::Version { .. }
                | Self::MissingRole { .. }
                | Self::Grant { .. }
                | Self::Instantiate { .. }
                | Self::Failed { error: WitError::InvalidConfig(_), .. }
        )
    }

    /// The stage the failure happened in (empty for failures before a stage exists).
    pub fn stage(&self) -> &str {
        match self {
            Self::MissingRole { stage, .. }
            | Self::Grant { stage, .. }
            | Self::Instantiate { stage, .. }
            | Self::Failed { stage, .. }
            | Self::Trap { stage, .. }
            | Self::Contract { stage, .. }
            | Self::Registry { stage, .. }
            | Self::Limit { stage, .. }
            | Self::Stopped { stage } => stage,
            Self::Columns(_) | Self::Engine(_) | Self::Read { .. } | Self::Compile { .. } | Self::Version { .. } => "",
        }
    }
}
