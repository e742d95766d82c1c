//! RTCP beside a paced RTP stream, for `send` and `recv`: nagare-proto's
//! `rtcp::Reporter` and `rtcp::Feedback` on a thread of their own for a
//! sender ([`sending`]), and its `rtcp::Reader` polled from a receiver's
//! loop ([`reading`]). The pacing thread's only part is a few relaxed
//! atomic stores per train.

pub(crate) mod reading;
pub(crate) mod sending;
