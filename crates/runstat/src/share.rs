//! The broker's policy: one budget for a process tree, divided among its live engines by
//! demand, as a memory cgroup's reclaim divides its limit among its processes.
//!
//! Pure: the inputs are the members' samples (from their reports), the resident memory of
//! the tree's processes that cannot be managed, and the budget; the output is one share
//! per member. `uswap run`'s broker runs it every tick (~50 ms) and the simulator runs it
//! over real engines (`uswap sim --tree`), so a policy can be compared before it is used.
//!
//! ```text
//!   available = budget - unmanaged resident memory
//!   floor(m)  = max(MIN_SHARE_BYTES, fixed(m) + WORKING_MIN_BYTES)
//!   spare     = available - sum of floors            (none left: overcommitted, below)
//!   weight(m) = held(m) + PRESSURE_TICKS * pressure(m)
//!   share(m)  = floor(m) + spare * weight(m) / sum of weights      (whole pages)
//! ```
//!
//! - **held**: what the member's engine charges for its own pages now (resident, in
//!   flight, compressed). Shares in proportion to it change nothing by themselves: a
//!   member that fills its share keeps it.
//! - **pressure**: the bytes a member had to bring back (refaults: pages paged out and
//!   needed again) plus the bytes its memory grew by (new pages it touched), per tick,
//!   decayed with a half-life of [`PRESSURE_HALF_LIFE_TICKS`]. A member that refaults or
//!   grows gains weight, so budget moves to it from members whose memory only sits there:
//!   theirs shrink, their engines page out their coldest pages, and if those were needed
//!   after all the refaults give them weight back. Memory cgroups find cold memory by the
//!   page tables' accessed bits, which userfaultfd does not offer; refaults are the
//!   signal a user-space pager has, and the one the kernel's workingset code uses to tell
//!   thrashing from a cold cache. A member nobody's refaults reach keeps a part in
//!   proportion to what it holds against the others' pressure: one refaulting 4 MiB a
//!   tick squeezes an idle one holding 40 MiB of 96 to within 2 MiB of its floor in a
//!   second (the tests below).
//! - **a new member** gets a share at once: until its first report it weighs as much as
//!   the mean member (a fair share). **A member that leaves** (exit, exec, a crash: its
//!   socket closes) is dropped, and its share is the others' at the next rebalance.
//! - **growth waits for memory to be free**: a share cut is given at once (the member's
//!   reclaimer pages out down to it), but what members still hold beyond their new shares
//!   (the broker samples each member's resident set) is withheld from the members whose
//!   shares grow, as a memory cgroup makes a growing process reclaim before it allocates.
//!   So a new process gets its floor at once and the rest of its fair share as the
//!   others page out. A member that already occupies its target is not growing, and gets
//!   it at once.
//! - **the floor**: the anonymous memory a member cannot page out (`fixed`: its
//!   interpreter's heap, the engine's own metadata, memory not adopted yet; file-backed
//!   pages are page cache, charged to no member) plus [`WORKING_MIN_BYTES`] of
//!   room, and at least [`MIN_SHARE_BYTES`]. Below it an engine has nothing left to take
//!   but the page a fault just mapped: the process stops making progress.
//!   The floor follows the least `fixed` of the last [`FIXED_WINDOW_TICKS`] samples: a
//!   burst the shim has not adopted yet is not a floor.
//! - **overcommitted**: when the floors add up to more than the budget left by unmanaged
//!   memory, every member gets exactly its floor (but never more than the budget) and
//!   the tree runs over its budget (the summary says by how much and why). A memory
//!   cgroup would kill a process at that point; uswap keeps every process running and
//!   says so.
//!
//! Invariants (checked by [`Policy::check`] in the tests and the simulator): every share
//! is at least its member's floor (or the whole budget, when the floor is more) and at most
//! the budget; unless overcommitted, the shares add up to at most the budget less the
//! unmanaged memory.

use std::collections::BTreeMap;

/// The smallest share: 4 MiB. An engine needs room for the folios a fault maps and
/// reclaim isolates at once (64 KiB each at `uswap run`'s order 4), its watermarks three
/// folios apart, a compressed pool whose share is above the pool's 64 KiB minimum, and the
/// burst reserve. A process with the shim loaded holds 0.6 MiB of anonymous memory itself
/// (`sleep` under a 256 MiB swap device; 3 MiB under the default 8 GiB, whose slot map is
/// 2 MiB). With 2 MiB, a program that reads 32 MiB of zero pages, writes half of them and
/// forks charged up to 10.9 MiB under 8M, against at most 10 with 4
/// (`run::zero_pages_read_then_written_keep_their_data`).
pub const MIN_SHARE_BYTES: u64 = 4 << 20;

/// Room above a member's fixed memory in its floor: 2 MiB, 32 folios of order 4. It is
/// also what a member's engine keeps from its outside charge (the preload crate's
/// `member::set_room`): under SIGBUS delivery, with 1 MiB the engine took back the pages a
/// system call's retry had just brought in, and the call failed with EFAULT
/// (`run::sigbus_delivery_serves_system_calls_and_vfork_children`).
pub const WORKING_MIN_BYTES: u64 = 2 << 20;

/// How many ticks of pressure weigh as much as held memory: 20 ticks, one second at the
/// broker's 50 ms, so a member refaulting 1 MiB a tick weighs like one holding 20 MiB
/// more.
pub const PRESSURE_TICKS: f64 = 20.0;

/// The pressure's half-life, in ticks (200 ms): long enough that one quiet tick does not
/// undo a rebalance, short enough that a member whose phase ended gives its budget back
/// within a second.
pub const PRESSURE_HALF_LIFE_TICKS: f64 = 4.0;

const PAGE: u64 = 4096;

/// A member's identity (the broker numbers connections).
pub type MemberId = u64;

/// A member's figures at one tick (from its report).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// What its engine charges for its own pages now.
    pub held: u64,
    /// Anonymous memory of the process the engine cannot page out.
    pub fixed: u64,
    /// The program's managed memory, in or out: pages resident plus pages paged out
    /// (bytes of pages, not of their compressed copies, so that paging out changes
    /// nothing here and only new memory makes it grow).
    pub footprint: u64,
    /// Pages refaulted since it started (a counter).
    pub refaults: u64,
    /// Memory its engine holds beside the budget (a pool of its own, `uswap run
    /// --pool-size`): in the resident set the broker measures ([`Policy::set_usage`]), in
    /// no share.
    pub beside: u64,
}

/// Samples of `fixed` a floor looks back over (the least of them counts).
pub const FIXED_WINDOW_TICKS: usize = 4;

/// One member's state.
#[derive(Debug, Clone)]
struct Member {
    share: u64,
    /// Decayed refault and growth bytes per tick.
    pressure: f64,
    last: Option<Sample>,
    /// The last [`FIXED_WINDOW_TICKS`] samples' `fixed`: memory a program touched before
    /// its shim adopted it is `fixed` for a scan period (10 ms), and a floor that
    /// followed such a burst would move budget for nothing.
    fixed: [u64; FIXED_WINDOW_TICKS],
    samples: usize,
    /// The memory it occupies now ([`Policy::set_usage`]; else its sample's held and
    /// fixed).
    usage: Option<u64>,
}

impl Member {
    /// What it occupies of the budget now: as last told less its memory beside the
    /// budget, or as its sample says, or nothing yet.
    fn usage(&self) -> u64 {
        let beside = self.last.map_or(0, |s| s.beside);
        let told = self.usage.map(|u| u.saturating_sub(beside));
        told.or(self.last.map(|s| s.held + s.fixed)).unwrap_or(0)
    }
}

/// What a rebalance decided, besides the shares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The budget.
    pub budget: u64,
    /// The budget less the unmanaged memory.
    pub available: u64,
    /// The floors added up.
    pub floors: u64,
    /// The floors passed `available`: every member got its floor.
    pub overcommitted: bool,
    /// Budget kept from the members whose shares grow until others page it out.
    pub withheld: u64,
}

/// The policy's state: members and their pressure (module essay).
#[derive(Debug, Clone, Default)]
pub struct Policy {
    members: BTreeMap<MemberId, Member>,
    last: Outcome,
}

/// `bytes` rounded up to whole pages.
fn page_up(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE).saturating_mul(PAGE)
}

impl Policy {
    /// A policy with no members.
    pub fn new() -> Policy {
        Policy::default()
    }

    /// Adds a member with no sample yet; the next [`Policy::rebalance`] gives it a share.
    pub fn join(&mut self, id: MemberId) {
        let member = Member {
            share: 0,
            pressure: 0.0,
            last: None,
            fixed: [0; FIXED_WINDOW_TICKS],
            samples: 0,
            usage: None,
        };
        self.members.insert(id, member);
    }

    /// Drops a member; its share is the others' at the next rebalance.
    pub fn leave(&mut self, id: MemberId) {
        self.members.remove(&id);
    }

    /// Members now.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Takes a member's sample of this tick: its pressure is the bytes it refaulted and
    /// grew by since the last one, decayed into the past ticks'.
    pub fn observe(&mut self, id: MemberId, sample: Sample) {
        let Some(member) = self.members.get_mut(&id) else { return };
        let fresh = match member.last {
            Some(last) => {
                let refaulted = sample.refaults.saturating_sub(last.refaults) * PAGE;
                let grown = sample.footprint.saturating_sub(last.footprint);
                (refaulted + grown) as f64
            }
            None => 0.0,
        };
        let keep = 0.5f64.powf(1.0 / PRESSURE_HALF_LIFE_TICKS);
        member.pressure = member.pressure * keep + fresh * (1.0 - keep);
        member.last = Some(sample);
        member.fixed[member.samples % FIXED_WINDOW_TICKS] = sample.fixed;
        member.samples += 1;
    }

    /// What a member occupies now (its resident set, sampled by the broker): the memory
    /// a share taken from it frees only once it is down to that share.
    pub fn set_usage(&mut self, id: MemberId, bytes: u64) {
        if let Some(member) = self.members.get_mut(&id) {
            member.usage = Some(bytes);
        }
    }

    /// A member's floor (module essay).
    pub fn floor(&self, id: MemberId) -> Option<u64> {
        self.members.get(&id).map(floor_of)
    }

    /// A member's share since the last rebalance (0 before its first).
    pub fn share(&self, id: MemberId) -> Option<u64> {
        self.members.get(&id).map(|m| m.share)
    }

    /// Every member's share, by id.
    pub fn shares(&self) -> impl Iterator<Item = (MemberId, u64)> + '_ {
        self.members.iter().map(|(&id, m)| (id, m.share))
    }

    /// What the last rebalance decided.
    pub fn outcome(&self) -> Outcome {
        self.last
    }

    /// Divides `budget` less `unmanaged` among the members (module essay).
    pub fn rebalance(&mut self, budget: u64, unmanaged: u64) -> Outcome {
        let available = budget.saturating_sub(unmanaged);
        let floors: u64 = self.members.values().map(floor_of).sum();
        let overcommitted = floors > available;
        self.last = Outcome { budget, available, floors, overcommitted, withheld: 0 };
        if overcommitted {
            // No share passes the budget, even when one member's floor does.
            let most = budget / PAGE * PAGE;
            for member in self.members.values_mut() {
                member.share = floor_of(member).min(most);
            }
            return self.last;
        }
        let spare = available - floors;
        let weights = self.weights();
        let total: f64 = weights.iter().sum();
        let targets: Vec<u64> = self
            .members
            .values()
            .zip(weights)
            .map(|(member, weight)| {
                let part = (spare as f64 * weight / total) as u64 / PAGE * PAGE;
                floor_of(member) + part.min(spare)
            })
            .collect();
        self.last.withheld = self.grant(&targets);
        self.last
    }

    /// Gives each member its target share, except that shares grow only into memory
    /// nobody occupies: a member whose share was cut pages out at the speed of its
    /// reclaimer, and members given that budget at once would grow into it meanwhile (the
    /// tree went 16 MiB over its budget as a new process grew into a share its parent
    /// still held). What members hold beyond their targets is withheld from the growing
    /// members (those whose target is above their share, or floor, now), in proportion to
    /// what each lacks, until it is paged out.
    ///
    /// A member that occupies its target or more is not growing: its target moves no
    /// memory, and it gets it at once. Withheld from it, its own excess would keep it under
    /// its target for as long as it held that excess, and a tree's only member short of the
    /// whole budget holds it for good: its shim then charges its anonymous memory only,
    /// and its usage, its VmRSS, stays above the target by its file pages.
    /// Returns the budget withheld.
    fn grant(&mut self, targets: &[u64]) -> u64 {
        let excess: u64 = self
            .members
            .values()
            .zip(targets)
            .map(|(member, &target)| member.usage().saturating_sub(target))
            .sum();
        let bases: Vec<u64> = self
            .members
            .values()
            .zip(targets)
            .map(|(member, &target)| {
                if member.usage() >= target {
                    target
                } else {
                    member.share.max(floor_of(member)).min(target)
                }
            })
            .collect();
        let lacking: u64 = targets.iter().zip(&bases).map(|(t, b)| t - b).sum();
        let withheld = excess.min(lacking);
        for ((member, &target), &base) in self.members.values_mut().zip(targets).zip(&bases) {
            let lack = target - base;
            let held_back = if lacking == 0 {
                0
            } else {
                (withheld as f64 * lack as f64 / lacking as f64).ceil() as u64
            };
            member.share = (target - held_back.min(lack)) / PAGE * PAGE;
            member.share = member.share.max(base);
        }
        withheld
    }

    /// Each member's weight, in id order: held bytes plus its pressure; a member with no
    /// sample yet weighs as the mean of those with one (all equal when none has).
    fn weights(&self) -> Vec<f64> {
        let known: Vec<f64> = self
            .members
            .values()
            .filter_map(|m| m.last.map(|s| s.held as f64 + PRESSURE_TICKS * m.pressure))
            .collect();
        let mean =
            if known.is_empty() { 1.0 } else { known.iter().sum::<f64>() / known.len() as f64 };
        self.members
            .values()
            .map(|m| match m.last {
                Some(s) => s.held as f64 + PRESSURE_TICKS * m.pressure,
                None => mean,
            })
            .map(|w| w.max(PAGE as f64))
            .collect()
    }

    /// Checks the invariants of the module essay against the last rebalance.
    ///
    /// # Panics
    /// Naming the first one that does not hold.
    pub fn check(&self) {
        let mut sum = 0u64;
        let most = self.last.budget / PAGE * PAGE;
        for (id, member) in &self.members {
            let floor = floor_of(member).min(most);
            assert!(member.share >= floor, "member {id}: share {} < floor {floor}", member.share);
            assert!(member.share <= most, "member {id}: share {} > budget {most}", member.share);
            assert_eq!(member.share % PAGE, 0, "member {id}: share of a part of a page");
            sum += member.share;
        }
        if !self.last.overcommitted {
            assert!(sum <= self.last.available, "shares {sum} > available {}", self.last.available);
        }
    }
}

fn floor_of(member: &Member) -> u64 {
    let seen = member.samples.min(FIXED_WINDOW_TICKS);
    let fixed = member.fixed[..seen].iter().copied().min().unwrap_or(0);
    page_up(MIN_SHARE_BYTES.max(fixed.saturating_add(WORKING_MIN_BYTES)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn sample(held: u64, refaults: u64) -> Sample {
        Sample { held, fixed: 8 * MIB, footprint: held, refaults, beside: 0 }
    }

    #[test]
    fn a_new_member_gets_a_share_at_once_and_a_fair_one_as_the_others_page_out() {
        let mut p = Policy::new();
        p.join(1);
        p.rebalance(96 * MIB, 0);
        assert_eq!(p.share(1), Some(96 * MIB), "alone: everything");
        p.observe(1, sample(80 * MIB, 0));
        p.join(2);
        p.rebalance(96 * MIB, 0);
        p.check();
        let (a, b) = (p.share(1).unwrap(), p.share(2).unwrap());
        assert!(a < 60 * MIB, "member 1's share is cut at once: {a}");
        assert!(b >= p.floor(2).unwrap() && b < 16 * MIB, "member 2 has its floor: {b}");
        // Member 1 pages out to its share: member 2 grows into what it freed.
        p.set_usage(1, a);
        p.rebalance(96 * MIB, 0);
        p.check();
        let (a, b) = (p.share(1).unwrap(), p.share(2).unwrap());
        assert!(a + b > 95 * MIB, "{a} {b}");
        assert!(b > 30 * MIB && a > 30 * MIB, "a fair share each: {a} {b}");
    }

    /// A lone Python under 64M ran at 75 MiB whenever unmanaged memory was counted at its
    /// join: its share began below the budget, so its shim charged anonymous memory only,
    /// its VmRSS (the broker's usage of a lone member) stayed over the budget by its file
    /// pages, and that excess was withheld from the member itself, tick after tick.
    #[test]
    fn a_member_over_its_target_is_not_kept_under_it_by_its_own_excess() {
        let mut p = Policy::new();
        p.join(1);
        p.rebalance(64 * MIB, 4 * MIB);
        assert_eq!(p.share(1), Some(60 * MIB));
        p.set_usage(1, 75 * MIB);
        let outcome = p.rebalance(64 * MIB, 0);
        p.check();
        assert_eq!(p.share(1), Some(64 * MIB), "the whole budget");
        assert_eq!(outcome.withheld, 0);
        // A member growing beside one over its target still waits for it to page out.
        p.observe(1, sample(60 * MIB, 0));
        p.join(2);
        p.rebalance(64 * MIB, 0);
        p.check();
        let (a, b) = (p.share(1).unwrap(), p.share(2).unwrap());
        assert!(p.outcome().withheld > 0 && b < 64 * MIB - a, "{a} {b} {:?}", p.outcome());
    }

    /// Under `uswap run --pool-size` each member's pool lies beside the budget but in the
    /// resident set the broker measures. Counted as usage, a member's pool was an excess
    /// over its share that the policy withheld from the members growing beside it.
    #[test]
    fn a_pool_beside_the_budget_is_not_withheld_from_a_growing_member() {
        let pool = 40 * MIB;
        // Member 1 holds what it is given, with `beside` bytes of pool measured with it;
        // member 2 grows. Returns the withheld bytes and member 2's share, tick by tick.
        let run = |measured_pool: u64, beside: u64| {
            let mut p = Policy::new();
            for id in [1, 2] {
                p.join(id);
            }
            p.rebalance(64 * MIB, 0);
            let mut seen = Vec::new();
            for tick in 1..=6 {
                let (a, b) = (p.share(1).unwrap(), p.share(2).unwrap());
                p.observe(1, Sample { beside, ..holding(96 * MIB, a, 0) });
                p.set_usage(1, a + measured_pool);
                p.observe(2, holding(tick * 16 * MIB, b, tick * 1024));
                p.set_usage(2, b - 8 * MIB);
                let outcome = p.rebalance(64 * MIB, 0);
                p.check();
                seen.push((outcome.withheld, p.share(2).unwrap()));
            }
            seen
        };
        let without_pool = run(0, 0);
        assert_eq!(run(pool, pool), without_pool, "the pool beside changes nothing");
        // Counted as usage, the pool is withheld tick after tick: the growing member stays
        // where it started while the other pages out.
        let counted = run(pool, 0);
        let last = |seen: &[(u64, u64)]| seen.last().unwrap().1;
        assert!(last(&counted) + 16 * MIB < last(&without_pool), "{counted:?} {without_pool:?}");
    }

    /// A member whose memory is `footprint` bytes (besides 8 MiB fixed) under `share`:
    /// what does not fit is paged out.
    fn holding(footprint: u64, share: u64, refaults: u64) -> Sample {
        let held = footprint.min(share - 8 * MIB);
        Sample { held, fixed: 8 * MIB, footprint, refaults, beside: 0 }
    }

    #[test]
    fn budget_moves_from_cold_memory_to_a_member_that_refaults() {
        let mut p = Policy::new();
        for id in [1, 2] {
            p.join(id);
            p.observe(id, sample(40 * MIB, 0));
        }
        p.rebalance(96 * MIB, 0);
        let start = p.share(2).unwrap();
        // Member 2 works over 120 MiB and refaults 4 MiB a tick; member 1 holds 40 MiB it
        // never touches.
        let mut refaults = 0;
        for tick in 1..=20 {
            refaults += 1024;
            p.observe(1, holding(40 * MIB, p.share(1).unwrap(), 0));
            p.observe(2, holding(120 * MIB, p.share(2).unwrap(), refaults));
            p.rebalance(96 * MIB, 0);
            p.check();
            if tick == 2 {
                assert!(p.share(2).unwrap() > start + 4 * MIB, "within two ticks");
            }
        }
        let (cold, floor) = (p.share(1).unwrap(), p.floor(1).unwrap());
        assert!(cold <= floor + 2 * MIB, "the cold member is near its floor: {cold} {floor}");
        // Member 1 needs its pages again (refaults) and member 2 is done: within a second
        // member 1 is back above half of what it held.
        let mut back = 0;
        for _ in 0..20 {
            back += 512;
            p.observe(1, holding(40 * MIB, p.share(1).unwrap(), back));
            p.observe(2, holding(120 * MIB, p.share(2).unwrap(), refaults));
            p.rebalance(96 * MIB, 0);
            p.check();
        }
        assert!(p.share(1).unwrap() > 28 * MIB, "{:?}", p.share(1));
    }

    #[test]
    fn a_leaving_members_share_returns_and_unmanaged_memory_is_taken_off() {
        let mut p = Policy::new();
        for id in [1, 2, 3] {
            p.join(id);
            p.observe(id, sample(20 * MIB, 0));
        }
        p.rebalance(96 * MIB, 0);
        p.leave(2);
        p.rebalance(96 * MIB, 0);
        assert_eq!(p.shares().map(|(_, s)| s).sum::<u64>(), 96 * MIB);
        p.rebalance(96 * MIB, 30 * MIB);
        p.check();
        assert_eq!(p.shares().map(|(_, s)| s).sum::<u64>(), 66 * MIB);
    }

    #[test]
    fn more_floors_than_budget_gives_each_its_floor() {
        let mut p = Policy::new();
        for id in 0..10 {
            p.join(id);
            p.observe(
                id,
                Sample { held: MIB, fixed: 12 * MIB, footprint: MIB, refaults: 0, beside: 0 },
            );
        }
        let outcome = p.rebalance(96 * MIB, 0);
        p.check();
        assert!(outcome.overcommitted);
        let floor = 12 * MIB + WORKING_MIN_BYTES;
        assert_eq!(outcome.floors, 10 * floor);
        assert!(p.shares().all(|(_, s)| s == floor));
        let outcome = p.rebalance(1 << 40, 0);
        assert!(!outcome.overcommitted);
    }

    /// Regression: a C program under 8M whose writes before adoption made one report's
    /// `fixed` 7 MiB got a floor of 9 MiB, a share above the whole budget, and its engine
    /// charged 9.25 MiB (cli `run::zero_pages_read_then_written_keep_their_data`).
    #[test]
    fn a_burst_is_no_floor_and_no_share_passes_the_budget() {
        let mut p = Policy::new();
        p.join(1);
        for fixed in [2 * MIB, 2 * MIB, 7 * MIB, 2 * MIB] {
            p.observe(
                1,
                Sample { held: 5 * MIB, fixed, footprint: 5 * MIB, refaults: 0, beside: 0 },
            );
            p.rebalance(8 * MIB, 0);
            p.check();
            let floor = MIN_SHARE_BYTES.max(2 * MIB + WORKING_MIN_BYTES);
            assert_eq!(p.floor(1), Some(floor), "the least fixed of the window");
            assert_eq!(p.share(1), Some(8 * MIB));
        }
        for _ in 0..FIXED_WINDOW_TICKS {
            p.observe(
                1,
                Sample { held: MIB, fixed: 8 * MIB, footprint: MIB, refaults: 0, beside: 0 },
            );
        }
        let outcome = p.rebalance(8 * MIB, 0);
        p.check();
        assert!(outcome.overcommitted, "a floor above the budget");
        assert_eq!(p.share(1), Some(8 * MIB), "but never more than the budget");
        p.rebalance(8 * MIB, 32 * MIB);
        p.check();
        assert_eq!(p.share(1), Some(8 * MIB), "unmanaged memory does not take its floor");
    }

    #[test]
    fn growth_counts_as_pressure() {
        let mut p = Policy::new();
        for id in [1, 2] {
            p.join(id);
            p.observe(id, sample(40 * MIB, 0));
        }
        p.rebalance(96 * MIB, 0);
        for tick in 1..=10u64 {
            p.observe(1, holding(40 * MIB, p.share(1).unwrap(), 0));
            // Member 2 touches 4 MiB of new memory a tick; what does not fit goes out.
            p.observe(2, holding(40 * MIB + tick * 4 * MIB, p.share(2).unwrap(), 0));
            p.rebalance(96 * MIB, 0);
            p.check();
        }
        assert!(p.share(2).unwrap() > p.share(1).unwrap() + 20 * MIB);
    }

    #[derive(Debug, Clone)]
    enum Step {
        Join,
        Leave(usize),
        Observe(usize, u64, u64, u64),
        Rebalance(u64, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Join),
            (0..8usize).prop_map(Step::Leave),
            (0..8usize, 0..200u64, 0..40u64, 0..100_000u64)
                .prop_map(|(i, held, fixed, refaults)| Step::Observe(i, held, fixed, refaults)),
            (1..512u64, 0..64u64)
                .prop_map(|(budget, unmanaged)| Step::Rebalance(budget, unmanaged)),
        ]
    }

    proptest! {
        #[test]
        fn shares_keep_floors_and_the_budget(steps in proptest::collection::vec(step(), 1..200)) {
            let mut p = Policy::new();
            let mut ids: Vec<MemberId> = Vec::new();
            let mut next = 0;
            let mut refaults = BTreeMap::new();
            for s in steps {
                match s {
                    Step::Join => { p.join(next); ids.push(next); next += 1; }
                    Step::Leave(i) if !ids.is_empty() => { p.leave(ids.remove(i % ids.len())); }
                    Step::Observe(i, held, fixed, more) if !ids.is_empty() => {
                        let id = ids[i % ids.len()];
                        let total = refaults.entry(id).or_insert(0u64);
                        *total += more;
                        let sample = Sample { held: held * MIB, fixed: fixed * MIB,
                            footprint: held * MIB, refaults: *total, beside: 0 };
                        p.observe(id, sample);
                    }
                    Step::Rebalance(budget, unmanaged) => {
                        p.rebalance(budget * MIB, unmanaged * MIB);
                        p.check();
                    }
                    _ => {}
                }
            }
        }
    }
}
