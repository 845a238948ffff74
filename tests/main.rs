//! The integration tests: one test binary (`autotests = false` in Cargo.toml), each
//! file of `tests/` a module of it, sharing one [`support`] module compiled once.
//! Run one file's tests with `cargo test --test main <file>::`.

mod support;

mod background;
mod confine;
mod door;
mod drivers;
mod formation;
mod hooks;
mod inspect;
mod manifest;
mod newuser;
mod peer_files;
mod plan;
mod real_model;
mod run;
