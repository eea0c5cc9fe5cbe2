//! Page contents the checker can regenerate: a page's bytes are a pure function of
//! (run seed, address, version), so the model keeps one small [`Version`] per page and
//! compares all 4096 bytes on every read.
//!
//! ```text
//!   kind    bytes
//!   Zero    4096 zero bytes (fresh memory, or a program writing zeros: the zero map's case)
//!   Heap    workload::content (zero lines, small ints, pointers, text, some random):
//!           compresses like a real heap, about 2.5x
//!   Random  full-entropy bytes (an incompressible burst: the pool must refuse it)
//!   every non-zero page starts with a 16-byte stamp: address, then version | kind | magic
//! ```
//!
//! The stamp lets a wrong-data failure say *which* page and version was read instead (a
//! neighbour's page, an older version of the same page), which is usually the whole
//! diagnosis.

use engine::PAGE_SIZE;
use workload::rng::{hash3, SplitMix64};

/// What a page's bytes are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// All zero.
    Zero,
    /// Compressible, heap-like.
    Heap,
    /// Incompressible.
    Random,
}

/// One written state of a page: the page's `n`th write of the run, of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    /// A run-wide write counter (0: never written, or dropped).
    pub n: u32,
    /// The kind of bytes.
    pub kind: Kind,
}

impl Version {
    /// Fresh or dropped memory: reads as zeros.
    pub const ZERO: Version = Version { n: 0, kind: Kind::Zero };
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Zero if self.n == 0 => write!(f, "zero (never written)"),
            kind => write!(f, "v{} ({kind:?})", self.n),
        }
    }
}

const STAMP_MAGIC: u64 = 0x5e1f;

fn kind_code(kind: Kind) -> u64 {
    match kind {
        Kind::Zero => 0,
        Kind::Heap => 1,
        Kind::Random => 2,
    }
}

/// Writes the bytes of `version` of the page at `addr` in run `seed` into `out`.
///
/// Context: pure; never allocates.
pub fn fill(seed: u64, addr: u64, version: Version, out: &mut [u8; PAGE_SIZE]) {
    match version.kind {
        Kind::Zero => {
            out.fill(0);
            return;
        }
        Kind::Heap => {
            workload::content::fill_page(seed, addr / PAGE_SIZE as u64, version.n.max(1), out);
        }
        Kind::Random => {
            let mut rng = SplitMix64::new(hash3(seed, addr, u64::from(version.n)));
            for word in out.chunks_exact_mut(8) {
                word.copy_from_slice(&rng.next_u64().to_le_bytes());
            }
        }
    }
    let tag = u64::from(version.n) | (kind_code(version.kind) << 32) | (STAMP_MAGIC << 48);
    out[..8].copy_from_slice(&addr.to_le_bytes());
    out[8..16].copy_from_slice(&tag.to_le_bytes());
}

/// The (address, version number) a page's stamp claims, if it carries one.
pub fn identify(data: &[u8]) -> Option<(u64, u32)> {
    if data.len() < 16 {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().unwrap_or([0; 8]));
    let tag = word(8);
    (tag >> 48 == STAMP_MAGIC).then_some((word(0), tag as u32))
}

/// Describes what `data` looks like, for a failure message.
pub fn describe(data: &[u8]) -> String {
    if data.iter().all(|&b| b == 0) {
        return "all zeros".into();
    }
    match identify(data) {
        Some((addr, n)) => format!("page {addr:#x} v{n}"),
        None => "unstamped bytes (torn or corrupt)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contents_are_pure_and_stamped() {
        let (mut a, mut b) = ([0u8; PAGE_SIZE], [0u8; PAGE_SIZE]);
        for kind in [Kind::Heap, Kind::Random] {
            let v = Version { n: 7, kind };
            fill(3, 0x1000, v, &mut a);
            fill(3, 0x1000, v, &mut b);
            assert_eq!(a, b);
            assert_eq!(identify(&a), Some((0x1000, 7)));
            fill(3, 0x1000, Version { n: 8, kind }, &mut b);
            assert_ne!(a, b, "another version differs");
        }
        fill(3, 0x1000, Version { n: 9, kind: Kind::Zero }, &mut a);
        assert!(a.iter().all(|&x| x == 0));
        assert_eq!(describe(&a), "all zeros");
        assert_eq!(identify(&[0u8; 8]), None);
    }
}
