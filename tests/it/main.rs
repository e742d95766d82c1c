//! One integration test binary (ripgrep style): every test drives the real
//! `nagare` binary over loopback or inside network namespaces it creates.

mod bad_input;
mod cluster;
mod common;
mod crash;
mod defaults;
mod disk;
mod doctor;
mod impair_scripts;
mod peers;
mod preauth;
mod probe;
mod recv_faults;
mod send_recv;
mod serve;
mod signals;
mod ssrc;
mod st2110;
mod stripes;
mod tree;
