//! One integration test binary (ripgrep style): every test drives the real
//! `nagare` binary over loopback or inside network namespaces it creates.

mod bad_input;
mod cluster;
mod common;
mod crash;
mod disk;
mod doctor;
mod peers;
mod probe;
mod recv_faults;
mod send_recv;
mod signals;
mod st2110;
mod stripes;
mod tree;
