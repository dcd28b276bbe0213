//! The integration tests, one binary (issue 35): `tests/it/support` compiles and links once,
//! and libtest runs every area's tests together. Each module is one area, named as its tests
//! are filtered (`cargo test --test it -- bypass::`).
//!
//! Two scenario suites keep a process of their own, since they load the machine or break
//! things on purpose and their timings would pull on everything else's: `tests/postgres.rs`
//! (a throw-away PostgreSQL cluster, crashed and stopped under load) and `tests/recovery.rs`
//! (kill -9 under thousands of writes, a full disk).

// Test helpers are outside the 6-parameter limit of clippy.toml (issue 55), which is the product's.
#![allow(clippy::too_many_arguments)]

mod support;

mod admin;
mod admission;
mod aip2;
mod architecture;
mod audit_export;
mod book;
mod budget;
mod bypass;
mod bypass3;
mod caller;
mod cli;
mod connectors;
mod connectors_mcp;
mod connectors_read;
mod console;
mod console_api;
mod contracts;
mod dashboard;
mod dataplane;
mod enforce;
mod etag;
mod freeze;
mod identity;
mod image;
mod image_pod;
mod kubernetes;
mod lease_batch;
mod log;
mod mcp;
mod openapi;
mod otlp;
mod python_client;
mod rcns;
mod rcns_mcp;
mod receipt_log;
mod replay;
mod rules;
mod runtimes;
mod shadow;
mod simulate;
mod store;
mod store_contract;
mod witness;
