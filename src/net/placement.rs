//! Where nagare's threads run when nobody says: the placement rule.
//!
//! A pacing thread keeps its schedule only when nothing else runs on its
//! CPU: on a 2-core host, a receiver's copy or a reader's page faults
//! sharing the core delay trains by milliseconds, and a shaped flow then
//! spends long stretches catching up. So by default:
//!
//! - **Pacing threads take the highest CPUs** the process may use (what
//!   `taskset` or the cgroup allowed at start): pacer `i` runs on the
//!   `i`-th highest. A sender has one pacer; `serve` has one per core.
//! - **Everything else stays off the pacing CPUs**: readers, writers,
//!   reassembly and checksums of a sending process run on the CPUs left.
//! - **Receive threads take the lowest CPUs**, and a receiving process's
//!   other threads avoid the highest CPU, which a sender on the same host
//!   (another process, started without flags) will take. The two thus
//!   meet nowhere, without a claim file or a daemon to coordinate them.
//! - With one CPU there is nothing to choose, and nothing is placed.
//!
//! `--cpu N` overrides the rule for the thread it names, and `--cpu none`
//! turns placement off. The rule itself is pure ([`Layout`]); applying it
//! is [`Placement::apply`].

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use anyhow::{Result, bail};
use nix::sched::{CpuSet, sched_setaffinity};
use nix::unistd::Pid;

/// What `--cpu` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CpuChoice {
    /// The placement rule of this module.
    #[default]
    Auto,
    /// No placement: threads run where the kernel puts them.
    None,
    /// This CPU, for the thread the option names.
    Cpu(usize),
}

impl FromStr for CpuChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(CpuChoice::Auto),
            "none" | "off" => Ok(CpuChoice::None),
            n => n.parse().map(CpuChoice::Cpu).map_err(|_| {
                format!("'{n}' is not a CPU: give a CPU number (0, 1, …), 'auto' or 'none'")
            }),
        }
    }
}

impl fmt::Display for CpuChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuChoice::Auto => f.write_str("auto"),
            CpuChoice::None => f.write_str("none"),
            CpuChoice::Cpu(n) => write!(f, "{n}"),
        }
    }
}

/// A thread's job, which decides its CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Pacing thread `index` (0 for a sender's one).
    Pacer { index: usize },
    /// Receive thread `index` (socket reads).
    Receive { index: usize },
    /// Any other thread of a process whose pacers number `pacers` (zero
    /// for a process that only receives).
    Helper { pacers: usize },
}

/// The placement rule over the CPUs a process may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Allowed CPUs, ascending.
    allowed: Vec<usize>,
}

impl Layout {
    /// The rule over `allowed` CPUs (any order, duplicates ignored).
    pub(crate) fn new(mut allowed: Vec<usize>) -> Layout {
        allowed.sort_unstable();
        allowed.dedup();
        Layout { allowed }
    }

    /// The CPUs this process was allowed as it started.
    pub(crate) fn of_process() -> Layout {
        Layout::new(start_cpus())
    }

    /// The allowed CPUs, ascending.
    pub(crate) fn allowed(&self) -> &[usize] {
        &self.allowed
    }

    /// The CPUs of `role`; empty when the rule places nothing (one CPU).
    pub(crate) fn cpus(&self, role: Role) -> Vec<usize> {
        let n = self.allowed.len();
        if n < 2 {
            return Vec::new();
        }
        let highest = |i: usize| self.allowed[n - 1 - i % n];
        match role {
            Role::Pacer { index } => vec![highest(index)],
            // Never the highest CPU: a sender's pacer takes it.
            Role::Receive { index } => vec![self.allowed[index % (n - 1)]],
            Role::Helper { pacers } => {
                let taken: Vec<usize> = (0..pacers.max(1).min(n)).map(highest).collect();
                let left: Vec<usize> = self
                    .allowed
                    .iter()
                    .copied()
                    .filter(|c| !taken.contains(c))
                    .collect();
                // A serve with a pacer on every CPU: helpers go anywhere.
                if left.is_empty() {
                    self.allowed.clone()
                } else {
                    left
                }
            }
        }
    }
}

/// How a process places its threads: `--cpu` and the rule.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    choice: CpuChoice,
    layout: Layout,
}

impl Placement {
    /// Placement by `choice` over the CPUs this process started with.
    pub(crate) fn new(choice: CpuChoice) -> Placement {
        Placement {
            choice,
            layout: Layout::of_process(),
        }
    }

    /// The CPUs `role` gets: `--cpu N` for the thread it names (pacers in a
    /// sender, receive threads in a receiver), the rule otherwise.
    pub(crate) fn cpus(&self, role: Role) -> Vec<usize> {
        match (self.choice, role) {
            (CpuChoice::None, _) => Vec::new(),
            (CpuChoice::Cpu(c), Role::Pacer { .. } | Role::Receive { .. }) => vec![c],
            // A helper of a pinned thread: off that CPU if there is room.
            (CpuChoice::Cpu(c), Role::Helper { .. }) => {
                let rest: Vec<usize> = self
                    .layout
                    .allowed()
                    .iter()
                    .copied()
                    .filter(|&x| x != c)
                    .collect();
                if rest.is_empty() { Vec::new() } else { rest }
            }
            (CpuChoice::Auto, role) => self.layout.cpus(role),
        }
    }

    /// Puts the calling thread on the CPUs of `role`; returns them (empty
    /// when nothing was placed). A CPU out of range is refused with the
    /// CPUs there are.
    pub(crate) fn apply(&self, role: Role) -> Result<Vec<usize>> {
        let cpus = self.cpus(role);
        if !cpus.is_empty() {
            pin_to(&cpus)?;
        }
        // The first helper placement becomes the process's: threads that
        // reset themselves (tuning::ordinary) go there too, and so do the
        // threads already running.
        if matches!(role, Role::Helper { .. })
            && HELPERS.set(cpus.clone()).is_ok()
            && !cpus.is_empty()
        {
            pin_other_threads(&cpus);
        }
        Ok(cpus)
    }
}

/// The CPUs this process was allowed as it started.
static START_CPUS: OnceLock<CpuSet> = OnceLock::new();

/// The CPUs this process was allowed as it started, as a set (`None` if
/// never noted).
pub(crate) fn start_set() -> Option<CpuSet> {
    START_CPUS.get().copied()
}

/// The CPUs this process was allowed as it started, ascending (all the
/// CPUs there are if that was never noted).
pub(crate) fn start_cpus() -> Vec<usize> {
    match START_CPUS.get() {
        Some(set) => cpus_of(set),
        None => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Notes the CPUs this process may use as it starts (what `taskset` or a
/// cgroup allowed), for the rule and for `tuning::ordinary` to go back
/// to. Call it before any thread is pinned.
pub(crate) fn note_start_cpus() {
    if let Ok(set) = nix::sched::sched_getaffinity(Pid::from_raw(0)) {
        let _ = START_CPUS.set(set);
    }
}

/// Moves every thread of this process but the caller to `cpus`: threads
/// started before placement (the signal handler's) keep off the pacers'
/// CPUs too. A thread that ended meanwhile is skipped.
fn pin_other_threads(cpus: &[usize]) {
    let me = nix::unistd::gettid();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    let mut set = CpuSet::new();
    for &cpu in cpus {
        let _ = set.set(cpu);
    }
    for tid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        if tid != me.as_raw() {
            let _ = sched_setaffinity(Pid::from_raw(tid), &set);
        }
    }
}

/// The helper CPUs of this process, once placed.
static HELPERS: OnceLock<Vec<usize>> = OnceLock::new();

/// The CPUs this process's helper threads were given (`None`: not placed).
pub(crate) fn helper_cpus() -> Option<&'static [usize]> {
    HELPERS.get().map(Vec::as_slice).filter(|c| !c.is_empty())
}

/// Restricts the calling thread to `cpus`.
pub(crate) fn pin_to(cpus: &[usize]) -> Result<()> {
    let count = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = CpuSet::new();
    for &cpu in cpus {
        if set.set(cpu).is_err() {
            bail!("--cpu {cpu} is out of range: this machine has {count} CPUs, numbered from 0");
        }
    }
    // Pid 0 is the calling thread.
    if let Err(e) = sched_setaffinity(Pid::from_raw(0), &set) {
        bail!(
            "cannot run on CPU {}: {e} (this machine has {count} CPUs, numbered from 0; \
             see taskset -p $$ for the ones this process may use)",
            list(cpus)
        );
    }
    Ok(())
}

/// The CPUs the calling thread may run on now.
#[cfg(test)]
pub(crate) fn current_cpus() -> Vec<usize> {
    nix::sched::sched_getaffinity(Pid::from_raw(0)).map_or_else(|_| Vec::new(), |set| cpus_of(&set))
}

/// The CPUs in `set`, ascending.
pub(crate) fn cpus_of(set: &CpuSet) -> Vec<usize> {
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// `0,2-3` form, as /proc's Cpus_allowed_list writes it.
pub(crate) fn list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(n: usize) -> Layout {
        Layout::new((0..n).collect())
    }

    #[test]
    fn a_sender_takes_the_highest_cpu_and_its_helpers_the_rest() {
        let l = layout(2);
        assert_eq!(l.cpus(Role::Pacer { index: 0 }), [1]);
        assert_eq!(l.cpus(Role::Helper { pacers: 1 }), [0]);
        let l = layout(8);
        assert_eq!(l.cpus(Role::Pacer { index: 0 }), [7]);
        assert_eq!(l.cpus(Role::Helper { pacers: 1 }), [0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn a_receiver_never_touches_the_highest_cpu() {
        let l = layout(2);
        for index in 0..4 {
            assert_eq!(l.cpus(Role::Receive { index }), [0]);
        }
        assert_eq!(l.cpus(Role::Helper { pacers: 0 }), [0]);
        let l = layout(4);
        let got: Vec<_> = (0..4)
            .map(|index| l.cpus(Role::Receive { index }))
            .collect();
        assert_eq!(got, [[0], [1], [2], [0]]);
        assert_eq!(l.cpus(Role::Helper { pacers: 0 }), [0, 1, 2]);
    }

    #[test]
    fn pacers_of_serve_take_one_cpu_each_from_the_top() {
        let l = layout(4);
        let got: Vec<_> = (0..4).map(|index| l.cpus(Role::Pacer { index })).collect();
        assert_eq!(got, [[3], [2], [1], [0]]);
        // A pacer on every CPU leaves helpers free to go anywhere.
        assert_eq!(l.cpus(Role::Helper { pacers: 4 }), [0, 1, 2, 3]);
        assert_eq!(l.cpus(Role::Helper { pacers: 2 }), [0, 1]);
    }

    #[test]
    fn the_rule_follows_the_cpus_the_process_was_given() {
        // taskset -c 2,5,9: the highest allowed, not the highest present.
        let l = Layout::new(vec![9, 2, 5, 5]);
        assert_eq!(l.allowed(), [2, 5, 9]);
        assert_eq!(l.cpus(Role::Pacer { index: 0 }), [9]);
        assert_eq!(l.cpus(Role::Receive { index: 1 }), [5]);
        assert_eq!(l.cpus(Role::Helper { pacers: 1 }), [2, 5]);
    }

    #[test]
    fn one_cpu_places_nothing() {
        let l = layout(1);
        assert!(l.cpus(Role::Pacer { index: 0 }).is_empty());
        assert!(l.cpus(Role::Receive { index: 0 }).is_empty());
        assert!(l.cpus(Role::Helper { pacers: 1 }).is_empty());
    }

    #[test]
    fn cpu_option_overrides_and_none_turns_placement_off() {
        let p = Placement {
            choice: CpuChoice::Cpu(0),
            layout: layout(2),
        };
        assert_eq!(p.cpus(Role::Pacer { index: 0 }), [0]);
        assert_eq!(p.cpus(Role::Helper { pacers: 1 }), [1]);
        let p = Placement {
            choice: CpuChoice::None,
            layout: layout(2),
        };
        assert!(p.cpus(Role::Pacer { index: 0 }).is_empty());
        assert!(p.cpus(Role::Helper { pacers: 1 }).is_empty());
    }

    #[test]
    fn cpu_choices_parse_and_print() {
        for (s, c) in [
            ("auto", CpuChoice::Auto),
            ("none", CpuChoice::None),
            ("3", CpuChoice::Cpu(3)),
        ] {
            assert_eq!(s.parse::<CpuChoice>().unwrap(), c);
            assert_eq!(c.to_string(), s);
        }
        let e = "x".parse::<CpuChoice>().unwrap_err();
        assert!(e.contains("'x' is not a CPU"), "{e}");
    }

    #[test]
    fn pinning_to_a_cpu_out_of_range_names_the_count() {
        let e = pin_to(&[1 << 20]).unwrap_err().to_string();
        assert!(e.starts_with("--cpu 1048576 is out of range"), "{e}");
    }

    #[test]
    fn cpu_lists_read_like_proc() {
        assert_eq!(list(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(list(&[3]), "3");
        assert_eq!(list(&[]), "");
    }
}
