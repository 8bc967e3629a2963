//! The integration tests, one crate: each file of `tests/` is a module
//! here, so the crate and its dependencies are linked once, not once per
//! file, and the suite's tests run side by side (`cargo test --test suite
//! <file>::` runs one file's tests).

mod common;

mod a2a;
mod a2a_runs;
mod a2a_tck;
mod a2a_worker;
mod agent_formats;
mod agent_serving;
mod api_auth;
mod api_bounds;
mod bench;
mod bus;
mod bus_permissions;
mod cli;
mod cli_client;
mod cli_services;
mod cluster;
mod cluster_layout;
mod compose;
mod console;
mod console_api;
mod crash;
mod crash_services;
mod cutoff;
mod delivery;
mod dev;
mod docs_commands;
mod e2e;
mod failover;
mod failures;
mod hostile_input;
mod http_agent;
mod instructions;
mod joining;
mod layers;
mod llm_agents;
mod llm_crash;
mod llm_example;
mod llm_mcp;
mod llm_patterns;
mod observability;
mod openapi;
mod push;
mod replication;
mod schema;
mod secrets;
mod security;
mod store;
mod store_damage;
mod store_keys;
mod store_log;
mod store_migration;
mod tokens;
mod trace_cli;
mod trigger_examples;
mod unreadable_records;
mod workers;
mod workflows;
