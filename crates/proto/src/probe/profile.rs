//! Video-fit profiles and the PASS/FAIL verdict of a probe: "can this path
//! carry that stream?" answered against thresholds a stream of that kind
//! tolerates.

use serde::{Deserialize, Serialize};

use crate::probe::report::ReceiverReport;
use crate::units::Nanos;
use crate::video::st2110_21::{Model, Scan};

/// A kind of stream and what it tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Profile {
    /// Name on the command line.
    pub name: &'static str,
    /// What it stands for.
    pub description: &'static str,
    /// Stream rate, bits of UDP payload per second.
    pub rate_bps: u64,
    /// UDP payload bytes per packet.
    pub packet_size: u32,
    /// Frame rate `(num, den)`, for video.
    pub fps: Option<(u32, u32)>,
    /// Receiver's playout buffer, microseconds.
    pub playout_us: u64,
    /// Highest acceptable loss rate.
    pub max_loss_rate: f64,
    /// Highest acceptable share of late (or, without frames, late packets).
    pub max_late_ratio: f64,
    /// Highest acceptable PDV at the 99.9th percentile, ms.
    pub max_pdv_p999_ms: f64,
    /// Lowest acceptable effective bandwidth as a share of the set rate.
    pub min_rate_ratio: f64,
}

/// The thresholds used when no profile is named.
pub const GENERIC: Profile = Profile {
    name: "generic",
    description: "any stream: loss at most 0.1%, PDV p99.9 at most 50 ms",
    rate_bps: 6_000_000,
    // nagare's one default UDP payload (send, probe, doctor): 1440 bytes
    // fit a 1500-byte MTU under IPv6, UDP and RTP headers.
    packet_size: 1440,
    fps: None,
    playout_us: 50_000,
    max_loss_rate: 1e-3,
    max_late_ratio: 1e-3,
    max_pdv_p999_ms: 50.0,
    min_rate_ratio: 0.95,
};

/// Built-in profiles.
pub const PROFILES: [Profile; 4] = [
    GENERIC,
    Profile {
        name: "mpeg2-ts",
        description: "MPEG-2 TS at 6 Mbit/s, 7 TS packets a datagram (Sperf's default)",
        rate_bps: 6_000_000,
        packet_size: 1316,
        fps: None,
        playout_us: 50_000,
        max_loss_rate: 1e-4,
        max_late_ratio: 1e-4,
        max_pdv_p999_ms: 50.0,
        min_rate_ratio: 0.95,
    },
    Profile {
        name: "hd-2110",
        description: "ST 2110-20 1080p59.94 10-bit 4:2:2 (2.49 Gbit/s), 1400-byte packets",
        // 1920 × 1080 × 20 bits × 60000/1001
        rate_bps: 2_485_834_166,
        packet_size: 1400,
        fps: Some((60000, 1001)),
        playout_us: 5_000,
        max_loss_rate: 1e-6,
        max_late_ratio: 0.0,
        max_pdv_p999_ms: 5.0,
        min_rate_ratio: 0.98,
    },
    Profile {
        name: "8k-stripe",
        description: "one 3.2 Gbit/s stripe of 8K video at 59.94 fps, 8800-byte jumbo packets",
        rate_bps: 3_200_000_000,
        packet_size: 8800,
        fps: Some((60000, 1001)),
        playout_us: 10_000,
        max_loss_rate: 1e-6,
        max_late_ratio: 0.0,
        max_pdv_p999_ms: 10.0,
        min_rate_ratio: 0.98,
    },
];

/// The profile called `name`.
pub fn profile(name: &str) -> Option<Profile> {
    PROFILES.into_iter().find(|p| p.name == name)
}

/// PASS or FAIL, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Every threshold held.
    pub pass: bool,
    /// The test was stopped early (Ctrl-C): the verdict covers only what
    /// ran, and is not a full answer.
    #[serde(default)]
    pub partial: bool,
    /// Profile judged against.
    pub profile: String,
    /// One line per threshold that failed.
    pub reasons: Vec<String>,
    /// For a video profile: the ST 2110-21 sender type the path's delay
    /// variation allows (see [`Profile::st2110_21`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub st2110_21: Option<String>,
}

impl Profile {
    /// Judges a receiver report; `set_rate_bps` is the rate the sender was
    /// asked for, `playout` the playout buffer the test used (the
    /// profile's own, or the user's `--playout`), named in the reason.
    pub fn judge(&self, r: &ReceiverReport, set_rate_bps: f64, playout: Nanos) -> Verdict {
        let mut reasons = Vec::new();
        if r.received == 0 {
            reasons.push("nothing arrived".to_string());
        }
        if r.loss_rate > self.max_loss_rate {
            let mut why = format!(
                "loss {:.4}% ({} of {}) above {:.4}%",
                r.loss_rate * 100.0,
                r.lost,
                r.sent,
                self.max_loss_rate * 100.0
            );
            if r.receiver_drops > 0 {
                // Overload of the measuring host must not read as the path's.
                why.push_str(&format!(
                    ": the receiving host, not the path, dropped {} of them (its socket \
                     buffer overflowed); rerun with a lower --rate, larger packets or a less \
                     loaded receiver",
                    r.receiver_drops.min(r.lost)
                ));
            }
            reasons.push(why);
        }
        let (late, of, what) = match &r.frames {
            Some(f) => (f.late + f.incomplete, f.frames, "frames late or incomplete"),
            None => (r.late, r.sent, "packets late"),
        };
        let late_ratio = if of > 0 { late as f64 / of as f64 } else { 0.0 };
        if late_ratio > self.max_late_ratio {
            reasons.push(format!(
                "{late} of {of} {what} ({:.4}%) above {:.4}% (playout buffer {} ms)",
                late_ratio * 100.0,
                self.max_late_ratio * 100.0,
                playout.as_millis_f64()
            ));
        }
        if r.pdv_ms.p999 > self.max_pdv_p999_ms {
            reasons.push(format!(
                "PDV p99.9 {:.3} ms above {:.3} ms",
                r.pdv_ms.p999, self.max_pdv_p999_ms
            ));
        }
        if set_rate_bps > 0.0 && r.effective_bandwidth_bps < self.min_rate_ratio * set_rate_bps {
            reasons.push(format!(
                "effective bandwidth {:.3} Mbit/s below {:.0}% of the set {:.3} Mbit/s",
                r.effective_bandwidth_bps / 1e6,
                self.min_rate_ratio * 100.0,
                set_rate_bps / 1e6
            ));
        }
        Verdict {
            pass: reasons.is_empty(),
            partial: false,
            profile: self.name.to_string(),
            reasons,
            st2110_21: self.st2110_21(r),
        }
    }

    /// For a video profile (one with a frame rate): which ST 2110-21
    /// sender type the path allows, judged by its PDV p99.9 against the
    /// model of a progressive stream of the profile's rate and packet
    /// size ([`Model::path_allows`]).
    pub fn st2110_21(&self, r: &ReceiverReport) -> Option<String> {
        let (num, den) = self.fps?;
        let rate = crate::video::FrameRate::new(num, den).ok()?;
        let frame_bits = self.rate_bps as f64 * f64::from(den) / f64::from(num);
        let packets = (frame_bits / (f64::from(self.packet_size) * 8.0)).ceil() as u32;
        let model = Model::new(rate, 1080, Scan::Progressive, packets.max(1)).ok()?;
        let pdv = Nanos((r.pdv_ms.p999.max(0.0) * 1e6) as u64);
        let allows = match model.path_allows(pdv) {
            Some(t) => format!("allows a {t} sender ({})", t.sdp_value()),
            None => "allows no ST 2110-21 sender type".to_string(),
        };
        let l = model.limits();
        Some(format!(
            "ST 2110-21: PDV p99.9 {:.3} ms against {packets} packets a frame (CMAX N {} W {}, VRX_FULL N {} W {}) {allows}",
            r.pdv_ms.p999, l.cmax_n, l.cmax_w, l.vrx_full_n, l.vrx_full_w
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Quantiles;

    fn clean() -> ReceiverReport {
        ReceiverReport {
            sent: 1000,
            received: 1000,
            effective_bandwidth_bps: 6e6,
            ..ReceiverReport::default()
        }
    }

    #[test]
    fn pass_and_each_reason_for_fail() {
        let p = profile("mpeg2-ts").unwrap();
        assert!(p.judge(&clean(), 6e6, Nanos::from_millis(50)).pass);
        let r = ReceiverReport {
            lost: 2,
            received: 998,
            loss_rate: 0.002,
            late: 5,
            pdv_ms: Quantiles {
                p999: 80.0,
                ..Quantiles::default()
            },
            effective_bandwidth_bps: 3e6,
            ..clean()
        };
        let v = p.judge(&r, 6e6, Nanos::from_millis(50));
        assert!(!v.pass);
        assert_eq!(v.reasons.len(), 4, "{:?}", v.reasons);
        assert!(
            v.reasons[0].contains("loss 0.2000% (2 of 1000)"),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn late_reason_names_the_playout_buffer_used() {
        let r = ReceiverReport {
            late: 10,
            ..clean()
        };
        let v = GENERIC.judge(&r, 6e6, Nanos::from_micros(1));
        assert!(!v.pass);
        assert!(
            v.reasons[0].contains("(playout buffer 0.001 ms)"),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn hd_2110_rate_is_1080p5994_10bit_422() {
        let p = profile("hd-2110").unwrap();
        let exact = 1920.0 * 1080.0 * 20.0 * 60000.0 / 1001.0;
        assert!((p.rate_bps as f64 - exact).abs() < 1.0);
        assert!(profile("nope").is_none());
        // 3703 packets of 1400 bytes a frame; 10 µs of PDV fits N, 40 µs
        // only W, and 1 ms nothing.
        let mut r = clean();
        for (pdv_ms, allows) in [
            (0.010, "allows a N sender (2110TPN)"),
            (0.040, "allows a W sender (2110TPW)"),
            (1.0, "allows no ST 2110-21 sender type"),
        ] {
            r.pdv_ms.p999 = pdv_ms;
            let text = p.st2110_21(&r).unwrap();
            assert!(text.contains("3703 packets a frame"), "{text}");
            assert!(text.ends_with(allows), "{text}");
        }
        assert_eq!(GENERIC.st2110_21(&r), None);
    }

    #[test]
    fn receiver_drops_are_blamed_on_the_receiving_host() {
        let mut r = clean();
        r.lost = 100;
        r.received = 900;
        r.loss_rate = 0.1;
        let v = GENERIC.judge(&r, 6e6, Nanos::from_millis(50));
        assert!(!v.reasons[0].contains("receiving host"), "{:?}", v.reasons);
        r.receiver_drops = 60;
        let v = GENERIC.judge(&r, 6e6, Nanos::from_millis(50));
        assert!(!v.pass);
        assert!(
            v.reasons[0].contains("the receiving host, not the path, dropped 60"),
            "{:?}",
            v.reasons
        );
    }
}
