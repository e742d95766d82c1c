//! One integration test binary (ripgrep style): every test drives the real
//! `nagare` binary over loopback or inside network namespaces it creates.

mod bad_input;
mod common;
mod consistency;
mod doctor;
mod peers;
mod pipes;
mod probe;
mod readme;
mod recv_faults;
mod report_pages;
mod send_recv;
mod shell;
mod tree;
