//! Reads planned into frame memory (`Receiver::land`) against the copying
//! path (`Receiver::handle_input`), on a real stream the input impairs:
//! both must give the same events, frame bytes and counters.
//!
//! Input: `format (3) | size (1)` then steps of `op (1)`: `op & 3` is 0
//! for the stream's next packet, 1 to lose it, 2 for it with the byte at
//! `pos (1)` xor `mask (1)`, 3 for a raw datagram `len (1) | bytes`; a
//! nonzero `op >> 2` ends the GRO batch after it (batches also end where
//! the kernel's would: a datagram longer than the batch's first, or after
//! a shorter one). Packets are 40 + 4 * `size` bytes, packed as nagare
//! packs them.
//! Invariants: no panic; identical events, frame bytes (zero-filled
//! holes) and counters both ways.

#![no_main]

use std::io::IoSliceMut;

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{Reader, small_format};
use nagare_proto::video::landing::Landed;
use nagare_proto::video::receiver::{Config, Datagram, Event, Incomplete, Receiver};
use nagare_proto::video::st2110_20::Packetizer;
use nagare_proto::{ExtSeq, MediaTime, Nanos, Ssrc};

fn receiver(format: nagare_proto::VideoFormat) -> Receiver {
    Receiver::new(Config {
        format,
        rate: None,
        incomplete: Incomplete::Keep,
        frame_limit: None,
    })
}

fn events(r: &mut Receiver) -> Vec<(String, Vec<u8>)> {
    std::iter::from_fn(|| r.poll_event())
        .map(|e| match e {
            Event::Frame(f) => (format!("f{} {}", f.index, f.complete), f.data),
            other => (format!("{other:?}"), Vec::new()),
        })
        .collect()
}

/// One batch through both receivers.
fn feed(copying: &mut Receiver, landing: &mut Receiver, batch: &[Vec<u8>], at: Nanos) {
    for bytes in batch {
        copying.handle_input(at, Datagram { bytes, from: None });
    }
    let all = batch.concat();
    let _ = landing.land(|slices: &mut [IoSliceMut<'_>]| {
        let mut done = 0;
        for s in slices.iter_mut() {
            let n = s.len().min(all.len() - done);
            s[..n].copy_from_slice(&all[done..done + n]);
            done += n;
        }
        assert_eq!(done, all.len(), "a batch always fits");
        Ok::<_, ()>(Some(Landed {
            len: done,
            segment: batch[0].len(),
            at,
            from: None,
        }))
    });
    assert_eq!(events(copying), events(landing));
}

fuzz_target!(|data: &[u8]| {
    let mut input = Reader::new(data);
    let format = small_format(input.u8(), input.u8(), input.u8());
    let size = 40 + 4 * usize::from(input.u8());
    let Ok(p) = Packetizer::new(format, size, Ssrc(1)) else {
        return;
    };
    let p = p.uniform();
    let ppf = p.packets_per_frame() as u64;
    let frame: Vec<u8> = (0..format.frame_bytes())
        .map(|i| (i * 7 + 3) as u8)
        .collect();
    let packet = |k: u64| {
        let mut buf = vec![0u8; p.packet_len((k % ppf) as usize)];
        let ts = MediaTime((k / ppf * 3000) as u32);
        p.write_packet((k % ppf) as usize, &frame, ExtSeq(k), ts, &mut buf)
            .expect("a planned packet fits its length");
        buf
    };
    let (mut copying, mut landing) = (receiver(format), receiver(format));
    landing.enable_landing();
    let (mut next, mut batch, mut at) = (0u64, Vec::<Vec<u8>>::new(), Nanos::ZERO);
    while input.remaining() > 0 {
        let op = input.u8();
        let datagram = match op & 3 {
            0 => Some(packet(next)),
            1 => None,
            2 => {
                let mut pk = packet(next);
                let (pos, mask) = (usize::from(input.u8()), input.u8());
                let n = pk.len();
                pk[pos % n] ^= mask;
                Some(pk)
            }
            _ => {
                let len = usize::from(input.u8());
                Some(input.bytes(len).to_vec())
            }
        };
        if op & 3 != 3 {
            next += 1;
        }
        let Some(d) = datagram else {
            continue;
        };
        let fits = batch.first().is_some_and(|f: &Vec<u8>| {
            !d.is_empty() && d.len() <= f.len() && batch.last().is_some_and(|l| l.len() == f.len())
        });
        if !fits && !batch.is_empty() {
            feed(&mut copying, &mut landing, &batch, at);
            batch.clear();
            at = at + Nanos::from_micros(20);
        }
        batch.push(d);
        if op >> 2 != 0 || batch.len() >= 64 {
            feed(&mut copying, &mut landing, &batch, at);
            batch.clear();
            at = at + Nanos::from_micros(20);
        }
    }
    if !batch.is_empty() {
        feed(&mut copying, &mut landing, &batch, at);
    }
    copying.finish();
    landing.finish();
    assert_eq!(events(&mut copying), events(&mut landing));
    assert_eq!(copying.stats(), landing.stats());
});
