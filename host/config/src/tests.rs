//! The pipeline file's validation: good files, and bad ones naming the key and the fix.

use std::path::Path;

use super::*;

const GOOD: &str = r#"
    name = "orders"
    [source]
    type = "replay"
    path = "events.jsonl"
    [parse]
    plugin = "p.wasm"
    [watermark]
    delay = "10 minutes"
    [window]
    type = "tumbling"
    size = "1 minute"
    [aggregate]
    plugin = "a.wasm"
    config = { error_status = "ERROR" }
"#;

fn err(text: &str) -> String {
    Pipeline::parse(text, Path::new("dir/p.toml")).unwrap_err().to_string()
}

#[test]
fn a_good_file_resolves_paths_against_its_directory() {
    let p = Pipeline::parse(GOOD, Path::new("dir/p.toml")).unwrap();
    assert!(matches!(&p.source.kind, SourceKind::Replay { path, .. } if path == Path::new("dir/events.jsonl")));
    assert_eq!(p.parse.expect("a parser").component, Path::new("dir/p.wasm"));
    let s = p.stateful.unwrap();
    assert_eq!(s.time.delay_ms, 600_000);
    let aggregate = s.keyed.plugin().unwrap();
    assert_eq!(aggregate.config_json, r#"{"error_status":"ERROR"}"#);
    assert_eq!(aggregate.name, "orders/aggregate (a.wasm)");
}

#[test]
fn unknown_keys_name_their_path_and_the_allowed_keys() {
    let e = err(&GOOD.replace("size = \"1 minute\"", "sise = \"1 minute\""));
    assert!(e.contains("window") && e.contains("unknown field `sise`") && e.contains("`size`"), "{e}");
}

#[test]
fn bad_values_say_what_is_allowed() {
    let e = err(&GOOD.replace("delay = \"10 minutes\"", "delay = \"10 minuts\""));
    assert!(e.contains("watermark.delay") && e.contains("not a duration"), "{e}");
    let e = err(&format!("{GOOD}\n[output]\nmode = \"apend\""));
    assert!(e.contains("output.mode") && e.contains("`append`"), "{e}");
}

#[test]
fn a_sliding_window_needs_a_slide_that_divides_its_size() {
    let text = GOOD.replace("type = \"tumbling\"", "type = \"sliding\"\nslide = \"7 seconds\"");
    assert!(err(&text).contains("window.slide: must divide"));
    let text = GOOD.replace("type = \"tumbling\"", "type = \"sliding\"");
    assert!(err(&text).contains("window.slide: required"));
}

#[test]
fn a_window_without_a_watermark_is_refused() {
    let text = GOOD.replace("[watermark]\n    delay = \"10 minutes\"", "");
    assert!(err(&text).contains("watermark: a stateful pipeline needs [watermark]"));
}

#[test]
fn kafka_options_are_librdkafka_names_and_need_the_brokers() {
    let kafka = GOOD.replace(
        "type = \"replay\"\n    path = \"events.jsonl\"",
        "type = \"kafka\"\ntopics = [\"orders\"]\nstarting_offsets = \"latest\"\n\
         kafka.bootstrap.servers = \"127.0.0.1:9\"\nkafka.fetch.wait.max.ms = 5",
    );
    let p = Pipeline::parse(&kafka, Path::new("p.toml")).unwrap();
    let SourceKind::Kafka(k) = p.source.kind else { panic!("not kafka") };
    assert_eq!(k.starting, StartingOffsets::Latest);
    assert_eq!(k.group_id, "weir-orders");
    assert!(k.options.contains(&("fetch.wait.max.ms".into(), "5".into())), "{:?}", k.options);
    let e = err(&kafka.replace("kafka.bootstrap.servers = \"127.0.0.1:9\"", ""));
    assert!(e.contains("source.kafka.bootstrap.servers: required"), "{e}");
    let e = err(&kafka.replace("topics = [\"orders\"]", "topics = [\"orders\"]\npartitions = [\"other:1\"]"));
    assert!(e.contains("source.partitions") && e.contains("`other:1`"), "{e}");
}

#[test]
fn continuous_mode_is_for_stateless_pipelines_and_sinks_are_checked_by_type() {
    let e = err(&GOOD.replace("[parse]", "[trigger]\nmode = \"continuous\"\n[parse]"));
    assert!(e.contains("trigger.mode") && e.contains("stateless"), "{e}");
    let e = err(&format!("{GOOD}\n[sink]\ntype = \"kafka\"\nkafka.bootstrap.servers = \"x:1\""));
    assert!(e.contains("sink.topic"), "{e}");
    let e = err(&format!("{GOOD}\n[sink]\ntype = \"kafka\"\ntopic = \"t\"\nplugin = \"s.wasm\""));
    assert!(e.contains("sink.plugin: does not apply to a Kafka sink"), "{e}");
}

#[test]
fn grants_must_name_an_absolute_guest_path() {
    let text = format!("{GOOD}\n[sink]\nplugin = \"s.wasm\"\ngrants.dirs = [{{ host = \"out\", guest = \"out\" }}]");
    assert!(err(&text).contains("sink.grants.dirs[0].guest"));
}

#[test]
fn toml_errors_say_the_line_and_column() {
    let e = err(&GOOD.replace("size = \"1 minute\"", "size = \"1 minute"));
    assert!(e.contains("dir/p.toml:12:") && e.contains("(syntax)"), "{e}");
    let e = err(&GOOD.replace("delay = \"10 minutes\"", "delay = 10"));
    assert!(e.contains("dir/p.toml:9:13: watermark.delay"), "{e}");
}

/// Grants name things on the machine that runs the pipeline: validating the file looks none of
/// them up (that happens at start-up, where a missing one is an error naming it).
#[test]
fn validation_reads_no_environment_and_resolves_no_names() {
    let text = format!(
        "{GOOD}\n[sink]\nplugin = \"s.wasm\"\ngrants.env = [\"WEIR_TEST_SURELY_UNSET\"]\n\
         grants.network = [\"no-such-host.invalid:5432\"]"
    );
    let p = Pipeline::parse(&text, Path::new("dir/p.toml")).unwrap();
    let Some(SinkConfig::Wasm(sink)) = p.sink else { panic!("a Wasm sink") };
    assert_eq!(sink.grants.env, vec!["WEIR_TEST_SURELY_UNSET".to_string()]);
    let e = err(&text.replace("no-such-host.invalid:5432", "no-port"));
    assert!(e.contains("sink.grants.network[0]") && e.contains("host:port"), "{e}");
}

#[test]
fn flush_at_end_is_the_run_s_choice_unless_the_file_makes_it() {
    let w = |text: &str| Pipeline::parse(text, Path::new("p.toml")).unwrap().stateful.unwrap().time.flush_at_end;
    assert_eq!(w(GOOD), None);
    assert_eq!(w(&GOOD.replace("delay = \"10 minutes\"", "delay = \"10 minutes\"\nflush_at_end = false")), Some(false));
}

mod any_input {
    //! Whatever a pipeline file says, validation answers with a pipeline or an error naming a
    //! key; it never panics, and what it accepts never overflows when used.

    use proptest::prelude::*;

    use super::*;

    fn duration() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "0ms",
                "500us",
                "1ms",
                "1s",
                "1 minute",
                "10 minutes",
                "1h 30m",
                "-1s",
                "1.5s",
                "",
                "forever",
                "500000000000 years",
                "18446744073709551615s",
                "99999999999999 days",
            ])
            .prop_map(String::from),
            (any::<u64>(), prop::sample::select(vec!["ms", "s", "m", "h", "days", "years", "ns"]))
                .prop_map(|(n, u)| format!("{n}{u}")),
        ]
    }

    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![0i128, 1, -1, 64, 65, 1024, 4096, 65_536, i64::MAX as i128, u64::MAX as i128])
                .prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
        ]
    }

    prop_compose! {
        fn pipeline_file()(
            window in prop::sample::select(vec!["tumbling", "sliding", "session", "hopping"]),
            size in duration(), slide in duration(), gap in duration(), offset in duration(),
            delay in duration(), lateness in duration(), idle in duration(),
            trigger in prop::sample::select(vec!["processing-time", "once", "available-now", "continuous"]),
            interval in duration(),
            max_offsets in number(), parallelism in number(), retries in number(), backoff in duration(),
            timeout in duration(), memory in number(), output in number(), recycle in number(), fuel in number(),
            disk in number(),
            mode in prop::sample::select(vec!["append", "update", "complete"]),
            with_window in any::<bool>(), with_interval in any::<bool>(),
        ) -> String {
            let window_table = if with_window {
                format!(
                    "[watermark]\ndelay = \"{delay}\"\nallowed_lateness = \"{lateness}\"\nidle_timeout = \"{idle}\"\n\
                     [window]\ntype = \"{window}\"\nsize = \"{size}\"\nslide = \"{slide}\"\ngap = \"{gap}\"\n\
                     offset = \"{offset}\"\n[aggregate]\nplugin = \"a.wasm\"\n\
                     limits = {{ call_timeout = \"{timeout}\", max_memory_mb = {memory}, max_output_mb = {output}, \
                     recycle_after_calls = {recycle}, fuel = {fuel}, max_disk_mb = {disk} }}\n[output]\nmode = \"{mode}\"\n"
                )
            } else {
                String::new()
            };
            let interval = if with_interval { format!("interval = \"{interval}\"\n") } else { String::new() };
            format!(
                "name = \"p\"\n[source]\ntype = \"replay\"\npath = \"e.jsonl\"\nmax_offsets_per_trigger = {max_offsets}\n\
                 [trigger]\nmode = \"{trigger}\"\n{interval}[parse]\nplugin = \"p.wasm\"\nparallelism = {parallelism}\n\
                 [failure]\nretries = {retries}\nbackoff = \"{backoff}\"\n{window_table}"
            )
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_values_validate_or_are_refused_naming_a_key(text in pipeline_file()) {
            match Pipeline::parse(&text, Path::new("p.toml")) {
                Err(PipelineError::Invalid { key, .. }) => prop_assert!(!key.is_empty()),
                Err(e) => prop_assert!(false, "not a validation error: {e}"),
                Ok(p) => {
                    // What was accepted can be used: windows for any event time, deadlines
                    // and backoffs that do not overflow.
                    if let Some(Stateful { keyed: Keyed::Window(w), .. }) = &p.stateful
                        && let crate::window::WindowSpec::Panes { size, slide, offset } = w.window
                    {
                        let panes = crate::window::Panes { size, slide, offset };
                        for t in [i64::MIN, -1, 0, 1_800_000_000_000, i64::MAX] {
                            if let Some(pane) = panes.pane_of(t) {
                                prop_assert!(panes.windows_of(pane).count() as i64 <= MAX_WINDOWS_PER_EVENT);
                            }
                        }
                    }
                    for s in p.stages() {
                        prop_assert!(std::time::Instant::now().checked_add(s.limits.call_timeout).is_some());
                    }
                    let mut wait = p.failure.backoff;
                    for _ in 0..p.failure.retries {
                        wait = wait.saturating_mul(2);
                    }
                }
            }
        }

        #[test]
        fn any_text_at_all_is_a_pipeline_or_an_error(text in "\\PC*") {
            let _ = Pipeline::parse(&text, Path::new("p.toml"));
        }
    }
}

#[test]
fn dedup_takes_a_field_and_a_span_and_defaults_to_the_watermark_delay() {
    let with = |dedup: &str| GOOD.replace("[window]", &format!("[dedup]\n{dedup}\n[window]"));
    let p = Pipeline::parse(&with("key = \"order_id\""), Path::new("p.toml")).unwrap();
    let d = p.stateful.unwrap().dedup.unwrap();
    assert_eq!(d, Dedup { field: Some("order_id".into()), within_ms: 600_000 });
    let p = Pipeline::parse(&with("within = \"30 seconds\""), Path::new("p.toml")).unwrap();
    assert_eq!(p.stateful.unwrap().dedup.unwrap(), Dedup { field: None, within_ms: 30_000 });
    assert!(err(&with("key = \"\"")).contains("dedup.key: a top-level field name"));
    assert!(err(&with("within = \"0 seconds\"")).contains("dedup.within"));
    assert!(err(&with("keys = [\"a\"]")).contains("keys"));
    let stateless = GOOD
        .replace("[watermark]\n    delay = \"10 minutes\"", "[dedup]")
        .replace("[window]\n    type = \"tumbling\"\n    size = \"1 minute\"", "")
        .replace("[aggregate]\n    plugin = \"a.wasm\"\n    config = { error_status = \"ERROR\" }", "");
    assert!(err(&stateless).contains("dedup: deduplication keeps each key until the watermark"), "{}", err(&stateless));
    // With a watermark, dedup alone is a pipeline: the rows it lets through go to the sink.
    let rows_only = stateless.replace("[dedup]", "[watermark]\ndelay = \"1 minute\"\n[dedup]");
    let p = Pipeline::parse(&rows_only, Path::new("p.toml")).unwrap();
    assert!(matches!(p.stateful, Some(Stateful { keyed: Keyed::Rows, dedup: Some(_), .. })));
    let update = format!("{rows_only}\n[output]\nmode = \"update\"");
    assert!(err(&update).contains("output.mode: only `append`"), "{}", err(&update));
}

/// `GOOD` with a processor in place of the window.
fn with_process(process: &str) -> String {
    GOOD.replace("[window]\n    type = \"tumbling\"\n    size = \"1 minute\"", "")
        .replace("[aggregate]\n    plugin = \"a.wasm\"\n    config = { error_status = \"ERROR\" }", process)
}

#[test]
fn a_processor_takes_a_key_field_and_a_ttl_on_either_clock() {
    let p =
        Pipeline::parse(&with_process("[process]\nplugin = \"f.wasm\"\nlimits.max_timers = 7"), Path::new("p.toml"))
            .unwrap();
    let Some(Stateful { keyed: Keyed::Process(proc), .. }) = p.stateful else { panic!("not a processor") };
    assert_eq!((proc.key, proc.ttl, proc.plugin.limits.max_timers), (None, None, 7));
    assert_eq!(proc.plugin.name, "orders/process (f.wasm)");
    let text = with_process(
        "[process]\nplugin = \"f.wasm\"\nkey = \"user_id\"\nttl = \"30 minutes\"\nttl_clock = \"event-time\"",
    );
    let Some(Stateful { keyed: Keyed::Process(proc), .. }) =
        Pipeline::parse(&text, Path::new("p.toml")).unwrap().stateful
    else {
        panic!("not a processor")
    };
    assert_eq!(proc.key.as_deref(), Some("user_id"));
    assert_eq!(proc.ttl, Some(Ttl { ms: 1_800_000, clock: TtlClock::EventTime }));
}

#[test]
fn a_bad_processor_table_names_the_key_and_the_fix() {
    let e = err(&with_process("[process]\nplugin = \"f.wasm\"\nttl_clock = \"event-time\""));
    assert!(e.contains("process.ttl_clock: only with process.ttl"), "{e}");
    let e = err(&with_process("[process]\nplugin = \"f.wasm\"\nttl = \"0s\""));
    assert!(e.contains("process.ttl"), "{e}");
    let e = err(&with_process("[process]\nplugin = \"f.wasm\"\nkey = \"\""));
    assert!(e.contains("process.key: a top-level field name"), "{e}");
    let e = err(&with_process("[process]\nplugin = \"f.wasm\"\nlimits.max_state_kb = 0"));
    assert!(e.contains("process.limits.max_state_kb: 0: allowed 1 to"), "{e}");
    let e = err(&format!("{}\n[output]\nmode = \"update\"", with_process("[process]\nplugin = \"f.wasm\"")));
    assert!(e.contains("output.mode: a processor's rows"), "{e}");
    let both = GOOD.replace("[aggregate]", "[process]\nplugin = \"f.wasm\"\n[aggregate]");
    assert!(err(&both).contains("process: a pipeline either aggregates in windows"), "{}", err(&both));
    let e = err(&with_process("[process]\nplugin = \"f.wasm\"").replace("[watermark]\n    delay = \"10 minutes\"", ""));
    assert!(e.contains("watermark: a stateful pipeline needs [watermark]"), "{e}");
}

const JOIN: &str = r#"
    name = "enrich"
    [source]
    type = "replay"
    path = "events.jsonl"
    [parse]
    plugin = "p.wasm"
    [join]
    table = { type = "replay", path = "users.jsonl" }
    on = "user_id"
"#;

#[test]
fn a_join_reads_its_table_like_a_source_and_defaults_to_inner_as_table() {
    let p = Pipeline::parse(JOIN, Path::new("dir/p.toml")).unwrap();
    let Some(Join::Table(j)) = p.join else { panic!("a table join") };
    assert!(matches!(&j.table.kind, SourceKind::Replay { path, .. } if path == Path::new("dir/users.jsonl")));
    assert_eq!((j.on.as_deref(), j.field.as_str(), j.kind), (Some("user_id"), DEFAULT_JOIN_AS, JoinKind::Inner));
    assert!(p.stateful.is_none(), "a join alone needs no watermark");

    let kafka = JOIN.replace(
        r#"{ type = "replay", path = "users.jsonl" }"#,
        r#"{ type = "kafka", topics = ["users"], kafka.bootstrap.servers = "b:9092" }"#,
    );
    let p = Pipeline::parse(&format!("{kafka}as = \"u\"\nkind = \"left\""), Path::new("p.toml")).unwrap();
    let Some(Join::Table(j)) = p.join else { panic!("a table join") };
    assert!(
        matches!(&j.table.kind, SourceKind::Kafka(k) if k.topics == ["users"] && k.group_id == "weir-enrich-table")
    );
    assert_eq!((j.field.as_str(), j.kind), ("u", JoinKind::Left));
}

#[test]
fn a_bad_join_names_the_key_and_the_fix() {
    let e = err(&JOIN.replace("users.jsonl\" }", "users.jsonl\", max_offsets_per_trigger = 5 }"));
    assert!(e.contains("join.table.max_offsets_per_trigger") && e.contains("remove it"), "{e}");
    let e = err(&JOIN.replace(r#"type = "replay", path = "users.jsonl""#, r#"type = "kafka", topics = ["u"]"#));
    assert!(e.contains("join.table") && e.contains("`kafka`"), "{e}");
    let e =
        err(&JOIN.replace(r#"type = "replay", path = "users.jsonl""#, r#"type = "kafka", topics = ["u"], kafka = {}"#));
    assert!(e.contains("join.table.kafka.bootstrap.servers"), "{e}");
    let e = err(&format!("{JOIN}kind = \"outer\""));
    assert!(e.contains("join.kind") && e.contains("`left`"), "{e}");
    let e = err(&format!("{JOIN}as = \"\""));
    assert!(e.contains("join.as"), "{e}");
    let e = err(&JOIN.replace("[parse]", "[trigger]\nmode = \"continuous\"\n[parse]"));
    assert!(e.contains("trigger.mode"), "{e}");
}

#[test]
fn tombstones_need_state_that_is_deleted_and_a_sink_that_takes_keys() {
    let kafka_sink = "[sink]\ntype = \"kafka\"\ntopic = \"t\"\nkafka.bootstrap.servers = \"b:9092\"\n";
    let update = format!("{GOOD}\n[output]\nmode = \"update\"\ntombstones = true\n{kafka_sink}");
    let p = Pipeline::parse(&update, Path::new("p.toml")).unwrap();
    assert!(matches!(p.stateful.unwrap().keyed, Keyed::Window(w) if w.tombstones));

    let e = err(&format!("{GOOD}\n[output]\ntombstones = true\n"));
    assert!(e.contains("output.tombstones") && e.contains("update"), "{e}");
    let e =
        err(&update.replace("type = \"tumbling\"\n    size = \"1 minute\"", "type = \"session\"\ngap = \"1 minute\""));
    assert!(e.contains("output.tombstones") && e.contains("session"), "{e}");
    let e =
        err(&update
            .replace("type = \"kafka\"\ntopic = \"t\"\nkafka.bootstrap.servers = \"b:9092\"", "plugin = \"s.wasm\""));
    assert!(e.contains("output.tombstones") && e.contains("Wasm sink"), "{e}");
    let e = err(&format!("{update}key = \"key\"\n"));
    assert!(e.contains("sink.key") && e.contains("tombstone"), "{e}");
    let e = err(&format!("{JOIN}[output]\ntombstones = true\n"));
    assert!(e.contains("output.tombstones"), "{e}");
    // Without state, the tombstones are the parser's deletions, passed on.
    let stateless =
        JOIN.replace("[join]\n    table = { type = \"replay\", path = \"users.jsonl\" }\n    on = \"user_id\"\n", "");
    let p =
        Pipeline::parse(&format!("{stateless}[output]\ntombstones = true\n{kafka_sink}"), Path::new("p.toml")).unwrap();
    assert!(p.deletions && p.stateful.is_none());
    assert!(!Pipeline::parse(&format!("{stateless}{kafka_sink}"), Path::new("p.toml")).unwrap().deletions);
    assert!(!Pipeline::parse(&update, Path::new("p.toml")).unwrap().deletions, "a window's tombstones are its own");
}

#[test]
fn the_kafka_sink_takes_a_key_field() {
    let text = format!(
        "{GOOD}\n[sink]\ntype = \"kafka\"\ntopic = \"t\"\nkey = \"user\"\nkafka.bootstrap.servers = \"b:9092\"\n"
    );
    let p = Pipeline::parse(&text, Path::new("p.toml")).unwrap();
    assert!(matches!(p.sink, Some(SinkConfig::Kafka(k)) if k.key.as_deref() == Some("user")));
    let e = err(&format!("{GOOD}\n[sink]\nplugin = \"s.wasm\"\nkey = \"user\"\n"));
    assert!(e.contains("sink.key") && e.contains("Wasm"), "{e}");
}

const INTERVAL: &str = r#"
    name = "ship"
    [source]
    type = "replay"
    path = "orders.jsonl"
    [parse]
    plugin = "p.wasm"
    [watermark]
    delay = "1 minute"
    [join]
    type = "interval"
    stream = "shipments"
    on = "order_id"
    before = "15 minutes"
    after = "0s"
    [streams.shipments]
    source = { type = "replay", path = "ships.jsonl" }
    parse = { plugin = "s.wasm" }
"#;

#[test]
fn an_interval_join_names_its_other_stream() {
    let p = Pipeline::parse(INTERVAL, Path::new("dir/p.toml")).unwrap();
    let Some(Join::Interval(j)) = &p.join else { panic!("an interval join") };
    assert_eq!((j.stream.as_str(), j.field.as_str(), j.before_ms, j.after_ms), ("shipments", "shipments", 900_000, 0));
    assert!(matches!(&j.source.kind, SourceKind::Replay { path, .. } if path == Path::new("dir/ships.jsonl")));
    assert_eq!(j.parse.component, Path::new("dir/s.wasm"));
    assert!(p.stages().any(|s| s.component == Path::new("dir/s.wasm")), "its parser is a stage");
}

#[test]
fn a_bad_interval_join_names_the_key_and_the_fix() {
    let e = err(&INTERVAL.replace("stream = \"shipments\"", "stream = \"ships\""));
    assert!(e.contains("join.stream") && e.contains("[streams.ships]"), "{e}");
    let e = err(&INTERVAL.replace("after = \"0s\"", ""));
    assert!(e.contains("join.after: required"), "{e}");
    let e = err(&INTERVAL.replace("[watermark]\n    delay = \"1 minute\"", ""));
    assert!(e.contains("join") && e.contains("[watermark]"), "{e}");
    let e = err(&format!(
        "{INTERVAL}\n[streams.extra]\nsource = {{ type = \"replay\", path = \"x\" }}\nparse = {{ plugin = \"p.wasm\" }}"
    ));
    assert!(e.contains("streams.extra") && e.contains("no [join] reads"), "{e}");
    let e = err(&INTERVAL.replace("type = \"interval\"", "type = \"interval\"\nkind = \"left\""));
    assert!(e.contains("join.kind"), "{e}");
    let e =
        err(&INTERVAL
            .replace("type = \"interval\"", "type = \"interval\"\ntable = { type = \"replay\", path = \"u\" }"));
    assert!(e.contains("join.table") && e.contains("interval"), "{e}");
    let e = err(&INTERVAL.replace("type = \"interval\"", "type = \"table\""));
    assert!(e.contains("join.stream") && e.contains("table join"), "{e}");
}

const GROUPED: &str = r#"
    name = "alerts"
    [source]
    type = "kafka"
    topics = ["orders"]
    kafka.bootstrap.servers = "127.0.0.1:9"
    [parse]
    plugin = "p.wasm"
    [sink]
    plugin = "s.wasm"
    [scale]
    group = "orders-alerts"
"#;

#[test]
fn a_group_shares_one_topic_of_a_stateless_pipeline() {
    let p = Pipeline::parse(GROUPED, Path::new("dir/p.toml")).unwrap();
    assert_eq!(p.group.as_deref(), Some("orders-alerts"));
    assert!(
        Pipeline::parse(&GROUPED.replace("[scale]\n    group = \"orders-alerts\"", ""), Path::new("p.toml"))
            .unwrap()
            .group
            .is_none()
    );
    let continuous = GROUPED.replace("[parse]", "[trigger]\nmode = \"continuous\"\n[parse]");
    assert!(Pipeline::parse(&continuous, Path::new("p.toml")).unwrap().group.is_some());
}

#[test]
fn a_bad_group_names_the_key_and_the_fix() {
    let e = err(&GROUPED.replace("orders-alerts", "orders alerts"));
    assert!(e.contains("scale.group") && e.contains("letters, digits"), "{e}");
    let e = err(&GROUPED.replace("topics = [\"orders\"]", "topics = [\"orders\", \"returns\"]"));
    assert!(e.contains("scale.group") && e.contains("one topic"), "{e}");
    let e = err(&GROUPED.replace("topics = [\"orders\"]", "topics = [\"orders\"]\npartitions = [\"orders:1\"]"));
    assert!(e.contains("scale.group") && e.contains("no source.partitions"), "{e}");
    let e = err(&GROUPED.replace("[parse]", "[trigger]\nmode = \"available-now\"\n[parse]"));
    assert!(e.contains("scale.group") && e.contains("runs until it is stopped"), "{e}");
    let windowed = GROUPED.replace(
        "[sink]",
        "[watermark]\ndelay = \"1 minute\"\n[window]\ntype = \"tumbling\"\nsize = \"1 minute\"\n\
         [aggregate]\nplugin = \"a.wasm\"\n[sink]",
    );
    assert!(Pipeline::parse(&windowed, Path::new("p.toml")).unwrap().group.is_some(), "windows run in two stages");
    let e = err(&windowed.replace("delay = \"1 minute\"", "delay = \"1 minute\"\nlate = \"side-output\""));
    assert!(e.contains("scale.group") && e.contains("watermark.late = \"drop\""), "{e}");
    let e = err(&windowed.replace("[window]", "[dedup]\nkey = \"order_id\"\nwithin = \"1 hour\"\n[window]"));
    assert!(e.contains("scale.group") && e.contains("repartitioned by key"), "{e}");
    let e = err(&GROUPED.replace(
        "type = \"kafka\"\n    topics = [\"orders\"]\n    kafka.bootstrap.servers = \"127.0.0.1:9\"",
        "type = \"replay\"\npath = \"e.jsonl\"",
    ));
    assert!(e.contains("scale.group") && e.contains("type = \"kafka\""), "{e}");
    let e = err(&GROUPED.replace("group = \"orders-alerts\"", "group = \"g\"\nmembers = 3"));
    assert!(e.contains("scale") && e.contains("unknown field `members`"), "{e}");
}
