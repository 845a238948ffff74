//! `mur`: an agent runtime. It stages a capsule (`murmur.yaml`), runs an agent session
//! that calls a model through a driver, executes the tools the model asks for, and
//! writes every event to `trace.jsonl`.
//!
//! One module per concept of the architecture page: [`manifest`], [`staging`],
//! [`session`], [`inference`], [`tools`], [`exec`], [`records`]; formations speak A2A
//! through [`a2a`] (client and wire types) and [`door`] (server).

pub mod a2a;
pub mod cli;
pub mod door;
pub mod exec;
pub mod exit;
pub mod formation;
pub mod generate;
pub mod ids;
pub mod inference;
pub mod inspect;
pub mod manifest;
pub mod net;
pub mod private;
pub mod progress;
pub mod records;
pub mod secrets;
pub mod session;
pub mod signals;
pub mod staging;
pub mod tools;
