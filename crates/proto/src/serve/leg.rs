//! When and what a cluster leg sends: the stripe it takes of the frame
//! and the epoch frame it starts on. Every node of a cluster derives its
//! packets from the epoch, so two legs asked for the same frame send the
//! same packets from the same instant.

use crate::Nanos;
use crate::video::stripe::{Rule, Stripes};
use crate::video::{FrameRate, VideoFormat};

use super::Error;

/// Room beyond the pacer's start lead for the request to reach it: a
/// first frame closer than lead plus margin would start late.
pub const LEG_MARGIN: Nanos = Nanos::from_millis(20);

/// How far ahead a leg's first frame may be; a request further out is
/// more likely a wrong epoch than a plan.
pub const MAX_START_AHEAD: Nanos = Nanos::from_secs(60);

/// Stripe `index` of `format` split `count` ways by `rule`, or why that
/// split does not fit.
pub fn stripe(
    format: VideoFormat,
    rule: Rule,
    count: usize,
    index: usize,
) -> Result<(Stripes, usize), Error> {
    let stripes = Stripes::new(format, rule, count).map_err(|why| Error::StripeSplit {
        rule,
        count,
        width: format.width,
        height: format.height,
        why,
    })?;
    if index >= count {
        return Err(Error::StripeIndex { index, count });
    }
    Ok((stripes, index))
}

/// The epoch frame a leg starts on: the one `asked` for, or the soonest
/// frame the pacer can still make if none was asked or it is too soon.
/// `now` is nanoseconds since the Unix epoch, `lead` the pacer's start
/// lead. A frame starting more than [`MAX_START_AHEAD`] from now is
/// refused.
pub fn first_frame(
    rate: FrameRate,
    asked: Option<u64>,
    now: Nanos,
    lead: Nanos,
) -> Result<u64, Error> {
    let now = u128::from(now.as_nanos());
    let ready = now + u128::from(lead.as_nanos()) + u128::from(LEG_MARGIN.as_nanos());
    let soonest = rate.frame_at_or_after_ns(ready);
    let frame = asked.unwrap_or(soonest).max(soonest);
    if rate.frame_start_ns(frame) > now + u128::from(MAX_START_AHEAD.as_nanos()) {
        return Err(Error::StartTooFar { frame });
    }
    Ok(frame)
}
