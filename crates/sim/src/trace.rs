//! The trace format: what a program did to its memory, as `uswap run --record` writes it
//! and `uswap sim --trace FILE` replays it. The record types and their bytes are
//! `runstat::trace`'s (shared with the shim, which writes them); this module adds the
//! checked, bounded reader and a writer with typed errors.
//!
//! A trace is a 32-byte header followed by 32-byte records, all little-endian:
//!
//! ```text
//!   header (32 bytes)
//!   offset  size  field
//!    0       8    magic "USWPTRC\0"
//!    8       2    version (2; 1 is read too: the same without remaps)
//!   10       2    record size in bytes (32)
//!   12       4    page size in bytes (4096)
//!   16       8    start time, ns since the Unix epoch (informational; 0 if unknown)
//!   24       8    reserved, 0
//!
//!   record (32 bytes)
//!   offset  size  field
//!    0       8    time_ns: since the start of the recording
//!    8       1    kind: 0 fault-read, 1 fault-write, 2 evict, 3 remove, 4 unmap, 5 fork,
//!                 6 remap-from, 7 remap-to
//!    9       3    reserved, 0
//!   12       4    thread: the recording's thread number (dense, from 0)
//!   16       8    addr: first byte (page aligned)
//!   24       8    len: bytes (a multiple of the page size; one page for faults; 0 for fork)
//! ```
//!
//! Kinds: a *fault* is the program touching a page the engine had to serve (read or write
//! access); *evict* is the engine paging a range out (or the program asking it to,
//! `MADV_PAGEOUT`); *remove* is the program dropping pages (`MADV_DONTNEED`, the
//! userfaultfd REMOVE event); *unmap* is `munmap` (UNMAP); *fork* is the process forking
//! (FORK); *remap* is `mremap` moving `len` bytes (REMAP), two records in a row, remap-from
//! (addr: the old start) then remap-to (addr: the new start), the same thread and len.
//! Records are in time order per thread; threads interleave in the file.
//! `uswap run --record` writes the program's faults under the faulting thread's number,
//! and the engine's doings (events and evictions) under one number of their own.
//!
//! Replay (`uswap sim --workload replay`) turns records into operations per recorded
//! thread (`ops::Op::from_record`): faults into reads and writes checked against the
//! model, evictions into `MADV_PAGEOUT` of their range (the replay's engine pages out what
//! it holds resident there, besides its own reclaim), removes and unmaps into drops, a
//! remap's pair into a move of the range (`ops::Op::Remap`).
//! The run reports the trace's records by kind and what its evictions paged out
//! (`report::ReplayCounts`).
//!
//! Fixed-size records keep the recorder cheap (one 32-byte write per event, no encoding)
//! and let a reader seek, count or split a trace without parsing it. A reader refuses an
//! unknown magic, version, record size or kind, a file that ends inside a record, and a
//! remap record without its other half; a newer minor format must bump the version.
//! Reading is bounded by [`RECORDS_MAX`].

use std::io::{Read, Write};

pub use runstat::trace::{
    remap_records, Record, RecordKind, HEADER_BYTES, MAGIC, OLDEST_VERSION, RECORD_BYTES, VERSION,
};

/// Most records a reader accepts (32 MiB of trace): a bound on the simulator's memory.
pub const RECORDS_MAX: u64 = 1 << 20;

/// The header's fields that carry information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Page size of the recording machine.
    pub page_size: u32,
    /// Wall-clock start, ns since the Unix epoch (0 if unknown).
    pub start_ns: u64,
}

/// Why a trace could not be read or written.
#[derive(Debug)]
pub enum TraceError {
    /// The underlying reader or writer failed.
    Io(std::io::Error),
    /// Not a trace, or a format this code does not know.
    BadHeader {
        /// What is wrong.
        why: String,
    },
    /// A record that cannot be decoded.
    BadRecord {
        /// Its index.
        index: u64,
        /// What is wrong.
        why: String,
    },
    /// More than [`RECORDS_MAX`] records.
    TooLong,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceError::Io(e) => write!(f, "trace I/O: {e}"),
            TraceError::BadHeader { why } => write!(f, "not a uswap trace: {why}"),
            TraceError::BadRecord { index, why } => write!(f, "trace record {index}: {why}"),
            TraceError::TooLong => write!(f, "trace longer than {RECORDS_MAX} records"),
        }
    }
}

impl std::error::Error for TraceError {}

impl From<std::io::Error> for TraceError {
    fn from(e: std::io::Error) -> Self {
        TraceError::Io(e)
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Writes a trace: the header at creation, then one record per call.
#[derive(Debug)]
pub struct TraceWriter<W: Write> {
    out: W,
    records: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header to `out`.
    ///
    /// # Errors
    /// [`TraceError::Io`].
    pub fn new(mut out: W, header: Header) -> Result<Self, TraceError> {
        out.write_all(&runstat::trace::header(header.page_size, header.start_ns))?;
        Ok(TraceWriter { out, records: 0 })
    }

    /// Appends one record.
    ///
    /// # Errors
    /// [`TraceError::Io`].
    pub fn record(&mut self, r: &Record) -> Result<(), TraceError> {
        self.out.write_all(&runstat::trace::encode(r))?;
        self.records += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes buffered records to the underlying writer.
    ///
    /// # Errors
    /// [`TraceError::Io`].
    pub fn flush(&mut self) -> Result<(), TraceError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the writer.
    ///
    /// # Errors
    /// [`TraceError::Io`].
    pub fn finish(mut self) -> Result<W, TraceError> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads a trace: the header at creation, then records as an iterator.
#[derive(Debug)]
pub struct TraceReader<R: Read> {
    input: R,
    header: Header,
    index: u64,
    /// The remap-from just read, waiting for its remap-to.
    remap_from: Option<Record>,
}

impl<R: Read> TraceReader<R> {
    /// Reads and checks the header.
    ///
    /// # Errors
    /// [`TraceError::BadHeader`] for a wrong magic, version or record size;
    /// [`TraceError::Io`].
    pub fn new(mut input: R) -> Result<Self, TraceError> {
        let mut bytes = [0u8; HEADER_BYTES];
        input.read_exact(&mut bytes).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                TraceError::BadHeader { why: "shorter than a header".into() }
            }
            _ => TraceError::Io(e),
        })?;
        if bytes[..8] != MAGIC {
            return Err(TraceError::BadHeader { why: format!("magic {:?}", &bytes[..8]) });
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        let record = u16::from_le_bytes([bytes[10], bytes[11]]);
        if !runstat::trace::version_supported(version) || usize::from(record) != RECORD_BYTES {
            return Err(TraceError::BadHeader {
                why: format!(
                    "version {version} with {record}-byte records (expected \
                     {OLDEST_VERSION}..={VERSION}, 32)"
                ),
            });
        }
        let page_size = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
        let header = Header { page_size, start_ns: word(&bytes, 16) };
        Ok(TraceReader { input, header, index: 0, remap_from: None })
    }

    /// The header.
    pub fn header(&self) -> Header {
        self.header
    }

    /// The next record; `Ok(None)` at a clean end of file.
    ///
    /// # Errors
    /// [`TraceError::BadRecord`] for an unknown kind, a file ending inside a record, or a
    /// remap record without its other half; [`TraceError::TooLong`]; [`TraceError::Io`].
    pub fn next_record(&mut self) -> Result<Option<Record>, TraceError> {
        let record = self.read_record()?;
        let bad = |index, why: &str| Err(TraceError::BadRecord { index, why: why.into() });
        match (self.remap_from.take(), record) {
            (Some(_), None) => bad(self.index, "the file ends after a remap-from"),
            (Some(from), Some(to)) => {
                let paired = to.kind == RecordKind::RemapTo
                    && (to.thread, to.len) == (from.thread, from.len);
                if paired {
                    Ok(Some(to))
                } else {
                    bad(self.index - 1, "a remap-from not followed by its remap-to")
                }
            }
            (None, Some(r)) if r.kind == RecordKind::RemapTo => {
                bad(self.index - 1, "a remap-to without a remap-from before it")
            }
            (None, Some(r)) => {
                if r.kind == RecordKind::RemapFrom {
                    self.remap_from = Some(r);
                }
                Ok(Some(r))
            }
            (None, None) => Ok(None),
        }
    }

    /// The next record as stored, unchecked against its neighbours.
    fn read_record(&mut self) -> Result<Option<Record>, TraceError> {
        let mut bytes = [0u8; RECORD_BYTES];
        let mut filled = 0;
        while filled < RECORD_BYTES {
            match self.input.read(&mut bytes[filled..]) {
                Ok(0) if filled == 0 => return Ok(None),
                Ok(0) => {
                    let why = format!("file ends {filled} bytes into the record");
                    return Err(TraceError::BadRecord { index: self.index, why });
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TraceError::Io(e)),
            }
        }
        if self.index >= RECORDS_MAX {
            return Err(TraceError::TooLong);
        }
        let record = runstat::trace::decode_record(&bytes).map_err(|code| {
            TraceError::BadRecord { index: self.index, why: format!("unknown kind {code}") }
        })?;
        self.index += 1;
        Ok(Some(record))
    }

    /// Every remaining record.
    ///
    /// # Errors
    /// As [`TraceReader::next_record`].
    pub fn read_all(mut self) -> Result<Vec<Record>, TraceError> {
        let mut records = Vec::new();
        while let Some(r) = self.next_record()? {
            records.push(r);
        }
        Ok(records)
    }
}

/// Reads a whole trace file.
///
/// # Errors
/// As [`TraceReader`].
pub fn read_file(path: &std::path::Path) -> Result<(Header, Vec<Record>), TraceError> {
    let file = std::fs::File::open(path)?;
    let reader = TraceReader::new(std::io::BufReader::new(file))?;
    let header = reader.header();
    Ok((header, reader.read_all()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One record of every kind; the remap's two as the recorder writes them.
    fn sample() -> Vec<Record> {
        let mut records: Vec<Record> = RecordKind::ALL[..6]
            .iter()
            .enumerate()
            .map(|(i, &kind)| Record {
                time_ns: 1000 * i as u64 + u64::MAX / 2,
                kind,
                thread: i as u32 * 7,
                addr: 0x7f00_0000_0000 + 4096 * i as u64,
                len: 4096 * (i as u64 + 1),
            })
            .collect();
        records.extend(remap_records(
            u64::MAX / 2 + 6000,
            3,
            0x7f00_0010_0000,
            0x7e00_0000_0000,
            8192,
        ));
        records
    }

    #[test]
    fn records_round_trip() {
        let header = Header { page_size: 4096, start_ns: 42 };
        let mut w = TraceWriter::new(Vec::new(), header).unwrap();
        for r in sample() {
            w.record(&r).unwrap();
        }
        assert_eq!(w.records(), 8);
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len(), HEADER_BYTES + 8 * RECORD_BYTES);
        let reader = TraceReader::new(bytes.as_slice()).unwrap();
        assert_eq!(reader.header(), header);
        assert_eq!(reader.read_all().unwrap(), sample());
    }

    #[test]
    fn bad_traces_are_refused_with_a_reason() {
        assert!(matches!(TraceReader::new(&b"short"[..]), Err(TraceError::BadHeader { .. })));
        let mut bytes = TraceWriter::new(Vec::new(), Header { page_size: 4096, start_ns: 0 })
            .unwrap()
            .finish()
            .unwrap();
        let mut wrong = bytes.clone();
        wrong[0] = b'X';
        assert!(TraceReader::new(wrong.as_slice()).unwrap_err().to_string().contains("magic"));
        let mut newer = bytes.clone();
        newer[8] = 3;
        assert!(TraceReader::new(newer.as_slice()).unwrap_err().to_string().contains("version"));
        // A record cut short, and a record of an unknown kind.
        bytes.extend_from_slice(&[0u8; 10]);
        let error = TraceReader::new(bytes.as_slice()).unwrap().read_all().unwrap_err();
        assert!(error.to_string().contains("ends 10 bytes"), "{error}");
        bytes.truncate(HEADER_BYTES);
        let mut record = [0u8; RECORD_BYTES];
        record[8] = 9;
        bytes.extend_from_slice(&record);
        let error = TraceReader::new(bytes.as_slice()).unwrap().read_all().unwrap_err();
        assert!(error.to_string().contains("unknown kind 9"), "{error}");
    }

    /// A remap is read only whole: its remap-from then its remap-to, the same thread and
    /// len; either half alone, or halves that do not match, is refused where it stands.
    #[test]
    fn a_remap_is_read_only_as_a_pair() {
        let trace = |records: &[Record]| {
            let header = Header { page_size: 4096, start_ns: 0 };
            let mut w = TraceWriter::new(Vec::new(), header).unwrap();
            records.iter().for_each(|r| w.record(r).unwrap());
            TraceReader::new(w.finish().unwrap().as_slice()).unwrap().read_all()
        };
        let [from, to] = remap_records(5, 1, 0x10_0000, 0x40_0000, 4096);
        let fault = Record { kind: RecordKind::FaultRead, ..from };
        assert_eq!(trace(&[fault, from, to, fault]).unwrap(), [fault, from, to, fault]);
        let refused = |records: &[Record], why: &str, at: u64| match trace(records) {
            Err(TraceError::BadRecord { index, why: said }) => {
                assert!(said.contains(why), "{said}");
                assert_eq!(index, at, "{said}");
            }
            other => panic!("{why}: {other:?}"),
        };
        refused(&[fault, from], "ends after a remap-from", 2);
        refused(&[from, fault], "not followed by its remap-to", 1);
        refused(&[from, Record { thread: 2, ..to }], "not followed by its remap-to", 1);
        refused(&[from, Record { len: 8192, ..to }], "not followed by its remap-to", 1);
        refused(&[fault, to], "without a remap-from", 1);
        // A version 1 trace (no remaps) still reads.
        let mut old = TraceWriter::new(Vec::new(), Header { page_size: 4096, start_ns: 0 })
            .unwrap()
            .finish()
            .unwrap();
        old[8] = 1;
        old.extend_from_slice(&runstat::trace::encode(&fault));
        assert_eq!(TraceReader::new(old.as_slice()).unwrap().read_all().unwrap(), [fault]);
    }
}
