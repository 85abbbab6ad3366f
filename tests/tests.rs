//! Weir's end-to-end tests, one binary: the `weir` binary running real components built from
//! `plugins/` and `tests/plugins/`, against brokers, the web console in Chromium and the
//! references computed here. Each module is one area; `common` holds what they share. The
//! scale-out tests are a binary of their own (`scale_out/`), run beside these.

mod common;

mod attacks;
mod author;
mod catch_up;
mod cli;
mod console;
mod dedup;
mod formats;
mod join;
mod kafka;
mod kafka_continuous;
mod kafka_faults;
mod kafka_mock;
mod kafka_sources;
mod kafka_transactions;
mod lakehouse;
mod pipeline;
mod processor;
mod project;
mod project_grants;
mod python;
mod readme;
mod restart;
mod sandbox;
mod serve;
mod serve_tenants;
mod stdlib;
mod tenants;
mod timer_budget;
