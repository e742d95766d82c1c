//! The host's timer floor, as `cyclictest` measures it: one thread per
//! CPU, pinned and real-time where allowed, sleeps to an absolute
//! deadline every period and notes how late it woke. A pacing thread can
//! hold no schedule tighter than this.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::placement::pin_to;
use super::tuning::{Realtime, precise_timers};

/// Wake-up latency of one CPU over a sample.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Wakeups {
    /// The CPU.
    pub cpu: usize,
    /// Wake-ups measured.
    pub samples: usize,
    /// Whether the sampling thread ran SCHED_FIFO, as a pacer would.
    pub realtime: bool,
    /// 99th percentile of lateness.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// The worst.
    pub max: Duration,
}

/// Samples every CPU in `cpus` at once, one wake-up every `period` for
/// `total`.
pub(crate) fn sample(cpus: &[usize], period: Duration, total: Duration) -> Result<Vec<Wakeups>> {
    let threads: Vec<_> = cpus
        .iter()
        .map(|&cpu| std::thread::spawn(move || sample_cpu(cpu, period, total)))
        .collect();
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .map_err(|_| anyhow::anyhow!("a timer sampling thread panicked"))?
        })
        .collect()
}

fn sample_cpu(cpu: usize, period: Duration, total: Duration) -> Result<Wakeups> {
    pin_to(&[cpu])?;
    precise_timers();
    let (realtime, _) = Realtime::Auto.apply()?;
    let count = (total.as_nanos() / period.as_nanos().max(1)).max(1) as usize;
    let mut late = Vec::with_capacity(count);
    let mut deadline = Instant::now() + period;
    for _ in 0..count {
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        late.push(Instant::now().saturating_duration_since(deadline));
        deadline += period;
    }
    late.sort_unstable();
    let at = |q: f64| late[((late.len() - 1) as f64 * q).round() as usize];
    Ok(Wakeups {
        cpu,
        samples: late.len(),
        realtime,
        p99: at(0.99),
        p999: at(0.999),
        max: at(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cpu_is_sampled_in_order_of_lateness() {
        let cpus = crate::net::placement::start_cpus();
        let got = sample(
            &cpus,
            Duration::from_micros(500),
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(got.iter().map(|w| w.cpu).collect::<Vec<_>>(), cpus);
        for w in got {
            assert_eq!(w.samples, 200);
            assert!(w.p99 <= w.p999 && w.p999 <= w.max, "{w:?}");
        }
    }
}
