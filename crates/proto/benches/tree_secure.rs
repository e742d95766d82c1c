//! The cost of the tree's link encryption alone (`tree::SecureLink`):
//! sealing and opening a 64 KiB screen chunk, as every relay does for
//! each chunk it receives and each child it sends it to. Bytes per second
//! here, against a peer's CPU per Gbit in bench/tree.sh, says how much of
//! a peer's work is encryption.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nagare_proto::screen::ScreenMessage;
use nagare_proto::tree::secure::Opened;
use nagare_proto::tree::{Control, PeerId, Role, SecureLink, proof};

fn pair() -> (SecureLink, SecureLink) {
    let (key, nonce) = ([1; 16], [2; 32]);
    let challenge = Control::Challenge { nonce }.to_bytes();
    let request = Control::Attach {
        proof: proof(&key, &nonce, Role::Attach),
        peer: PeerId(1),
        version: None,
    }
    .to_bytes();
    let (mut d, hello) =
        SecureLink::initiator(&key, &nonce, Role::Attach, &challenge, &request, [3; 32]).unwrap();
    let mut a = SecureLink::responder(&key, &nonce, Role::Attach, &request, [4; 32]).unwrap();
    let Ok(Opened::Reply(reply)) = a.open(&hello) else {
        panic!("handshake refused");
    };
    d.open(&reply).unwrap();
    (d, a)
}

fn seal_open(c: &mut Criterion) {
    let body: Vec<u8> = (0..65_000u32).map(|i| (i * 7) as u8).collect();
    let msg = ScreenMessage::Tiles(&body).to_bytes();
    let mut g = c.benchmark_group("tree_secure");
    g.throughput(Throughput::Bytes(msg.len() as u64));
    let (_, mut tx) = pair();
    g.bench_function("seal_64k", |b| b.iter(|| tx.seal(&msg).unwrap()));
    let (mut rx2, mut tx2) = pair();
    g.bench_function("seal_and_open_64k", |b| {
        b.iter(|| {
            let sealed = tx2.seal(&msg).unwrap();
            for r in nagare_proto::framing::messages(&sealed) {
                rx2.open(r).unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, seal_open);
criterion_main!(benches);
