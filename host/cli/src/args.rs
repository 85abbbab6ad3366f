//! The `weir` command line as clap parses it: the global options, one variant per command, and
//! the arguments of each command that has more than a few. The help text is the doc comments
//! here, so a command's help is its variant's doc comment and each argument's is its field's; the
//! argument structs carry no doc comment of their own, which would compete with the variant's.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::{bench, client, new};

#[derive(Parser)]
#[command(name = "weir", version, about = "Stream processing with sandboxed WebAssembly plugins")]
pub(super) struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The `weir serve` to talk to, for the service commands (deploy, list, status, ...).
    #[arg(long, global = true, env = "WEIR_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// A file whose first line is your token, for the service commands.
    #[arg(long, global = true, env = "WEIR_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// PEM certificates to trust for an `https://` service (default: Mozilla's roots).
    #[arg(long, global = true, env = "WEIR_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Run pipelines, each resuming from its checkpoint. Several files (or a directory of
    /// them) run side by side in one process, each with its own sandboxes, limits, checkpoint
    /// and progress; one failing does not stop the others. A project (a directory with a
    /// weir.toml) runs its flows in dependency order.
    Run(Run),
    /// Run a pipeline over recorded events, deterministically, and print the rows that reach
    /// its sink as JSON lines. A project: --events FLOW=FILE for each flow with a source of its
    /// own, --expect DATASET=FILE for each dataset to check.
    Test(Test),
    /// Generate a reference workload.
    Gen {
        #[command(subcommand)]
        what: GenWhat,
    },
    /// Measure a pipeline's throughput over generated order events, or with `--latency` a
    /// continuous pipeline's end-to-end latency on an embedded broker.
    Bench(Bench),
    /// Check a project, or one pipeline file, without reading data: its files, its graph,
    /// every plugin loaded for its stage's role, its schemas against the schema registry;
    /// print the graph.
    Validate { project: PathBuf },
    /// Write a project's graph as Graphviz DOT (stdout, or --out FILE and beside it FILE.svg
    /// when Graphviz is installed), with each dataset's rows after a run.
    Graph {
        project: PathBuf,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print a project's table dataset, one row per line (or the row of KEY), beside a running
    /// project.
    Query { project: PathBuf, table: String, key: Option<String> },
    /// Host many tenants' pipelines in one long-running process, behind an HTTP/JSON API and a
    /// web console (docs/serve.md). Pipelines that were running resume from their checkpoints.
    Serve(Serve),
    #[command(flatten)]
    Remote(client::Remote),
    /// Show what a checkpoint directory holds: batches, offsets per partition, watermark, state.
    /// Given a pipeline file with `[scale] group`: the group's members, the tasks each holds,
    /// and each task's epoch, offset, lag and watermark, read from Kafka.
    Inspect(Inspect),
    /// Capture a Kafka topic's records into the recorded-events format, for `weir test`.
    Record(Record),
    /// Types for a plugin from an Avro schema (`.avsc`) or a `.proto` file: the rows the
    /// standard parsers write, as Rust structs (serde) or Python dataclasses, printed (or
    /// written to --out).
    Schema {
        #[arg(value_enum)]
        lang: SchemaLang,
        /// The schema file.
        schema: PathBuf,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Create a plugin project that builds and passes `weir test` as it is: source with a unit
    /// test, a pipeline file, recorded events and the rows they give.
    New(New),
    /// Build a plugin project (a Rust crate, or a Python module) into a component.
    Build {
        /// The project (default: the current directory).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component (default: DIR/NAME.wasm).
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// The demo: an embedded Kafka broker, generated orders flowing into it, and the orders
    /// error-rate pipeline reading them through the Wasm plugins, printing windows and alerts.
    Demo(Demo),
    /// A Kafka broker to try Weir on, with nothing installed (librdkafka's mock cluster, on
    /// 127.0.0.1:9092): the topics of the given pipelines made, a group's own topics too, and
    /// with --orders generated orders flowing in. Not for data that matters (docs/kafka.md).
    Broker(Broker),
}

#[derive(Subcommand)]
pub(super) enum GenWhat {
    /// Order events (the reference order workload's schema and statistics).
    Orders {
        n: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The user table the orders refer to: one keyed record per user (a `[join]` table).
    Users {
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

// `weir run`.
#[derive(Args)]
pub(super) struct Run {
    #[arg(required = true)]
    pub pipelines: Vec<PathBuf>,
    /// Project only: reset this dataset and every dataset downstream of it, with the
    /// checkpoints of the flows on them, and recompute them from their sources.
    #[arg(long, value_name = "DATASET")]
    pub full_refresh: Vec<String>,
    /// Checkpoint directory (default: checkpoint.location, else .weir/NAME beside the file);
    /// only with a single pipeline.
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Print one JSON progress object per batch to stderr.
    #[arg(long)]
    pub progress_json: bool,
    /// Serve plugin metrics for Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// At the end of bounded input, emit every window still open, whatever the pipeline
    /// file's `watermark.flush_at_end` says (docs/semantics.md).
    #[arg(long)]
    pub flush: bool,
    /// Share the pipeline with every process started with the same group: a Kafka consumer
    /// group assigns each process its tasks, one per input partition, and moves them when
    /// processes come and go (as `[scale] group` in the file; docs/scale-out.md).
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
}

// `weir test`.
#[derive(Args)]
pub(super) struct Test {
    pub pipeline: PathBuf,
    /// Recorded events (JSON lines: raw values, or envelopes; see docs/recorded-events.md).
    #[arg(long, required = true)]
    pub events: Vec<String>,
    /// Expected rows (JSON lines): exit 1 with a diff if the output differs (in any order).
    #[arg(long)]
    pub expect: Vec<String>,
    /// Write the rows here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where dead letters go (created only if there are any).
    #[arg(long, default_value = "weir-dead-letters.jsonl")]
    pub dead_letters: PathBuf,
    /// Print one JSON progress object per batch to stderr.
    #[arg(long)]
    pub progress_json: bool,
    /// Replay safety: run again with this many crashes at random batch boundaries (each
    /// after a batch was delivered and before it was committed), restarting from the
    /// checkpoint, and fail with the first differing row if the output differs.
    #[arg(long, default_value_t = 0)]
    pub restarts: u32,
    /// Run the pipeline's own sink plugin (its writable directory grants moved into fresh
    /// directories under DIR) instead of printing the rows, and check that what it wrote
    /// there, as JSON lines, is each delivered row once. With --restarts, after the crashes
    /// too: a sink that writes a re-delivered batch twice fails.
    #[arg(long, value_name = "DIR")]
    pub sink: Option<PathBuf>,
    /// The seed of the crash schedule (default: from the clock; printed either way).
    #[arg(long)]
    pub restart_seed: Option<u64>,
}

// `weir bench`, for throughput or with `--latency`.
#[derive(Args)]
pub(super) struct Bench {
    /// The pipeline to measure (default: plugins/orders-error-rate/pipeline.toml, or
    /// plugins/orders-alerts/pipeline.toml with --latency).
    pub pipeline: Option<PathBuf>,
    /// How many events to generate.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Measure latency (produce → output readable) instead of throughput.
    #[arg(long)]
    pub latency: bool,
    /// With --latency: orders produced per second.
    #[arg(long, default_value_t = 20_000)]
    pub rate: u64,
    /// With --latency: how long to produce.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// With --latency: time a baseline instead of the pipeline, with the same producer and
    /// reader: `broker` reads the input topic itself, `relay` passes the same orders on with
    /// a bare consumer and producer (the pipeline's Kafka settings, no engine).
    #[arg(long, requires = "latency", value_enum)]
    pub baseline: Option<bench::latency::Baseline>,
    /// Parse and aggregate with the host-code baseline (the same logic as the orders-json
    /// and error-rate plugins) instead of the Wasm plugins.
    #[arg(long)]
    pub native: bool,
    /// Parser instances working on each batch side by side (default: the pipeline's
    /// `parse.parallelism`).
    #[arg(long)]
    pub cores: Option<usize>,
    /// Do not sync the checkpoint at each batch (to measure what durability costs).
    #[arg(long)]
    pub no_fsync: bool,
    /// Run half the events, then restart on the rest and time the first batch.
    #[arg(long, conflicts_with = "kafka")]
    pub restart: bool,
    /// Produce the events into the embedded broker first, then read them from there
    /// (the pipeline's own Kafka source if it has one, else a Kafka source in place of its
    /// file).
    #[arg(long)]
    pub kafka: bool,
    /// With --kafka or --latency: a broker you run (host:port,...) instead of the embedded one.
    /// The run makes topics of its own there (`weir-bench-PID-MILLIS.` before the pipeline's
    /// names), with 6 input partitions, and deletes them at the end.
    #[arg(long, value_name = "HOST:PORT")]
    pub brokers: Option<String>,
    /// Also write the rows to this file (JSON lines), to check them.
    #[arg(long)]
    pub rows: Option<std::path::PathBuf>,
}

// `weir serve`.
#[derive(Args)]
pub(super) struct Serve {
    /// Where the registry, the plugins, the tenants' files and checkpoints live.
    #[arg(long)]
    pub data: PathBuf,
    /// Address to listen on (port 0 picks one; the chosen one is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// A file whose first line is the admin token (never give a token on the command line).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: PathBuf,
    /// A `host:port` tenants' pipelines may connect to (Kafka brokers, plugin network and
    /// HTTP grants); repeat for more. Nothing else is reachable.
    #[arg(long = "allow-network", value_name = "HOST:PORT")]
    pub allow_network: Vec<String>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); with --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

// `weir inspect`.
#[derive(Args)]
pub(super) struct Inspect {
    #[arg(value_name = "CHECKPOINT|PIPELINE.toml")]
    pub checkpoint: PathBuf,
    /// How many recent batches to list.
    #[arg(long, default_value_t = 10)]
    pub batches: usize,
    /// One JSON object: the checkpoint, its last commit and the last batch's progress
    /// record (`--progress-json`'s shape).
    #[arg(long)]
    pub json: bool,
}

// `weir record`.
#[derive(Args)]
pub(super) struct Record {
    /// Kafka brokers (bootstrap.servers).
    #[arg(long)]
    pub brokers: String,
    #[arg(long)]
    pub topic: String,
    /// Output file (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Start at the earliest record, the latest, or a timestamp (epoch ms).
    #[arg(long, default_value = "earliest")]
    pub from: String,
    /// Stop after this many records.
    #[arg(long)]
    pub max: Option<u64>,
    /// Keep recording new records until Ctrl-C (default: stop at the end of the topic).
    #[arg(long)]
    pub follow: bool,
    /// Extra librdkafka options, as NAME=VALUE (e.g. security.protocol=SSL). Not for
    /// credentials: those go in --kafka-file, never on a command line.
    #[arg(long = "kafka", value_name = "NAME=VALUE")]
    pub kafka: Vec<String>,
    /// A file of librdkafka options, one NAME=VALUE per line (`#` starts a comment): where
    /// credentials (sasl.password, ssl.key.password, ...) go.
    #[arg(long, value_name = "FILE")]
    pub kafka_file: Option<PathBuf>,
    /// The schema registry the records' schemas are in: with --out, every schema id the
    /// recorded values and keys are framed with is saved beside the recording, in
    /// OUT.schemas.json, so `weir test` replays them with no registry.
    #[arg(long, value_name = "URL", requires = "out")]
    pub registry: Option<String>,
    /// A file whose first line is the registry's USER:PASSWORD.
    #[arg(long, value_name = "FILE", requires = "registry")]
    pub registry_credentials_file: Option<PathBuf>,
    /// A subject whose every version is saved too (a parser's `reader_subject`); repeat for more.
    #[arg(long, value_name = "SUBJECT", requires = "registry")]
    pub subject: Vec<String>,
}

/// What `weir schema` writes.
#[derive(Clone, Copy, ValueEnum)]
pub(super) enum SchemaLang {
    Rust,
    Python,
}

// `weir new`.
#[derive(Args)]
pub(super) struct New {
    #[arg(value_enum)]
    pub role: new::Role,
    /// The plugin's name (lowercase, `-` and `_`), also the directory made for it.
    pub name: String,
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: new::Lang,
    /// The directory to create (default: NAME).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Rust: the guest SDK's directory (a Weir checkout's `guest-sdk/`; default:
    /// $WEIR_GUEST_SDK, else the published `weir-guest` crate).
    #[arg(long)]
    pub sdk: Option<PathBuf>,
    /// An Avro schema (`.avsc`) or a `.proto` file of the rows the plugin works on: its types are written into the
    /// project (`src/schema.rs`, or `schema.py`), as `weir schema` writes them.
    #[arg(long, value_name = "FILE.avsc|FILE.proto")]
    pub schema: Option<PathBuf>,
}

// `weir demo`.
#[derive(Args)]
pub(super) struct Demo {
    /// The pipeline (its Kafka source is pointed at the embedded broker).
    #[arg(default_value = "plugins/orders-error-rate/kafka.toml")]
    pub pipeline: PathBuf,
    /// Orders produced per second (1000 orders are one simulated second).
    #[arg(long, default_value_t = 20_000)]
    pub rate: u64,
    /// Produce this many orders, wait until the pipeline has read them, and stop.
    #[arg(long)]
    pub events: Option<u64>,
    /// Alert when a window's error rate is above this fraction.
    #[arg(long, default_value_t = 0.05)]
    pub threshold: f64,
    /// Print one JSON progress object per batch to stderr.
    #[arg(long)]
    pub progress_json: bool,
}

// `weir broker`.
#[derive(Args)]
pub(super) struct Broker {
    /// Pipeline files whose topics to make: their Kafka source and sink topics and, with
    /// `[scale] group`, the group's own topics.
    pub pipelines: Vec<PathBuf>,
    /// The loopback port that takes bootstrap connections (the port the pipelines name).
    #[arg(long, default_value_t = crate::tryout::DEFAULT_PORT)]
    pub port: u16,
    /// Partitions of each source and sink topic.
    #[arg(long, default_value_t = crate::tryout::DEFAULT_PARTITIONS)]
    pub partitions: i32,
    /// Another topic to make: NAME, or NAME:PARTITIONS (repeatable).
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    /// Produce this many generated orders per second into the first pipeline's source topic
    /// (1000 orders are one simulated second, as in `weir demo`).
    #[arg(long)]
    pub orders: Option<u64>,
}
