//! Any server bytes, cut anywhere, into the RTSP client machine
//! (`rtsp::Client`, what `nagare loadtest` plays with), with timers and a
//! TEARDOWN in between.
//!
//! Input: `cuts (8)` then the stream. Cut byte `c` (used in turn) feeds
//! the next `(c & 0x3f) + 1` bytes; with `c & 0x80` virtual time jumps to
//! the machine's deadline and the timer fires; with `c & 0x40` the client
//! is asked to close.
//! Invariants: no panic; every transmit is one whole RTSP/1.0 request
//! (rtsp-types reads it back) with a CSeq one more than the last; at most
//! one request awaits its reply; nothing is sent and no event comes after
//! `Failed` or `Closed`; heap use stays under a bound set by the client's
//! limits, not by the input's length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare_fuzz::{CountingAlloc, Reader};
use nagare_proto::Nanos;
use nagare_proto::rtsp::{Client, ClientConfig, ClientEvent, ClientInput, PortPair};
use rtsp_types::{Message, Version};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const PORTS: PortPair = PortPair {
    rtp: 6000,
    rtcp: 6001,
};

struct Watch {
    cseq: u32,
    over: bool,
}

impl Watch {
    fn transmits(&mut self, c: &mut Client, now: Nanos) {
        let mut n = 0;
        while let Some(bytes) = c.poll_transmit(now) {
            assert!(!self.over, "a request after the session ended");
            let (msg, used) = Message::<Vec<u8>>::parse(&bytes).expect("a well-formed request");
            assert_eq!(used, bytes.len(), "one message per transmit");
            let Message::Request(r) = msg else {
                panic!("not a request");
            };
            assert_eq!(r.version(), Version::V1_0);
            let cseq: u32 = r
                .header(&rtsp_types::headers::CSEQ)
                .expect("a CSeq")
                .as_str()
                .parse()
                .expect("numeric CSeq");
            assert_eq!(cseq, self.cseq + 1, "CSeq counts up");
            self.cseq = cseq;
            n += 1;
        }
        assert!(n <= 1, "{n} requests at once");
        while let Some(e) = c.poll_event() {
            assert!(!self.over, "{e:?} after the session ended");
            self.over = matches!(e, ClientEvent::Failed(_) | ClientEvent::Closed);
        }
        assert_eq!(self.over, c.is_over());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    let cuts = r.bytes(8).to_vec();
    let stream = r.rest();
    let base = CountingAlloc::live();
    CountingAlloc::reset_peak();
    let mut now = Nanos::ZERO;
    let mut c = Client::new(
        now,
        "rtsp://127.0.0.1:8554/clip.ts",
        ClientConfig::new(PORTS),
    )
    .expect("a valid URL");
    let mut w = Watch {
        cseq: 0,
        over: false,
    };
    w.transmits(&mut c, now);
    let (mut at, mut k) = (0, 0);
    while at < stream.len() {
        let cut = cuts.get(k % cuts.len().max(1)).copied().unwrap_or(0x3f);
        k += 1;
        if cut & 0x80 != 0
            && let Some(t) = c.poll_timeout()
        {
            now = now.max(t);
            c.handle_input(now, ClientInput::Timer);
            w.transmits(&mut c, now);
        }
        if cut & 0x40 != 0 {
            c.close(now);
            w.transmits(&mut c, now);
        }
        let n = (usize::from(cut & 0x3f) + 1).min(stream.len() - at);
        c.handle_input(now, ClientInput::Bytes(&stream[at..at + n]));
        w.transmits(&mut c, now);
        at += n;
    }
    c.handle_input(now, ClientInput::Closed);
    w.transmits(&mut c, now);
    assert!(c.is_over(), "a closed connection ends the client");
    // A reply head of 8 KiB and a body of 64 KiB, kept a few times over.
    let used = CountingAlloc::peak() - base;
    assert!(used < 1 << 20, "{used} bytes of heap");
});
