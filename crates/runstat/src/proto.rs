//! The control protocol between a run's broker (`uswap run`) and its members (the shim in
//! each process of the tree): one line per message over the run's Unix stream socket
//! ([`crate::env::SOCKET`]).
//!
//! ```text
//!   member                                         broker
//!   connect(<run dir>/broker.sock)
//!   hello pid=4242 token=<32 hex digits>  ----->   token, SO_PEERCRED pid and uid, descent
//!                                         <-----   welcome share=33554432 row=3
//!                                                  (or: refused <reason>, and close)
//!   every REPORT_PERIOD (~50 ms):
//!   report charged=.. rss=.. fixed=.. ...  ----->  the share policy (crate::share), a tick
//!                                         <-----   share 41943040   (when it changed)
//!   exit or exec: the socket closes (CLOEXEC)      the share comes back, the row is freed
//! ```
//!
//! Messages are ASCII lines of at most [`LINE_MAX`] bytes, `name=value` fields in any
//! order after the verb; a field the reader does not know is skipped and a missing one
//! reads as zero, so either side may be newer. Encoding writes into a caller's buffer and
//! parsing borrows from it: neither allocates, because the shim encodes and parses in a
//! forked child's single thread, where the allocator's lock may be held by a thread that
//! no longer exists (`rejoin_after_fork`).

use core::fmt::Write as _;

/// The longest message, newline included.
pub const LINE_MAX: usize = 512;

/// The protocol's version, sent in the hello.
pub const VERSION: u32 = 1;

/// How often a member reports.
pub const REPORT_PERIOD_MS: u64 = 50;

/// The tree's swap-space counter file ([`crate::env::QUOTA_FILE`]): 64-bit words, mapped
/// shared by the broker and every member. Word [`QUOTA_LIMIT`] is `--swap-size`, word
/// [`QUOTA_USED`] the bytes the tree's swap files hold reserved, then one word per member
/// row (the row the welcome names): what that member reserved, so that the broker gives
/// back the reservations of a member that ended without giving them back itself (killed,
/// or an image that exec'd).
pub const QUOTA_MAGIC: u64 = u64::from_le_bytes(*b"uswapqta");
/// The word holding [`QUOTA_MAGIC`].
pub const QUOTA_MAGIC_WORD: usize = 0;
/// The word holding the limit.
pub const QUOTA_LIMIT: usize = 1;
/// The word holding the bytes reserved.
pub const QUOTA_USED: usize = 2;
/// The first row's word.
pub const QUOTA_FIRST_ROW: usize = 8;
/// Member rows: as many members at once as a run may have.
pub const QUOTA_ROWS: usize = 4096;
/// The far tier's ledger (far's src/ledger.rs), after the rows: word [`FAR_NEXT`] counts
/// the entries taken, and entry `i` is two words from `FAR_FIRST + 2 * i`: a run id (plus
/// one, so that 0 is an entry not written yet) and the slots from 0 that run may have on
/// the servers. `uswap run` deletes those keys once every member has left.
pub const FAR_NEXT: usize = 3;
/// The first entry's first word.
pub const FAR_FIRST: usize = QUOTA_FIRST_ROW + QUOTA_ROWS;
/// Entries: far tiers a run may start (each process, each forked child with one of its own).
pub const FAR_ENTRIES: usize = 8192;
/// The file's size in bytes.
pub const QUOTA_FILE_BYTES: usize = (FAR_FIRST + 2 * FAR_ENTRIES) * 8;

/// The far ledger's entries in the counter file's bytes `file` (little-endian words, as
/// mapped): `(run id, slots)` of each written one.
pub fn far_entries(file: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    let word = move |i: usize| {
        file.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes)
    };
    let taken = (word(FAR_NEXT) as usize).min(FAR_ENTRIES);
    (0..taken).filter_map(move |i| {
        let (run, slots) = (word(FAR_FIRST + 2 * i), word(FAR_FIRST + 2 * i + 1));
        (run != 0).then(|| (run - 1, slots))
    })
}

/// What a member reports: its engine's charge and its process's memory now, and counters
/// since it started (the broker takes differences).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// The engine's budget in force.
    pub budget: u64,
    /// What the budget charges now (`Engine::charged_bytes`).
    pub charged: u64,
    /// Of that, the engine's own pages: resident, in flight, compressed (the charge less
    /// the outside charge).
    pub held: u64,
    /// The program's managed pages resident now, in bytes.
    pub resident: u64,
    /// The process's resident set (VmRSS).
    pub rss: u64,
    /// What the engine cannot page out: the interpreter's heap, the shim's own metadata,
    /// ranges not adopted yet (the anonymous and shared memory, `RssAnon + RssShmem`, less
    /// the engine's charge for its own pages and memory beside the budget).
    pub fixed: u64,
    /// Bytes paged out of the program and held by the swap now (pool, disk, zero map).
    pub swapped: u64,
    /// Pages brought back that had been paged out (the kernel's `workingset_refault_anon`).
    pub refaults: u64,
    /// Time the program's threads waited on faults, in nanoseconds.
    pub stall_ns: u64,
    /// Of that, the wait on thrashing faults: pages brought back that had been on the
    /// active list before they were paged out (frontend's `FaultReport::thrashing`).
    pub thrash_ns: u64,
    /// Faults served.
    pub faults: u64,
    /// Pages out by tier: zero, compressed pool, disk.
    pub out_zero: u64,
    /// Pages into the pool.
    pub out_pool: u64,
    /// Pages written to the swap file.
    pub out_file: u64,
    /// Pages in by tier.
    pub in_zero: u64,
    /// Pages loaded from the pool.
    pub in_pool: u64,
    /// Pages read from the swap file.
    pub in_file: u64,
    /// Memory the engine holds beside the budget (`Engine::beside_bytes`: a pool of its
    /// own), in `rss` but charged to no share.
    pub beside: u64,
}

/// The report's fields by name, in wire order (one table for both directions).
const REPORT_FIELDS: [&str; 18] = [
    "budget",
    "charged",
    "held",
    "resident",
    "rss",
    "fixed",
    "swapped",
    "refaults",
    "stall_ns",
    "faults",
    "oz",
    "op",
    "of",
    "iz",
    "ip",
    "if",
    "thrash_ns",
    "beside",
];

impl Report {
    fn values(&self) -> [u64; 18] {
        [
            self.budget,
            self.charged,
            self.held,
            self.resident,
            self.rss,
            self.fixed,
            self.swapped,
            self.refaults,
            self.stall_ns,
            self.faults,
            self.out_zero,
            self.out_pool,
            self.out_file,
            self.in_zero,
            self.in_pool,
            self.in_file,
            self.thrash_ns,
            self.beside,
        ]
    }

    fn set(&mut self, index: usize, value: u64) {
        let slot = match index {
            0 => &mut self.budget,
            1 => &mut self.charged,
            2 => &mut self.held,
            3 => &mut self.resident,
            4 => &mut self.rss,
            5 => &mut self.fixed,
            6 => &mut self.swapped,
            7 => &mut self.refaults,
            8 => &mut self.stall_ns,
            9 => &mut self.faults,
            10 => &mut self.out_zero,
            11 => &mut self.out_pool,
            12 => &mut self.out_file,
            13 => &mut self.in_zero,
            14 => &mut self.in_pool,
            15 => &mut self.in_file,
            16 => &mut self.thrash_ns,
            _ => &mut self.beside,
        };
        *slot = value;
    }
}

/// One message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// A process asks to join (member to broker).
    Hello {
        /// Its pid, as it sees it (checked against `SO_PEERCRED`).
        pid: u32,
        /// The run token it was given.
        token: &'a str,
        /// The protocol version it speaks.
        version: u32,
    },
    /// It is a member, with this share (broker to member).
    Welcome {
        /// Its share of the budget, in bytes.
        share: u64,
        /// Its row in the tree's swap-space counter file.
        row: u32,
    },
    /// It is not (broker to member; the broker then closes the connection).
    Refused {
        /// Why, in words.
        reason: &'a str,
    },
    /// Its figures now (member to broker).
    Report(Report),
    /// Its new share (broker to member).
    Share(u64),
}

/// Why a line is not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Not ASCII text, or longer than [`LINE_MAX`].
    NotText,
    /// A verb this side does not know.
    UnknownVerb,
    /// A field the message needs is missing or not a number.
    BadField(&'static str),
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ParseError::NotText => write!(f, "not a line of text"),
            ParseError::UnknownVerb => write!(f, "unknown message"),
            ParseError::BadField(name) => write!(f, "field {name} missing or not a number"),
        }
    }
}

/// A writer into a fixed buffer that fails (instead of growing) when it is full.
struct Line<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl core::fmt::Write for Line<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        // One byte stays free for the newline.
        if end >= self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl Message<'_> {
    /// Writes the message and its newline into `buf`; returns the length, or `None` if it
    /// does not fit (a reason longer than the line).
    ///
    /// Context: never allocates.
    pub fn encode(&self, buf: &mut [u8]) -> Option<usize> {
        let mut line = Line { buf, len: 0 };
        let written = match self {
            Message::Hello { pid, token, version } => {
                write!(line, "hello v={version} pid={pid} token={token}")
            }
            Message::Welcome { share, row } => write!(line, "welcome share={share} row={row}"),
            Message::Refused { reason } => write!(line, "refused {reason}"),
            Message::Report(report) => {
                let mut result = line.write_str("report");
                for (name, value) in REPORT_FIELDS.iter().zip(report.values()) {
                    result = result.and_then(|()| write!(line, " {name}={value}"));
                }
                result
            }
            Message::Share(share) => write!(line, "share {share}"),
        };
        written.ok()?;
        let len = line.len;
        line.buf[len] = b'\n';
        Some(len + 1)
    }
}

/// Parses one line (with or without its newline).
///
/// # Errors
/// [`ParseError`] for anything that is not a message this side knows.
///
/// Context: never allocates; borrows from `line`.
pub fn parse(line: &[u8]) -> Result<Message<'_>, ParseError> {
    if line.len() > LINE_MAX {
        return Err(ParseError::NotText);
    }
    let text = core::str::from_utf8(line).map_err(|_| ParseError::NotText)?;
    let text = text.trim_end_matches(['\n', '\r']);
    let (verb, rest) = text.split_once(' ').unwrap_or((text, ""));
    let field = |name: &'static str| -> Option<&str> {
        rest.split_ascii_whitespace().find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
    };
    let number = |name: &'static str| -> Result<u64, ParseError> {
        field(name).and_then(|v| v.parse().ok()).ok_or(ParseError::BadField(name))
    };
    match verb {
        "hello" => Ok(Message::Hello {
            pid: number("pid")? as u32,
            token: field("token").ok_or(ParseError::BadField("token"))?,
            version: number("v")? as u32,
        }),
        "welcome" => Ok(Message::Welcome { share: number("share")?, row: number("row")? as u32 }),
        "refused" => Ok(Message::Refused { reason: rest }),
        "share" => {
            rest.trim().parse().map(Message::Share).map_err(|_| ParseError::BadField("share"))
        }
        "report" => {
            let mut report = Report::default();
            for f in rest.split_ascii_whitespace() {
                let Some((name, value)) = f.split_once('=') else { continue };
                let Some(index) = REPORT_FIELDS.iter().position(|n| *n == name) else { continue };
                let value =
                    value.parse().map_err(|_| ParseError::BadField(REPORT_FIELDS[index]))?;
                report.set(index, value);
            }
            Ok(Message::Report(report))
        }
        _ => Err(ParseError::UnknownVerb),
    }
}

/// Lines accumulated from a stream socket: bytes in, whole lines out, bounded.
#[derive(Debug)]
pub struct LineBuffer {
    buf: [u8; 2 * LINE_MAX],
    len: usize,
    /// A line longer than [`LINE_MAX`] was seen: the peer is not speaking the protocol.
    pub overflowed: bool,
}

impl Default for LineBuffer {
    fn default() -> Self {
        LineBuffer { buf: [0; 2 * LINE_MAX], len: 0, overflowed: false }
    }
}

impl LineBuffer {
    /// The free space to read into; pass the count read to [`LineBuffer::filled`].
    pub fn space(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// `n` bytes were read into [`LineBuffer::space`].
    pub fn filled(&mut self, n: usize) {
        self.len = (self.len + n).min(self.buf.len());
    }

    /// Calls `each` with every whole line (newline excluded), then keeps the rest.
    pub fn drain(&mut self, mut each: impl FnMut(&[u8])) {
        let mut start = 0;
        while let Some(at) = self.buf[start..self.len].iter().position(|&b| b == b'\n') {
            each(&self.buf[start..start + at]);
            start += at + 1;
        }
        self.buf.copy_within(start..self.len, 0);
        self.len -= start;
        if self.len >= LINE_MAX {
            self.overflowed = true;
            self.len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(message: Message<'_>) {
        let mut buf = [0u8; LINE_MAX];
        let len = message.encode(&mut buf).unwrap();
        assert_eq!(buf[len - 1], b'\n');
        assert_eq!(parse(&buf[..len]).unwrap(), message);
    }

    #[test]
    fn every_message_round_trips() {
        round_trip(Message::Hello { pid: 4242, token: "00ff", version: VERSION });
        round_trip(Message::Welcome { share: 32 << 20, row: 3 });
        round_trip(Message::Refused { reason: "not a descendant of uswap run 17" });
        round_trip(Message::Share(u64::MAX));
        let report = Report {
            budget: 1,
            charged: 2,
            held: 20,
            resident: 21,
            rss: 3,
            fixed: 4,
            swapped: 5,
            refaults: 6,
            stall_ns: 7,
            faults: 8,
            out_zero: 9,
            out_pool: 10,
            out_file: 11,
            in_zero: 12,
            in_pool: 13,
            in_file: u64::MAX,
            thrash_ns: 14,
            beside: 15,
        };
        round_trip(Message::Report(report));
        let mut buf = [0u8; LINE_MAX];
        let len = Message::Report(report).encode(&mut buf).unwrap();
        assert!(len < LINE_MAX / 2, "a report of the largest numbers fits twice over");
    }

    #[test]
    fn unknown_fields_are_skipped_and_missing_ones_are_zero_or_refused() {
        let m = parse(b"report charged=5 newer=7 rss=9\n").unwrap();
        let want = Report { charged: 5, rss: 9, ..Report::default() };
        assert_eq!(m, Message::Report(want));
        assert_eq!(parse(b"hello v=1 pid=3"), Err(ParseError::BadField("token")));
        assert_eq!(parse(b"hello v=1 pid=x token=a"), Err(ParseError::BadField("pid")));
        assert_eq!(parse(b"share -1"), Err(ParseError::BadField("share")));
        assert_eq!(parse(b"goodbye"), Err(ParseError::UnknownVerb));
        assert_eq!(parse(&[0xff, 0xfe]), Err(ParseError::NotText));
        assert_eq!(parse(&[b'a'; LINE_MAX + 1]), Err(ParseError::NotText));
    }

    #[test]
    fn a_reason_too_long_for_a_line_is_not_encoded() {
        let long = "x".repeat(LINE_MAX);
        let mut buf = [0u8; LINE_MAX];
        assert_eq!(Message::Refused { reason: &long }.encode(&mut buf), None);
    }

    #[test]
    fn lines_come_out_whole_across_reads_and_a_runaway_line_is_flagged() {
        let mut lines = LineBuffer::default();
        let mut seen = Vec::new();
        for chunk in [&b"share 1\nsha"[..], b"re 2", b"\nshare 3\n"] {
            lines.space()[..chunk.len()].copy_from_slice(chunk);
            lines.filled(chunk.len());
            lines.drain(|l| seen.push(String::from_utf8(l.to_vec()).unwrap()));
        }
        assert_eq!(seen, ["share 1", "share 2", "share 3"]);
        assert!(!lines.overflowed);
        let junk = [b'j'; LINE_MAX];
        lines.space()[..junk.len()].copy_from_slice(&junk);
        lines.filled(junk.len());
        lines.drain(|_| panic!("no line"));
        assert!(lines.overflowed);
    }

    #[test]
    fn far_entries_are_the_written_ones_up_to_the_count() {
        let mut file = vec![0u8; QUOTA_FILE_BYTES];
        let put = |file: &mut Vec<u8>, word: usize, value: u64| {
            file[word * 8..word * 8 + 8].copy_from_slice(&value.to_le_bytes());
        };
        put(&mut file, FAR_NEXT, 3);
        put(&mut file, FAR_FIRST, 0xabc + 1);
        put(&mut file, FAR_FIRST + 1, 1024);
        // Entry 1 taken, its run not written yet (its process was killed in between); entry
        // 2 is run 0's.
        put(&mut file, FAR_FIRST + 4, 1);
        put(&mut file, FAR_FIRST + 5, 512);
        put(&mut file, FAR_FIRST + 6, 99 + 1); // past the count: not an entry
        let entries: Vec<_> = far_entries(&file).collect();
        assert_eq!(entries, vec![(0xabc, 1024), (0, 512)]);
        put(&mut file, FAR_NEXT, u64::MAX);
        assert_eq!(far_entries(&file).count(), 3, "a count past the entries is clamped");
    }
}
