//! The crypt layer: every page written to the wrapped backend is sealed with AES-256-GCM
//! under a key made for this run, and opened (authenticated) on every read.
//!
//! Why: the swap file holds program memory. Without this layer a secret the program keeps
//! in memory lands in the file in the clear as soon as its page is written out, and stays
//! in the file system's free blocks after the file is gone. With it the file (or a far
//! tier's servers) holds only ciphertext, useless without a key that exists nowhere but in
//! this process's memory.
//!
//! ```text
//!   key        32 bytes from getrandom(2) at setup, wiped once expanded; only the
//!              expanded key is kept; never written, logged or handed out
//!   nonce      96 bits = 4 zero bytes ‖ the 64-bit write counter (little endian)
//!   counter    one global AtomicU64, +1 per page sealed, starting at 1: a nonce is never
//!              used twice under the key (2^64 page writes is 70 ZiB)
//!   AAD        the slot number (u64, little endian): a page read back from another slot
//!              fails to authenticate, whatever the storage did
//!   per slot   a Seal { counter, tag } of 24 bytes in memory (counter 0: never written,
//!              or discarded since); ciphertext is exactly a page: nothing grows on disk
//! ```
//!
//! Metadata lives in chunks of [`CHUNK_SLOTS`] slots (one 2 MiB cluster, 12 KiB of seals),
//! allocated on the first write into the chunk: an 8 GiB device has 2M slots, whose dense
//! table would be 48 MiB; here a device costs 8 bytes per chunk (4,096 chunks: 32 KiB)
//! plus 12 KiB per chunk ever written. A chunk then lives until the layer is dropped, so
//! the metadata is bounded by the swap's high-water mark: 24 bytes per 4 KiB written, 0.6%.
//!
//! Reads: a slot whose counter is 0 reads as zeros without asking the inner backend's bytes
//! anything (as every backend's never-written slot does). Otherwise the inner backend's
//! bytes are opened in place with the recorded counter and tag; a page that does not
//! authenticate (tampered ciphertext, a tag that does not match, a page of another slot, an
//! older write of this slot, a torn or lost write) is [`Error::Authentication`], counted in
//! [`CryptStats::auth_failures`]: the engine poisons the page (SIGBUS on access), never maps
//! what was read.
//!
//! Writes: the seal (counter, tag) is recorded *before* the inner write, as the checksum
//! layer records its crc: a write that fails, tears or is lost leaves a seal the old bytes
//! do not open.
//!
//! With the checksum layer: authentication subsumes the crc32c (a GCM tag is a 128-bit
//! MAC over the ciphertext, the slot and the counter, where the crc is 32 bits over the
//! bytes alone), so the engine stacks one or the other, never both: with encryption on,
//! `checksums` adds nothing (engine `make_backend`).
//!
//! Cipher: AES-256-GCM from `ring` (BoringSSL's assembly: AES-NI with VAES and an
//! aggregated PCLMULQDQ GHASH, picked at run time). `uswap bench crypt` measured three
//! candidates side by side on a 2-vCPU KVM guest (AMD EPYC with AES-NI, VAES, PCLMULQDQ),
//! seal + open of one 4 KiB page: ring's AES-256-GCM about 1.0 µs, RustCrypto's
//! `aes-gcm` 3.7 µs, RustCrypto's `chacha20poly1305` 8.6 µs (docs/benchmarks.md). ChaCha
//! would win only on a CPU without AES instructions, which this project does not target.
//! ring allocates nothing in this API (its `alloc` feature is off) and its C and assembly
//! call no `malloc` (none in its sources), so the shim's threads stay off glibc's heap.
//! AES-GCM's one hazard, a repeated nonce, is excluded by the counter above.
//!
//! Concurrency: a slot's seal is three atomics; the caller never reads and writes the same
//! slot at once (the swap cache serialises that), and a read that follows a write of the
//! slot is ordered after it by the engine's own locks, so relaxed accesses suffice. The
//! counter is one `fetch_add` per page.

use crate::{check_range, check_request, Backend, Error, ForkStep, PAGE_SIZE};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

/// Slots per metadata chunk: one swap cluster (`slots::SWAPFILE_CLUSTER`).
pub const CHUNK_SLOTS: usize = 512;

/// Bytes of one slot's seal: the counter and the 16-byte tag.
pub const SEAL_BYTES: usize = 24;

counters::table! {
    /// The live counters of one crypt layer.
    pub(crate) struct CryptCounters;
    /// Counters of one crypt layer (in the stats file as `crypt_*`).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct CryptStats {
        prefix "crypt_";
        counters {
            /// Pages sealed (encrypted) on their way to the inner backend.
            sealed_pages,
            /// Pages opened (decrypted and authenticated) on read.
            opened_pages,
            /// Pages read as zeros because they were never written (or were discarded).
            unwritten_pages,
            /// Reads whose page failed to authenticate (each returned an error).
            auth_failures,
            /// Metadata chunks allocated (each [`CHUNK_SLOTS`] × [`SEAL_BYTES`] bytes).
            chunks,
        }
        gauges {
            /// Bytes of metadata held ([`CryptBackend::metadata_bytes`]).
            metadata_bytes: u64,
        }
    }
}

/// One slot's seal. `counter == 0`: the slot holds no sealed page.
#[derive(Debug, Default)]
struct Seal {
    counter: AtomicU64,
    tag: [AtomicU64; 2],
}

const _: () = assert!(std::mem::size_of::<Seal>() == SEAL_BYTES);

type Chunk = Box<[Seal]>;

/// A backend whose pages are sealed with AES-256-GCM (module essay).
pub struct CryptBackend<B: Backend> {
    inner: B,
    /// The expanded key (AES round keys and the GHASH key powers).
    cipher: LessSafeKey,
    /// The last counter handed out; the next page gets `fetch_add(1) + 1`.
    counter: AtomicU64,
    /// One entry per [`CHUNK_SLOTS`] slots, filled on the chunk's first write.
    chunks: Box<[OnceLock<Chunk>]>,
    stats: CryptCounters,
}

impl<B: Backend> CryptBackend<B> {
    /// Wraps `inner` under a fresh random key; all slots read as zeros.
    ///
    /// # Errors
    /// [`Error::Setup`] when the kernel gives no random bytes (getrandom(2) failed).
    ///
    /// Context: allocates 8 bytes per chunk of [`CHUNK_SLOTS`] slots; may block until the
    /// kernel's random pool is initialised (only early in boot).
    pub fn new(inner: B) -> Result<Self, Error> {
        let mut key = [0u8; 32];
        fill_random(&mut key)?;
        let unbound = UnboundKey::new(&AES_256_GCM, &key);
        key.fill(0);
        let cipher = LessSafeKey::new(unbound.map_err(|_| Error::Setup {
            what: "make an AES-256-GCM key for",
            path: std::path::PathBuf::from("the swap device"),
            source: std::io::Error::other("ring refused the key"),
        })?);
        let nr_chunks = inner.nr_pages().div_ceil(CHUNK_SLOTS as u64) as usize;
        let chunks = (0..nr_chunks).map(|_| OnceLock::new()).collect();
        let stats = CryptCounters::new();
        Ok(CryptBackend { inner, cipher, counter: AtomicU64::new(0), chunks, stats })
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The counters now, and the metadata held.
    pub fn stats(&self) -> CryptStats {
        let mut stats =
            CryptStats { metadata_bytes: self.metadata_bytes(), ..CryptStats::default() };
        self.stats.snapshot_into(&mut stats);
        stats
    }

    /// Bytes of metadata held now (chunks allocated, and the chunk table).
    pub fn metadata_bytes(&self) -> u64 {
        let chunk = (CHUNK_SLOTS * SEAL_BYTES) as u64;
        self.stats.chunks.load(Relaxed) * chunk + 8 * self.chunks.len() as u64
    }

    /// The seal of `slot`, if its chunk was ever written.
    fn seal(&self, slot: u64) -> Option<&Seal> {
        let chunk = self.chunks[slot as usize / CHUNK_SLOTS].get()?;
        Some(&chunk[slot as usize % CHUNK_SLOTS])
    }

    /// The seal of `slot`, its chunk allocated if this is the chunk's first write.
    fn seal_for_write(&self, slot: u64) -> &Seal {
        let chunk = self.chunks[slot as usize / CHUNK_SLOTS].get_or_init(|| {
            self.stats.chunks.fetch_add(1, Relaxed);
            (0..CHUNK_SLOTS).map(|_| Seal::default()).collect()
        });
        &chunk[slot as usize % CHUNK_SLOTS]
    }

    /// A fresh counter: never 0, never repeated.
    fn next_counter(&self) -> u64 {
        let counter = self.counter.fetch_add(1, Relaxed) + 1;
        assert!(counter != u64::MAX, "the nonce counter ran out");
        counter
    }

    /// Seals `page` for `slot` into `out` and records the seal.
    fn seal_page(&self, slot: u64, page: &[u8], out: &mut [u8]) -> Result<(), Error> {
        let counter = self.next_counter();
        out.copy_from_slice(page);
        let tag = self
            .cipher
            .seal_in_place_separate_tag(nonce(counter), Aad::from(slot.to_le_bytes()), out)
            .map_err(|_| Error::Authentication { offset: slot })?;
        let (lo, hi) = tag.as_ref().split_at(8);
        let seal = self.seal_for_write(slot);
        seal.tag[0].store(u64::from_le_bytes(lo.try_into().expect("8 bytes")), Relaxed);
        seal.tag[1].store(u64::from_le_bytes(hi.try_into().expect("8 bytes")), Relaxed);
        seal.counter.store(counter, Relaxed);
        Ok(())
    }

    /// Opens `page` (read from the inner backend) in place for `slot`, or zeros it if the
    /// slot holds no sealed page.
    fn open_page(&self, slot: u64, page: &mut [u8]) -> Result<(), Error> {
        let Some(seal) = self.seal(slot).filter(|s| s.counter.load(Relaxed) != 0) else {
            page.fill(0);
            self.stats.unwritten_pages.fetch_add(1, Relaxed);
            return Ok(());
        };
        let counter = seal.counter.load(Relaxed);
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&seal.tag[0].load(Relaxed).to_le_bytes());
        tag[8..].copy_from_slice(&seal.tag[1].load(Relaxed).to_le_bytes());
        let opened = self.cipher.open_in_place_separate_tag(
            nonce(counter),
            Aad::from(slot.to_le_bytes()),
            Tag::from(tag),
            page,
            0..,
        );
        if opened.is_err() {
            // What was read is nobody's data: leave none of it for a careless caller.
            page.fill(0);
            self.stats.auth_failures.fetch_add(1, Relaxed);
            return Err(Error::Authentication { offset: slot });
        }
        self.stats.opened_pages.fetch_add(1, Relaxed);
        Ok(())
    }
}

/// The nonce of write `counter` (unique: the counter never repeats under the key).
fn nonce(counter: u64) -> Nonce {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&counter.to_le_bytes());
    Nonce::assume_unique_for_key(nonce)
}

/// Fills `buf` from getrandom(2), retried on EINTR and short reads.
fn fill_random(buf: &mut [u8]) -> Result<(), Error> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::rand::getrandom(&mut buf[done..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(Error::Setup {
                    what: "draw a key (getrandom) for",
                    path: std::path::PathBuf::from("the swap device"),
                    source: e.into(),
                })
            }
        }
    }
    Ok(())
}

impl<B: Backend + std::fmt::Debug> std::fmt::Debug for CryptBackend<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The cipher (its round keys) is never printed.
        f.debug_struct("CryptBackend")
            .field("inner", &self.inner)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Backend for CryptBackend<B> {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), Error> {
        check_request(offset, data.len(), self.nr_pages())?;
        let mut sealed = vec![0u8; data.len()];
        let pages = data.chunks_exact(PAGE_SIZE).zip(sealed.chunks_exact_mut(PAGE_SIZE));
        for (i, (page, out)) in pages.enumerate() {
            self.seal_page(offset + i as u64, page, out)?;
        }
        self.stats.sealed_pages.fetch_add((data.len() / PAGE_SIZE) as u64, Relaxed);
        self.inner.write(offset, &sealed)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        check_request(offset, buf.len(), self.nr_pages())?;
        self.inner.read(offset, buf)?;
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            self.open_page(offset + i as u64, page)?;
        }
        Ok(())
    }

    fn discard(&self, offset: u64, nr: u64) -> Result<(), Error> {
        check_range(offset, nr, self.nr_pages())?;
        // As the checksum layer: if the discard fails the old bytes stay, and so must the
        // seals that open them.
        self.inner.discard(offset, nr)?;
        for slot in offset..offset + nr {
            if let Some(seal) = self.seal(slot) {
                seal.counter.store(0, Relaxed);
            }
        }
        Ok(())
    }

    fn is_synchronous(&self) -> bool {
        self.inner.is_synchronous()
    }

    fn nr_pages(&self) -> u64 {
        self.inner.nr_pages()
    }

    fn fork(&self, step: ForkStep) {
        self.inner.fork(step);
    }

    fn out_of_space(&self) -> bool {
        self.inner.out_of_space()
    }

    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        self.inner.counters(out);
        self.stats().each(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultBackend, FaultKind, FaultPlan, MemoryBackend};

    fn page(byte: u8) -> Vec<u8> {
        (0..PAGE_SIZE).map(|i| byte ^ (i as u8)).collect()
    }

    fn crypt(nr: u64) -> CryptBackend<MemoryBackend> {
        CryptBackend::new(MemoryBackend::new(nr)).unwrap()
    }

    /// The inner backend's raw bytes at `slot`.
    fn raw(backend: &CryptBackend<MemoryBackend>, slot: u64) -> Vec<u8> {
        let mut buf = vec![0u8; PAGE_SIZE];
        backend.inner().read(slot, &mut buf).unwrap();
        buf
    }

    #[test]
    fn pages_round_trip_and_the_inner_backend_holds_no_plaintext() {
        let b = crypt(2048);
        let folio: Vec<u8> = (0..4).flat_map(|i| page(i as u8 + 1)).collect();
        b.write(600, &folio).unwrap();
        let mut back = vec![0u8; folio.len()];
        b.read(600, &mut back).unwrap();
        assert_eq!(back, folio);
        for i in 0..4u64 {
            let stored = raw(&b, 600 + i);
            assert_ne!(stored, page(i as u8 + 1));
            // No 16-byte run of the plaintext survives in the ciphertext.
            let plain = page(i as u8 + 1);
            assert!(plain.windows(16).step_by(16).all(|w| !stored.windows(16).any(|s| s == w)));
        }
        assert_eq!(b.stats().sealed_pages, 4);
        assert_eq!(b.stats().opened_pages, 4);
    }

    #[test]
    fn a_page_read_from_the_wrong_slot_fails() {
        let b = crypt(16);
        b.write(3, &page(7)).unwrap();
        b.write(4, &page(8)).unwrap();
        // The storage swaps the two slots' bytes: each is a valid ciphertext, of another slot.
        let (three, four) = (raw(&b, 3), raw(&b, 4));
        b.inner().write(3, &four).unwrap();
        b.inner().write(4, &three).unwrap();
        let mut buf = vec![0u8; PAGE_SIZE];
        assert!(matches!(b.read(3, &mut buf), Err(Error::Authentication { offset: 3 })));
        assert!(buf.iter().all(|&x| x == 0), "nothing of what was read is left");
        assert!(matches!(b.read(4, &mut buf), Err(Error::Authentication { offset: 4 })));
        assert_eq!(b.stats().auth_failures, 2);
    }

    #[test]
    fn tampered_ciphertext_fails() {
        let b = crypt(16);
        b.write(5, &page(1)).unwrap();
        let mut stored = raw(&b, 5);
        stored[1234] ^= 0x01;
        b.inner().write(5, &stored).unwrap();
        let mut buf = vec![0u8; PAGE_SIZE];
        assert!(matches!(b.read(5, &mut buf), Err(Error::Authentication { offset: 5 })));
    }

    #[test]
    fn a_tampered_tag_fails() {
        let b = crypt(16);
        b.write(5, &page(1)).unwrap();
        let seal = b.seal(5).unwrap();
        seal.tag[1].fetch_xor(1 << 63, Relaxed);
        let mut buf = vec![0u8; PAGE_SIZE];
        assert!(matches!(b.read(5, &mut buf), Err(Error::Authentication { offset: 5 })));
        seal.tag[1].fetch_xor(1 << 63, Relaxed);
        b.read(5, &mut buf).unwrap();
        assert_eq!(buf, page(1), "the right tag opens it again");
    }

    #[test]
    fn an_older_write_of_the_same_slot_fails() {
        let b = crypt(16);
        b.write(2, &page(1)).unwrap();
        let old = raw(&b, 2);
        b.write(2, &page(2)).unwrap();
        b.inner().write(2, &old).unwrap(); // a lost write: the storage kept the old page
        let mut buf = vec![0u8; PAGE_SIZE];
        assert!(matches!(b.read(2, &mut buf), Err(Error::Authentication { offset: 2 })));
    }

    #[test]
    fn never_written_slots_read_zeros_and_cost_no_metadata() {
        let b = crypt(4096);
        assert_eq!(b.metadata_bytes(), 8 * 8, "only the chunk table");
        let mut buf = vec![0xAAu8; 2 * PAGE_SIZE];
        b.read(100, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
        b.write(1000, &page(3)).unwrap();
        assert_eq!(b.stats().chunks, 1);
        // The inner bytes of a never-written slot of a written chunk are not trusted either.
        b.inner().write(1001, &page(9)).unwrap();
        b.read(1001, &mut buf[..PAGE_SIZE]).unwrap();
        assert!(buf[..PAGE_SIZE].iter().all(|&x| x == 0));
        assert_eq!(b.stats().unwritten_pages, 3);
    }

    #[test]
    fn nonces_never_repeat_across_rewrites() {
        let b = crypt(64);
        let mut counters = std::collections::HashSet::new();
        let mut ciphertexts = std::collections::HashSet::new();
        for round in 0..50 {
            for slot in 0..8u64 {
                b.write(slot, &page(1)).unwrap(); // the same plaintext every time
                assert!(counters.insert(b.seal(slot).unwrap().counter.load(Relaxed)));
                assert!(ciphertexts.insert(raw(&b, slot)), "round {round} slot {slot}");
            }
        }
        assert_eq!(counters.len(), 400);
    }

    #[test]
    fn discarded_slots_read_zeros_and_a_failed_discard_keeps_the_data() {
        let inner = FaultBackend::new(MemoryBackend::new(1024));
        let b = CryptBackend::new(inner).unwrap();
        b.write(10, &[page(1), page(2)].concat()).unwrap();
        b.inner().arm(FaultPlan { kind: FaultKind::FailDiscard, nth: 1, every: false });
        assert!(b.discard(10, 2).is_err());
        let mut buf = vec![0u8; PAGE_SIZE];
        b.read(11, &mut buf).unwrap();
        assert_eq!(buf, page(2));
        b.discard(10, 2).unwrap();
        b.read(11, &mut buf).unwrap();
        assert!(buf.iter().all(|&x| x == 0));
        b.write(11, &page(5)).unwrap();
        b.read(11, &mut buf).unwrap();
        assert_eq!(buf, page(5));
    }

    #[test]
    fn torn_and_lost_inner_writes_fail_to_authenticate() {
        let b = CryptBackend::new(FaultBackend::new(MemoryBackend::new(64))).unwrap();
        let mut buf = vec![0u8; PAGE_SIZE];
        for kind in [FaultKind::TornWrite, FaultKind::LostWrite] {
            b.write(1, &page(1)).unwrap();
            b.inner().arm(FaultPlan { kind, nth: 1, every: false });
            b.write(1, &page(2)).unwrap();
            assert!(matches!(b.read(1, &mut buf), Err(Error::Authentication { .. })), "{kind:?}");
        }
    }

    #[test]
    fn two_layers_have_different_keys() {
        let (a, b) = (crypt(8), crypt(8));
        a.write(0, &page(1)).unwrap();
        b.write(0, &page(1)).unwrap();
        assert_ne!(raw(&a, 0), raw(&b, 0));
    }
}
