//! The cost of `mpegts::Sender` pacing 200 TS flows of 6 Mbit/s on
//! virtual time, per datagram: with one wake-up per datagram (no batch
//! window) and with serve's 50 µs window, which sends what falls due
//! within it at one wake-up. The window cuts a driver's wake-ups (the
//! cost that matters, see docs/serve.md); this guards the machine's own
//! per-datagram cost, which must not grow with it.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nagare_proto::mpegts::sender::{Event, Input};
use nagare_proto::mpegts::{
    DATAGRAM_LEN, DatagramWriter, Encapsulation, FlowSpec, PACKET_LEN, ScheduleConfig, Sender,
};
use nagare_proto::{BitRate, Nanos, Ssrc};

const FLOWS: u32 = 200;
const RATE: u64 = 6_000_000;

/// Sixteen datagrams of null packets: no PCR, so each flow keeps its
/// fallback rate.
fn chunk() -> Vec<u8> {
    let mut packet = [0xffu8; PACKET_LEN];
    packet[..4].copy_from_slice(&[0x47, 0x1f, 0xff, 0x10]);
    packet.repeat(16 * DATAGRAM_LEN / PACKET_LEN)
}

/// 200 flows started a datagram period apart, spread over one period.
fn sender(window: Nanos) -> Sender {
    let mut s = Sender::new();
    s.set_batch_window(window);
    let period = 1_000_000_000 * (DATAGRAM_LEN as u64 * 8) / RATE;
    for k in 0..FLOWS {
        let writer = DatagramWriter::new(Encapsulation::Rtp, Ssrc(k), 0, 0);
        let spec = FlowSpec::new(ScheduleConfig::new(BitRate(RATE)), writer)
            .start(Nanos(u64::from(k) * period / u64::from(FLOWS)));
        s.add_flow(spec);
    }
    s
}

/// Sends `n` datagrams, answering chunk requests as a driver would and
/// jumping to each deadline; returns the wake-ups it took.
fn run(s: &mut Sender, now: &mut Nanos, data: &[u8], n: u64) -> u64 {
    let (mut sent, mut wakes) = (0, 0);
    while sent < n {
        wakes += 1;
        loop {
            let mut busy = false;
            while let Some(t) = s.poll_transmit(*now) {
                busy = true;
                sent += 1;
                std::hint::black_box(t.datagram);
            }
            while let Some(e) = s.poll_event() {
                busy = true;
                if let Event::NeedChunk { flow } = e {
                    let input = Input::Chunk {
                        flow,
                        data: data.to_vec(),
                        len: data.len(),
                        end_of_pass: false,
                    };
                    let _ = s.handle_input(*now, input);
                }
            }
            if !busy {
                break;
            }
        }
        *now = s.poll_timeout().unwrap_or(*now).max(*now);
    }
    wakes
}

fn ts_flows(c: &mut Criterion) {
    let data = chunk();
    let mut g = c.benchmark_group("ts_sender");
    g.throughput(Throughput::Elements(1000));
    for window_us in [0u64, 50] {
        let mut s = sender(Nanos::from_micros(window_us));
        let mut now = Nanos::ZERO;
        let wakes = run(&mut s, &mut now, &data, 10_000);
        eprintln!("ts_sender: window {window_us} µs: {wakes} wake-ups for 10,000 datagrams");
        g.bench_with_input(
            BenchmarkId::new("1000_datagrams_200_flows_window_us", window_us),
            &window_us,
            |b, _| b.iter(|| run(&mut s, &mut now, &data, 1000)),
        );
    }
    g.finish();
}

criterion_group!(benches, ts_flows);
criterion_main!(benches);
