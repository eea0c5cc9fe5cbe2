//! Fault sites, switched on per run from the seed (FoundationDB's BUGGIFY).
//!
//! A *site* is a place where the simulated world can misbehave: a backend read or write, a
//! discard, the page source refusing a take or a map while "the address space changes",
//! a page's contents being incompressible. For each run, every site is *activated* with a
//! probability drawn from the seed (a quarter of sites, as FoundationDB does), and an active
//! site *fires* on each pass with its own probability, also drawn from the seed. All draws
//! come from the run's `faults` stream, taken in the order the one running simulated thread
//! reaches the sites, so a seed replays the same faults at the same moments.
//!
//! | site | where | what the engine must do |
//! |---|---|---|
//! | `read_fail` | backend read | fail the swap-in: poison the pages, never map them |
//! | `read_corrupt` | backend read (one bit flips) | the checksum catches it: as above |
//! | `write_fail` | backend write | keep the data (map it back), count `pageout_fail` |
//! | `write_torn` | backend write (a prefix lands) | silent: the checksum fails the read later |
//! | `write_lost` | backend write (nothing lands) | silent: as above |
//! | `discard_fail` | backend discard | nothing: freed slots are written before read |
//! | `take_retry` | page source take | abandon the page-out, the folio stays resident |
//! | `map_retry` | page source map | the fault retries; the data stays in swap |
//! | `incompressible` | the content of a written page | the pool stores it raw or refuses it |
//! | `compress_fail` | the pool's compressor (zswap's hook) | stored raw or refused, never lost |
//! | `pool_alloc_fail` | the pool allocator (zpool's hook) | the page goes to the device |
//! | `protect_lost` | a zero page mapped write-protected: a write lands first | nothing lost |
//! | `take_staged` | page source take: stops part way, keeps its first pages | own them, staged |
//!
//! Torn, lost and corrupt I/O is silent by nature: it can only be caught by a checksum. A
//! run that activates any of them turns the swap device's checksums on (and the checker
//! then expects a loud loss, never wrong data).

use crate::rng::SimRng;
use std::sync::atomic::{AtomicU64, Ordering};

/// A place where the simulated world can misbehave (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// A backend read returns an error.
    ReadFail,
    /// A backend read returns data with one bit flipped.
    ReadCorrupt,
    /// A backend write returns an error and writes nothing.
    WriteFail,
    /// A backend write writes only a prefix and reports success.
    WriteTorn,
    /// A backend write writes nothing and reports success.
    WriteLost,
    /// A backend discard fails.
    DiscardFail,
    /// The page source refuses a take (`SourceError::Retry`: fork or mremap in progress).
    TakeRetry,
    /// The page source refuses a map (`SourceError::Retry`).
    MapRetry,
    /// A page written by the program is full-entropy data (an incompressible burst).
    Incompressible,
    /// The pool's compressor fails on a page.
    CompressFail,
    /// The pool allocator fails to allocate a zspage.
    PoolAllocFail,
    /// A zero page mapped write-protected is left unprotected, as when another thread
    /// writes it between userfaultfd's map and its protection: the write is unseen.
    ProtectLost,
    /// The page source's take stops part way and cannot put back the pages it moved (an
    /// event arrived meanwhile): it keeps them, and says `SourceError::Staged`.
    TakeStaged,
}

/// Number of sites.
pub const NR_SITES: usize = 13;

/// The sites of the first draw; the pool's sites are drawn after every other option (so a
/// seed's world without them does not depend on them), and the sites after
/// [`POOL_DRAW_END`] after those.
const FIRST_DRAW: usize = 9;
const POOL_DRAW_END: usize = 11;

impl Site {
    /// Every site, in declaration order.
    pub const ALL: [Site; NR_SITES] = [
        Site::ReadFail,
        Site::ReadCorrupt,
        Site::WriteFail,
        Site::WriteTorn,
        Site::WriteLost,
        Site::DiscardFail,
        Site::TakeRetry,
        Site::MapRetry,
        Site::Incompressible,
        Site::CompressFail,
        Site::PoolAllocFail,
        Site::ProtectLost,
        Site::TakeStaged,
    ];

    /// The site's name, as printed and as accepted by `--fault`.
    pub fn name(self) -> &'static str {
        match self {
            Site::ReadFail => "read_fail",
            Site::ReadCorrupt => "read_corrupt",
            Site::WriteFail => "write_fail",
            Site::WriteTorn => "write_torn",
            Site::WriteLost => "write_lost",
            Site::DiscardFail => "discard_fail",
            Site::TakeRetry => "take_retry",
            Site::MapRetry => "map_retry",
            Site::Incompressible => "incompressible",
            Site::CompressFail => "compress_fail",
            Site::PoolAllocFail => "pool_alloc_fail",
            Site::ProtectLost => "protect_lost",
            Site::TakeStaged => "take_staged",
        }
    }

    /// The site named `name`.
    pub fn from_name(name: &str) -> Option<Site> {
        Site::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Is this fault silent, so that only a checksum can catch it?
    pub fn is_silent(self) -> bool {
        matches!(self, Site::ReadCorrupt | Site::WriteTorn | Site::WriteLost)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Chance out of 100 that a site is active in a swarm run (FoundationDB: 25%).
const ACTIVATE_PERCENT: u32 = 25;

/// Fire probabilities an active site draws from, in parts per million: rare (0.1%),
/// occasional (1%), frequent (5%), and FoundationDB's 25% for the sites whose firing costs
/// no data (retries, incompressible pages). I/O errors lose pages loudly, so they stay at
/// most 5%: a run that loses everything checks nothing.
const FIRE_PPM_IO: [u32; 3] = [1_000, 10_000, 50_000];
const FIRE_PPM_CHEAP: [u32; 4] = [1_000, 10_000, 50_000, 250_000];

/// Which sites are active in a run, how often each fires, and how often each fired.
#[derive(Debug)]
pub struct Faults {
    /// Fire probability per site in ppm; 0 = inactive.
    fire_ppm: [u32; NR_SITES],
    fired: [AtomicU64; NR_SITES],
}

impl Clone for Faults {
    fn clone(&self) -> Self {
        Faults::with_ppm(self.fire_ppm)
    }
}

impl Faults {
    /// No site active.
    pub fn none() -> Faults {
        Faults::with_ppm([0; NR_SITES])
    }

    /// Sites active with the given fire probabilities (ppm, 0 = inactive).
    pub fn with_ppm(fire_ppm: [u32; NR_SITES]) -> Faults {
        Faults { fire_ppm, fired: Default::default() }
    }

    /// A swarm draw of the first sites: each active with probability 1/4, firing at a
    /// drawn rate. [`Faults::swarm_pool`] draws the rest.
    pub fn swarm(rng: &mut SimRng) -> Faults {
        let mut faults = Faults::none();
        for site in &Site::ALL[..FIRST_DRAW] {
            faults.draw(*site, rng);
        }
        faults
    }

    /// The swarm draw of the pool's sites.
    pub fn swarm_pool(&mut self, rng: &mut SimRng) {
        for site in &Site::ALL[FIRST_DRAW..POOL_DRAW_END] {
            self.draw(*site, rng);
        }
    }

    /// The swarm draw of the sites added last (drawn after every option).
    pub fn swarm_last(&mut self, rng: &mut SimRng) {
        for site in &Site::ALL[POOL_DRAW_END..] {
            self.draw(*site, rng);
        }
    }

    fn draw(&mut self, site: Site, rng: &mut SimRng) {
        if rng.percent(ACTIVATE_PERCENT) {
            let choices: &[u32] = match site {
                Site::TakeRetry
                | Site::MapRetry
                | Site::Incompressible
                | Site::CompressFail
                | Site::PoolAllocFail
                | Site::ProtectLost
                | Site::TakeStaged => &FIRE_PPM_CHEAP,
                _ => &FIRE_PPM_IO,
            };
            self.fire_ppm[site.index()] = rng.pick(choices);
        }
    }

    /// Sets one site's fire probability (0 turns it off).
    pub fn set(&mut self, site: Site, ppm: u32) {
        self.fire_ppm[site.index()] = ppm.min(1_000_000);
    }

    /// The site's fire probability in ppm (0 when inactive).
    pub fn ppm(&self, site: Site) -> u32 {
        self.fire_ppm[site.index()]
    }

    /// Is the site active?
    pub fn active(&self, site: Site) -> bool {
        self.ppm(site) > 0
    }

    /// Is any silent fault active (so the device needs checksums)?
    pub fn any_silent(&self) -> bool {
        Site::ALL.into_iter().any(|s| s.is_silent() && self.active(s))
    }

    /// Does the site fire this time? Draws from `rng` only when the site is active, so an
    /// inactive site leaves the stream untouched. Counts the firing.
    pub fn fires(&self, site: Site, rng: &mut SimRng) -> bool {
        let ppm = self.ppm(site);
        if ppm == 0 || !rng.chance_ppm(ppm) {
            return false;
        }
        self.fired[site.index()].fetch_add(1, Ordering::Relaxed);
        true
    }

    /// How many times the site fired.
    pub fn fired(&self, site: Site) -> u64 {
        self.fired[site.index()].load(Ordering::Relaxed)
    }

    /// The active sites as `name=rate%` words, for reports (`none` if none).
    pub fn describe(&self) -> String {
        let words: Vec<String> = Site::ALL
            .into_iter()
            .filter(|s| self.active(*s))
            .map(|s| format!("{}={}%", s.name(), f64::from(self.ppm(s)) / 10_000.0))
            .collect();
        if words.is_empty() {
            "none".into()
        } else {
            words.join(",")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for site in Site::ALL {
            assert_eq!(Site::from_name(site.name()), Some(site));
        }
        assert_eq!(Site::from_name("nope"), None);
        assert_eq!(Site::ALL.len(), NR_SITES);
    }

    #[test]
    fn an_inactive_site_never_fires_nor_draws() {
        let faults = Faults::none();
        let mut rng = SimRng::stream(1, "f");
        let before = rng.clone().next_u64();
        assert!(!faults.fires(Site::ReadFail, &mut rng));
        assert_eq!(rng.next_u64(), before, "no draw for an inactive site");
    }

    #[test]
    fn swarm_activates_about_a_quarter_of_sites() {
        let mut active = 0;
        for seed in 0..400 {
            let mut rng = SimRng::stream(seed, "faults");
            let mut faults = Faults::swarm(&mut rng);
            faults.swarm_pool(&mut rng);
            active += Site::ALL.into_iter().filter(|s| faults.active(*s)).count();
        }
        let share = active as f64 / (400.0 * NR_SITES as f64);
        assert!((0.2..0.3).contains(&share), "share {share}");
    }

    #[test]
    fn silent_sites_need_checksums() {
        let mut faults = Faults::none();
        assert!(!faults.any_silent());
        faults.set(Site::WriteFail, 10);
        assert!(!faults.any_silent());
        faults.set(Site::WriteTorn, 10);
        assert!(faults.any_silent());
        assert!(faults.describe().contains("write_torn"));
    }
}
