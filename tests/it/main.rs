//! One integration test binary (ripgrep style): every test drives the real
//! `nagare` binary over loopback or inside network namespaces it creates.

mod common;
mod probe;
