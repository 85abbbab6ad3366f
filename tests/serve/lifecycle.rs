//! A pipeline's life on the service: paused, resumed and updated with its state kept, an
//! update that would break it refused while the old run goes on; and three pipelines through
//! the service killed again and again, each ending with an uninterrupted run's output.

use crate::common::serve::*;
use crate::common::*;

#[test]
fn pause_resume_update_with_state_kept_and_a_refused_update_leaves_the_old_run() {
    let dir = tempfile::tempdir().unwrap();
    let (admin_path, admin) = admin_file(dir.path());
    let data = dir.path().join("data");
    let s = Server::start(&data, &admin_path, &[]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let v2 = std::fs::read(component("versioned_count")).unwrap();
    s.expect(201, "PUT", "/v1/plugins/error-rate-v2", Some(&acme), Some(&v2));
    let events = orders(dir.path(), 30_000, 21);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&acme), Some(&std::fs::read(&events).unwrap()));
    // A batch of 200 every 100 ms: 15 s of batches, so windows are open throughout the changes
    // below.
    let text = orders_pipeline("errors", "orders.jsonl", 200)
        .replace("mode = \"available-now\"", "mode = \"processing-time\"\ninterval = \"100ms\"");
    s.expect(201, "PUT", "/v1/pipelines/errors", Some(&acme), Some(text.as_bytes()));
    let v = s.expect(200, "POST", "/v1/pipelines/errors/pause", Some(&acme), None);
    assert_eq!((v["desired"].as_str(), v["state"].as_str()), (Some("paused"), Some("idle")), "{v}");
    let v = s.expect(200, "POST", "/v1/pipelines/errors/stop", Some(&acme), None);
    assert_eq!(v["desired"], "stopped");
    s.expect(409, "POST", "/v1/pipelines/errors/resume", Some(&acme), None);
    s.expect(200, "POST", "/v1/pipelines/errors/start", Some(&acme), None);
    s.expect(200, "POST", "/v1/pipelines/errors/pause", Some(&acme), None);
    let v = s.expect(200, "POST", "/v1/pipelines/errors/resume", Some(&acme), None);
    assert_eq!((v["desired"].as_str(), v["state"].as_str()), (Some("running"), Some("running")), "{v}");

    // The aggregator updated mid-run to a build with a new state encoding: the service restarts
    // the pipeline on it without a restart of its own, and the state is migrated.
    let migrated = text.replace("\"error-rate\"", "\"error-rate-v2\"");
    s.expect(200, "PUT", "/v1/pipelines/errors", Some(&acme), Some(migrated.as_bytes()));
    // The stream opened after the update: its first batch is the new build's.
    let mut stream = s.events(&acme, "errors");
    while stream.next().is_some_and(|(kind, _)| kind != "progress") {}
    // Back to the old build, which cannot read the new accumulators: refused with the reason,
    // and the new build runs on.
    let r = s.expect(409, "PUT", "/v1/pipelines/errors", Some(&acme), Some(text.as_bytes()));
    assert!(r["error"].as_str().unwrap().contains("state version 3"), "{r}");
    let file = s.call("GET", "/v1/pipelines/errors/file", Some(&acme), None).1;
    assert_eq!(String::from_utf8(file).unwrap(), migrated, "the registry kept the file that runs");
    assert_eq!(s.expect(200, "GET", "/v1/pipelines/errors", Some(&acme), None)["state"], "running");
    // Nor may an update read another source on this checkpoint.
    s.expect(201, "PUT", "/v1/files/other.jsonl", Some(&acme), Some(b"{}\n"));
    let other = migrated.replace("path = \"orders.jsonl\"", "path = \"other.jsonl\"");
    let r = s.expect(409, "PUT", "/v1/pipelines/errors", Some(&acme), Some(other.as_bytes()));
    assert!(r["error"].as_str().unwrap().contains("cannot start"), "{r}");

    s.wait_for(&acme, "errors", &["finished"]);
    let rows = output_rows(&s, &acme, "errors");
    let local = local_copy(dir.path(), &orders_pipeline("errors", "orders.jsonl", 200), "orders.jsonl", &events);
    assert_eq!(
        windows_of(&rows),
        windows_of(&weir_test(&local, &events)),
        "each window once, across the pauses and the updates"
    );
    s.kill();

    // A restart keeps what was wanted: stopped stays stopped.
    let s = Server::start(&data, &admin_path, &[]);
    s.expect(200, "POST", "/v1/pipelines/errors/stop", Some(&acme), None);
    s.kill();
    let s = Server::start(&data, &admin_path, &[]);
    let v = s.expect(200, "GET", "/v1/pipelines/errors", Some(&acme), None);
    assert_eq!((v["desired"].as_str(), v["state"].as_str()), (Some("stopped"), Some("idle")), "{v}");
    s.kill();
}

/// The kill loop for the service: three pipelines run in one `weir serve`, which is killed with
/// SIGKILL at random moments (after 0 to 2 new progress records of one of them) and started
/// again on the same data directory, up to `kills` times. Each pipeline's output must equal an
/// uninterrupted run's, and the registry must open every time.
#[test]
fn three_pipelines_give_an_uninterrupted_run_s_output_after_the_service_is_killed_again_and_again() {
    // 400 batches each: enough that 20 kills land while they run.
    const BATCH: usize = 250;
    let dir = tempfile::tempdir().unwrap();
    let (admin_path, admin) = admin_file(dir.path());
    let data = dir.path().join("data");
    let s = Server::start(&data, &admin_path, &[]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let names = ["one", "two", "three"];
    let mut inputs = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let events = orders(&sub, 100_000, 30 + i as u64);
        s.expect(201, "PUT", &format!("/v1/files/{name}.jsonl"), Some(&acme), Some(&std::fs::read(&events).unwrap()));
        inputs.push(events);
    }
    for name in names {
        let text = orders_pipeline(name, &format!("{name}.jsonl"), BATCH);
        s.expect(201, "PUT", &format!("/v1/pipelines/{name}"), Some(&acme), Some(text.as_bytes()));
    }
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = seed;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut server = s;
    let mut kills = 0;
    while kills < 20 {
        // Killed after `wait_for` new batches of one pipeline (0: at once, during start-up),
        // counted on its event stream; one that finishes first hands over to the next.
        let wait_for = next(3);
        let first = next(3) as usize;
        let mut landed = wait_for == 0;
        for name in names.iter().cycle().skip(first).take(names.len()) {
            if landed {
                break;
            }
            let (mut events, mut seen) = (server.events(&acme, name), 0);
            while let Some((kind, data)) = events.next() {
                match (kind.as_str(), data["state"].as_str()) {
                    ("progress", _) => {
                        seen += 1;
                        if seen >= wait_for {
                            landed = true;
                            break;
                        }
                    }
                    ("state", Some("finished")) => break,
                    ("state", Some("failed")) => panic!("{name} failed: {data}"),
                    _ => {}
                }
            }
        }
        if !landed {
            break;
        }
        server.kill();
        kills += 1;
        server = Server::start(&data, &admin_path, &[]);
    }
    eprintln!("{kills} kills");
    assert_eq!(kills, 20, "the pipelines ended before 20 kills landed");
    for (name, events) in names.iter().zip(&inputs) {
        server.wait_for(&acme, name, &["finished"]);
        let rows = output_rows(&server, &acme, name);
        let local = local_copy(
            dir.path(),
            &orders_pipeline(name, &format!("{name}.jsonl"), BATCH),
            &format!("{name}.jsonl"),
            events,
        );
        let expected = weir_test(&local, events);
        assert_eq!(rows, expected, "{name}: the same rows, each once, in the same order");
    }
    server.kill();
}
