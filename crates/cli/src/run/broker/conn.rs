//! One connection of the broker: a process asking to join, then a member.
//!
//! Non-blocking both ways. What the broker owes a member waits in a small buffer until
//! the socket takes it; a member that stops reading has later messages dropped (its next
//! share supersedes them) rather than the buffer grown.

use runstat::proto::{LineBuffer, Message, Report, LINE_MAX};
use runstat::share::MemberId;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// The most bytes owed to one member.
const OUT_MAX: usize = 4 * LINE_MAX;

/// A member's side of a connection.
#[derive(Debug)]
pub struct MemberConn {
    /// Its number in the policy.
    pub id: MemberId,
    /// Its pid (checked at the hello).
    pub pid: u32,
    /// Its row in the swap-space counter.
    pub row: u32,
    /// The last share sent.
    pub sent: u64,
    /// Its last report.
    pub report: Option<Report>,
}

/// One connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket.
    pub stream: UnixStream,
    lines: LineBuffer,
    /// When it was accepted.
    pub since: Instant,
    /// Set once admitted.
    pub member: Option<MemberConn>,
    out: Vec<u8>,
    /// Closed (EOF, an error, refused): dropped at the end of the broker's turn.
    pub closed: bool,
}

impl Conn {
    /// A connection just accepted (non-blocking).
    pub fn new(stream: UnixStream) -> Conn {
        Conn {
            stream,
            lines: LineBuffer::default(),
            since: Instant::now(),
            member: None,
            out: Vec::with_capacity(LINE_MAX),
            closed: false,
        }
    }

    /// Makes it a member.
    pub fn admit(&mut self, id: MemberId, pid: u32, row: u32) {
        self.member = Some(MemberConn { id, pid, row, sent: 0, report: None });
    }

    /// Reads what is there, handing each whole line to `each`; EOF or an error closes it.
    pub fn read(&mut self, mut each: impl FnMut(&[u8])) {
        if self.closed {
            return;
        }
        loop {
            match self.stream.read(self.lines.space()) {
                Ok(0) => {
                    self.closed = true;
                    break;
                }
                Ok(n) => {
                    self.lines.filled(n);
                    self.lines.drain(&mut each);
                    if self.lines.overflowed {
                        self.closed = true;
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.closed = true;
                    break;
                }
            }
        }
    }

    /// Queues `message` (dropped if the member owes too much reading already).
    pub fn send(&mut self, message: Message<'_>) {
        let mut line = [0u8; LINE_MAX];
        let Some(len) = message.encode(&mut line) else { return };
        if self.out.len() + len <= OUT_MAX {
            self.out.extend_from_slice(&line[..len]);
        }
    }

    /// Whether bytes wait to be written.
    pub fn wants_out(&self) -> bool {
        !self.out.is_empty()
    }

    /// Writes what the socket takes now.
    pub fn flush(&mut self) {
        while !self.out.is_empty() && !self.closed {
            match self.stream.write(&self.out) {
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => self.closed = true,
            }
        }
    }
}
