//! The zero map: one bit per swap slot, set when the page stored there was all zero, so
//! nothing is stored and a swap-in reads nothing (mm/swapfile.c's `zeromap`,
//! from the series "store zero pages to be swapped out in a bitmap").
//!
//! Rules (each one a kernel bug or lesson):
//! - the zero check reads the *last* word of a page first: pages are often zero at the front
//!   with data at the end, so this rejects most non-zero pages after one load;
//! - a bit is cleared *before* a non-zero write of the same slot, otherwise a stale bit from
//!   an earlier use of the slot would make a later swap-in read zeros;
//! - bits are set and cleared with atomic read-modify-writes per word, never a plain store of
//!   a whole word, so neighbouring slots updated concurrently keep their bits;
//! - a large folio whose slots do not all share one zero status is *mixed*: a caller asks
//!   [`ZeroMap::batch`] before reading a range as one unit.
//!
//! Memory: 1 bit per slot = 32 KiB per GiB of swap.

use crate::sync::{AtomicU64, Ordering};

/// One bit per slot of a swap device.
#[derive(Debug)]
pub struct ZeroMap {
    words: Box<[AtomicU64]>,
    nr_slots: u64,
    nr_set: AtomicU64,
}

fn word_bit(slot: u64) -> (usize, u64) {
    ((slot / 64) as usize, 1u64 << (slot % 64))
}

impl ZeroMap {
    /// A map for `nr_slots` slots, all clear.
    ///
    /// Context: allocates `nr_slots / 8` bytes.
    pub fn new(nr_slots: u64) -> Self {
        let words = nr_slots.div_ceil(64) as usize;
        ZeroMap {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            nr_slots,
            nr_set: AtomicU64::new(0),
        }
    }

    fn check_range(&self, slot: u64, nr: u64) {
        assert!(slot.checked_add(nr).is_some_and(|end| end <= self.nr_slots), "slots out of range");
    }

    /// Sets the bits of `nr` slots from `slot`.
    pub fn set(&self, slot: u64, nr: u64) {
        self.check_range(slot, nr);
        for s in slot..slot + nr {
            let (word, bit) = word_bit(s);
            if self.words[word].fetch_or(bit, Ordering::AcqRel) & bit == 0 {
                self.nr_set.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Clears the bits of `nr` slots from `slot`.
    pub fn clear(&self, slot: u64, nr: u64) {
        self.check_range(slot, nr);
        for s in slot..slot + nr {
            let (word, bit) = word_bit(s);
            if self.words[word].fetch_and(!bit, Ordering::AcqRel) & bit != 0 {
                self.nr_set.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Is the slot's bit set?
    pub fn test(&self, slot: u64) -> bool {
        self.check_range(slot, 1);
        let (word, bit) = word_bit(slot);
        self.words[word].load(Ordering::Acquire) & bit != 0
    }

    /// How many of the `nr` slots from `slot` share the first slot's status (the kernel's
    /// `swap_zeromap_batch`), and that status.
    pub fn batch(&self, slot: u64, nr: u64) -> (u64, bool) {
        self.check_range(slot, nr.max(1));
        let first = self.test(slot);
        let same = (slot..slot + nr).take_while(|s| self.test(*s) == first).count() as u64;
        (same, first)
    }

    /// Slots whose bit is set.
    pub fn count(&self) -> u64 {
        self.nr_set.load(Ordering::Relaxed)
    }

    /// Recounts the bits and checks the cached count.
    ///
    /// # Panics
    /// If the count disagrees with the bits.
    pub fn check_invariants(&self) {
        let bits: u64 =
            self.words.iter().map(|w| u64::from(w.load(Ordering::Relaxed).count_ones())).sum();
        assert_eq!(bits, self.count(), "zero map count drifted");
    }
}

/// Is the page (or folio) all zero? Reads the last word first (see the module docs).
pub fn is_zero_filled(data: &[u8]) -> bool {
    let Some(last) = data.len().checked_sub(8) else {
        return data.iter().all(|b| *b == 0);
    };
    if data[last..].iter().any(|b| *b != 0) {
        return false;
    }
    // u64 chunks: the compiler vectorises the OR-reduction.
    let (chunks, rest) = data.as_chunks::<8>();
    chunks.iter().fold(0u64, |acc, c| acc | u64::from_ne_bytes(*c)) == 0
        && rest.iter().all(|b| *b == 0)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn zero_check_sees_the_last_byte_and_the_first() {
        let mut page = vec![0u8; 4096];
        assert!(is_zero_filled(&page));
        page[4095] = 1;
        assert!(!is_zero_filled(&page));
        page[4095] = 0;
        page[0] = 1;
        assert!(!is_zero_filled(&page));
        page[0] = 0;
        page[2049] = 7;
        assert!(!is_zero_filled(&page));
        assert!(is_zero_filled(&[0u8; 3]));
        assert!(!is_zero_filled(&[0, 1, 0]));
    }

    #[test]
    fn bits_count_and_batch() {
        let map = ZeroMap::new(200);
        map.set(60, 8);
        map.set(62, 1); // already set: not counted twice
        assert_eq!(map.count(), 8);
        assert_eq!(map.batch(60, 16), (8, true));
        assert_eq!(map.batch(56, 8), (4, false));
        map.clear(64, 4);
        assert_eq!(map.count(), 4);
        assert!(map.test(63) && !map.test(64));
        map.check_invariants();
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn out_of_range_is_a_bug() {
        ZeroMap::new(10).set(9, 2);
    }

    #[test]
    fn concurrent_neighbours_keep_their_bits() {
        let map = std::sync::Arc::new(ZeroMap::new(128));
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let map = map.clone();
                std::thread::spawn(move || {
                    for round in 0..1000 {
                        for s in (t..128).step_by(2) {
                            if round % 2 == 0 {
                                map.set(s, 1);
                            } else {
                                map.clear(s, 1);
                            }
                        }
                    }
                    for s in (t..128).step_by(2) {
                        map.set(s, 1);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(map.count(), 128);
        map.check_invariants();
    }
}
