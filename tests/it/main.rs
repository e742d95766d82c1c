//! One integration test binary (ripgrep style): every test drives the real
//! `nagare` binary over loopback or inside network namespaces it creates.

#![deny(clippy::undocumented_unsafe_blocks)]

mod bad_input;
mod cluster;
mod common;
mod consistency;
mod crash;
mod defaults;
mod disk;
mod doctor;
mod impair_scripts;
mod imports;
mod nmos_schema;
mod peers;
mod pipes;
mod placement;
mod preauth;
mod probe;
mod readme;
mod recv_faults;
mod recv_rtcp;
mod report_pages;
mod send_recv;
mod serve;
mod shell;
mod signals;
mod ssrc;
mod st2110;
mod stripes;
mod tree;
