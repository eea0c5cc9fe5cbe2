//! The trace `uswap run --record FILE` writes: the simulator's format, byte for byte.
//!
//! The format the simulator replays (`uswap sim --trace`): a 32-byte header, then 32-byte
//! little-endian records. This module holds the records' types, the writer the shim uses
//! and a decoder for tests; the simulator re-exports them and adds its checked, bounded
//! reader (`crates/sim/src/trace.rs`).
//!
//! ```text
//!   header: magic "USWPTRC\0" | version u16 (2) | record size u16 (32) | page size u32
//!           | start time ns since the epoch u64 | reserved u64
//!   record: time_ns u64 | kind u8 | reserved [u8; 3] | thread u32 | addr u64 | len u64
//!   kinds:  0 fault-read, 1 fault-write, 2 evict, 3 remove, 4 unmap, 5 fork,
//!           6 remap-from, 7 remap-to (version 2)
//! ```
//!
//! The shim records faults (one page each), REMOVE, UNMAP, FORK and REMAP events as the
//! handler sees them, and evictions (one record per folio paged out: its address and
//! length) as the engine's page-out hook reports them. A remap (mremap moving `len` bytes
//! from `from` to `to`) needs three numbers, so it is two records written together under
//! the trace's lock ([`remap_records`], [`TraceWriter::record_all`]): remap-from (addr
//! `from`) then remap-to (addr `to`), the same time, thread and len. Version 1 traces (no
//! remaps) still read.

use std::io::Write;

/// The first 8 bytes of every trace.
pub const MAGIC: [u8; 8] = *b"USWPTRC\0";
/// The format version written.
pub const VERSION: u16 = 2;
/// The oldest version a reader accepts: version 1 is version 2 without remap records.
pub const OLDEST_VERSION: u16 = 1;
/// Bytes in the header.
pub const HEADER_BYTES: usize = 32;
/// Bytes in one record.
pub const RECORD_BYTES: usize = 32;

/// What a record says happened (the simulator's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A read of a page that faulted.
    FaultRead = 0,
    /// A write of a page that faulted.
    FaultWrite = 1,
    /// A range paged out.
    Evict = 2,
    /// A range dropped by the program (MADV_DONTNEED).
    Remove = 3,
    /// A range unmapped.
    Unmap = 4,
    /// The process forked.
    Fork = 5,
    /// A range moved by mremap: its old start (the record before a [`RecordKind::RemapTo`]).
    RemapFrom = 6,
    /// Where the range of the [`RecordKind::RemapFrom`] just before moved to.
    RemapTo = 7,
}

impl RecordKind {
    /// Every kind, in code order.
    pub const ALL: [RecordKind; 8] = [
        RecordKind::FaultRead,
        RecordKind::FaultWrite,
        RecordKind::Evict,
        RecordKind::Remove,
        RecordKind::Unmap,
        RecordKind::Fork,
        RecordKind::RemapFrom,
        RecordKind::RemapTo,
    ];

    /// The kind's byte in a record.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind of a record's byte, `None` if unknown.
    pub fn from_code(code: u8) -> Option<RecordKind> {
        Self::ALL.get(usize::from(code)).copied()
    }
}

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Nanoseconds since the recording started.
    pub time_ns: u64,
    /// What happened.
    pub kind: RecordKind,
    /// The recording's thread number.
    pub thread: u32,
    /// First byte.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
}

/// The two records of a remap of `len` bytes from `from` to `to` (module essay).
pub fn remap_records(time_ns: u64, thread: u32, from: u64, to: u64, len: u64) -> [Record; 2] {
    let from = Record { time_ns, kind: RecordKind::RemapFrom, thread, addr: from, len };
    [from, Record { kind: RecordKind::RemapTo, addr: to, ..from }]
}

/// Whether a trace of `version` can be read.
pub fn version_supported(version: u16) -> bool {
    (OLDEST_VERSION..=VERSION).contains(&version)
}

/// The header bytes for a recording started at `start_ns` (ns since the epoch).
pub fn header(page_size: u32, start_ns: u64) -> [u8; HEADER_BYTES] {
    let mut bytes = [0u8; HEADER_BYTES];
    bytes[..8].copy_from_slice(&MAGIC);
    bytes[8..10].copy_from_slice(&VERSION.to_le_bytes());
    bytes[10..12].copy_from_slice(&(RECORD_BYTES as u16).to_le_bytes());
    bytes[12..16].copy_from_slice(&page_size.to_le_bytes());
    bytes[16..24].copy_from_slice(&start_ns.to_le_bytes());
    bytes
}

/// The bytes of one record.
pub fn encode(r: &Record) -> [u8; RECORD_BYTES] {
    let mut bytes = [0u8; RECORD_BYTES];
    bytes[..8].copy_from_slice(&r.time_ns.to_le_bytes());
    bytes[8] = r.kind as u8;
    bytes[12..16].copy_from_slice(&r.thread.to_le_bytes());
    bytes[16..24].copy_from_slice(&r.addr.to_le_bytes());
    bytes[24..32].copy_from_slice(&r.len.to_le_bytes());
    bytes
}

/// The record in `bytes`; `Err(code)` for an unknown kind code.
pub fn decode_record(bytes: &[u8; RECORD_BYTES]) -> Result<Record, u8> {
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    Ok(Record {
        time_ns: word(0),
        kind: RecordKind::from_code(bytes[8]).ok_or(bytes[8])?,
        thread: u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]),
        addr: word(16),
        len: word(24),
    })
}

/// Decodes a whole trace (tests): the header's page size and the records; `None` for a
/// wrong magic, version or record size, an unknown kind, or a partial record.
pub fn decode(bytes: &[u8]) -> Option<(u32, Vec<Record>)> {
    let head = bytes.get(..HEADER_BYTES)?;
    let version = u16::from_le_bytes([head[8], head[9]]);
    if head[..8] != MAGIC || !version_supported(version) || head[10..12] != [32, 0] {
        return None;
    }
    let page_size = u32::from_le_bytes(head[12..16].try_into().ok()?);
    let body = &bytes[HEADER_BYTES..];
    if !body.len().is_multiple_of(RECORD_BYTES) {
        return None;
    }
    let mut records = Vec::with_capacity(body.len() / RECORD_BYTES);
    for r in body.chunks_exact(RECORD_BYTES) {
        records.push(decode_record(r.try_into().ok()?).ok()?);
    }
    Some((page_size, records))
}

/// Writes a trace to `out`: the header at creation, then records (buffer `out` yourself).
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    records: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header.
    ///
    /// # Errors
    /// The writer's.
    pub fn new(mut out: W, page_size: u32, start_ns: u64) -> std::io::Result<Self> {
        out.write_all(&header(page_size, start_ns))?;
        Ok(TraceWriter { out, records: 0 })
    }

    /// A writer of records after a header written before (by `uswap run`, for every image
    /// of a program that execs to append to).
    pub fn appending(out: W) -> Self {
        TraceWriter { out, records: 0 }
    }

    /// Appends one record.
    ///
    /// # Errors
    /// The writer's.
    pub fn record(&mut self, r: &Record) -> std::io::Result<()> {
        self.out.write_all(&encode(r))?;
        self.records += 1;
        Ok(())
    }

    /// Appends records that belong together (a remap's two), in order: a caller that holds
    /// the writer's lock across the call keeps any other record from coming between them.
    ///
    /// # Errors
    /// The writer's (the records before the failing one are written: a reader refuses a
    /// remap's half).
    pub fn record_all(&mut self, records: &[Record]) -> std::io::Result<()> {
        records.iter().try_for_each(|r| self.record(r))
    }

    /// Records written.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes.
    ///
    /// # Errors
    /// The writer's.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the simulator's format fixes (its doc table), checked field by field.
    #[test]
    fn records_have_the_simulators_layout() {
        let mut w = TraceWriter::new(Vec::new(), 4096, 7).unwrap();
        let r =
            Record { time_ns: 5, kind: RecordKind::FaultWrite, thread: 2, addr: 0x1000, len: 4096 };
        w.record(&r).unwrap();
        w.record(&Record { kind: RecordKind::Fork, len: 0, ..r }).unwrap();
        let bytes = w.out.clone();
        assert_eq!(bytes.len(), 32 + 2 * 32);
        assert_eq!(&bytes[..8], b"USWPTRC\0");
        assert_eq!(bytes[8..12], [2, 0, 32, 0]);
        assert_eq!(bytes[12..16], 4096u32.to_le_bytes());
        assert_eq!(bytes[16..24], 7u64.to_le_bytes());
        assert_eq!(bytes[32 + 8], 1);
        assert_eq!(bytes[32 + 12..32 + 16], 2u32.to_le_bytes());
        let (page, back) = decode(&bytes).unwrap();
        assert_eq!((page, back[0], back[1].kind), (4096, r, RecordKind::Fork));
        assert_eq!(decode(&bytes[..40]), None, "a partial record");
        let mut old = bytes.clone();
        old[8] = 1;
        assert!(decode(&old).is_some(), "version 1 still reads");
        old[8] = 3;
        assert_eq!(decode(&old), None, "a version from the future");
    }

    #[test]
    fn a_remap_is_two_records_written_together() {
        let mut w = TraceWriter::new(Vec::new(), 4096, 0).unwrap();
        let pair = remap_records(9, 1, 0x10_0000, 0x80_0000, 3 * 4096);
        w.record_all(&pair).unwrap();
        assert_eq!(w.records(), 2);
        let (_, back) = decode(&w.out).unwrap();
        assert_eq!(back, pair);
        assert_eq!((back[0].kind, back[0].addr), (RecordKind::RemapFrom, 0x10_0000));
        assert_eq!((back[1].kind, back[1].addr), (RecordKind::RemapTo, 0x80_0000));
        assert_eq!((back[1].len, back[1].thread, back[1].time_ns), (3 * 4096, 1, 9));
        assert_eq!(w.out[32 + 8], 6);
        assert_eq!(w.out[64 + 8], 7);
    }
}
