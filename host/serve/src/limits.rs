//! Every bound `weir serve` puts on what a request or a tenant may ask for, as a named constant.
//! A request past one gets a `4xx` that names the bound, never a crash or an allocation the size
//! of whatever a client sends.

/// The largest plugin upload: components of Weir's own plugins are 100–300 KiB, a Python one
/// with its interpreter about 40 MiB.
pub const MAX_PLUGIN_BYTES: usize = 64 << 20;
/// The largest pipeline file: a hand-written file is a few KiB.
pub const MAX_PIPELINE_BYTES: usize = 256 << 10;
/// The largest JSON request body (tenants, tokens): they are a few fields.
pub const MAX_JSON_BYTES: usize = 16 << 10;
/// The largest file uploaded into a tenant's data area in one request (recorded events for a
/// replay source, a table for a join).
pub const MAX_FILE_BYTES: usize = 256 << 20;

/// Longest tenant, plugin and pipeline name; names go into paths, metric labels and Kafka
/// group ids.
pub const MAX_NAME: usize = 64;
/// Longest path inside a tenant's data area.
pub const MAX_FILE_PATH: usize = 512;

/// `quotas.max_pipelines` for a tenant created without one.
pub const DEFAULT_MAX_PIPELINES: u32 = 20;
/// `quotas.max_plugin_memory_mb` for a tenant created without one: the sum of `max_memory_mb`
/// over every plugin instance of the tenant's pipelines (a pipeline with `parse.parallelism = 2`
/// counts its parser twice), running or not, so that starting one can never go over.
pub const DEFAULT_MAX_PLUGIN_MEMORY_MB: u64 = 8_192;
/// `quotas.max_files_mb` for a tenant created without one: its data area (inputs, outputs, dead
/// letters), checked on each upload and before each start.
pub const DEFAULT_MAX_FILES_MB: u64 = 10_240;
/// `quotas.max_state_mb` for a tenant created without one: the bytes of its pipelines'
/// checkpoints (state, offsets, side outputs kept there), checked before each start and every
/// [`STATE_QUOTA_CHECK`] while they run.
pub const DEFAULT_MAX_STATE_MB: u64 = 10_240;
/// How often the tenants' checkpoints are measured against `quotas.max_state_mb` while their
/// pipelines run: a tenant over it has its running pipelines stopped, failed with the quota
/// named. Within one period a pipeline can write past the quota by what it writes in that time;
/// each stage's own `limits.max_stage_state_mb` bounds that inside the run.
pub const STATE_QUOTA_CHECK: std::time::Duration = std::time::Duration::from_secs(2);
/// The most plugins one tenant may keep.
pub const MAX_PLUGINS_PER_TENANT: usize = 200;
/// The most tokens alive at once, all tenants counted.
pub const MAX_TOKENS: usize = 10_000;

/// Progress records kept per pipeline for `GET .../progress` and the console's charts: ten
/// minutes of batches at one every two seconds.
pub const RECENT_PROGRESS: usize = 300;
/// Plugin log lines kept per pipeline for `GET .../logs` (each at most `host/sandbox/src/spec.rs`'s
/// `LOG_BYTES_PER_CALL`, and a stage's lines per minute are bounded there too).
pub const RECENT_LOG_LINES: usize = 1_000;
/// The most dead letters or late events one `GET` returns.
pub const MAX_TAIL_LINES: usize = 1_000;
/// The bytes read from the end of a side-output file to find its last lines.
pub const TAIL_BYTES: u64 = 4 << 20;
