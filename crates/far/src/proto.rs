//! The memcached meta protocol, the subset the far tier speaks: `ms` (set), `mg` (get with
//! value), `md` (delete), `mn` (no-op, the end of a pipeline) and `stats` (the server's
//! identity: pid and start time).
//!
//! ```text
//!   ms <key> <len> T0\r\n<len bytes>\r\n  ->  HD\r\n | NS\r\n | SERVER_ERROR ...\r\n
//!   ms <key> <len> T0 q\r\n<len bytes>\r\n ->  (nothing when stored: quiet) | error line
//!   mg <key> v\r\n                        ->  VA <len>\r\n<len bytes>\r\n | EN\r\n
//!   md <key> q\r\n                        ->  (nothing on success: quiet) | error line
//!   mn\r\n                                ->  MN\r\n
//! ```
//!
//! A request is a **pipeline**: every command of a batch is written in one buffer with one
//! `write`, then the replies are read in order. Sixteen pages of a 64 KiB folio travel as one
//! round trip. Replies never outrun what the socket buffers hold for long: a quiet set
//! answers only when it fails, and a batch of gets is at most [`crate::BATCH_PAGES`] values.
//!
//! Timeouts: every connection has `SO_RCVTIMEO` and `SO_SNDTIMEO` set to the request
//! timeout, so no read or write of a request blocks longer than that; a connection that
//! timed out or failed mid-pipeline is out of step with its replies and is dropped, never
//! reused.
//!
//! Why no crate: the Rust memcached clients either run on an async runtime (tokio), which
//! the shim cannot host on its fault path, or offer the meta protocol only as an
//! experimental module that routes each key to one server; the far tier needs replicas
//! placed by its own health-aware rendezvous order, a pipelined batch per server, values
//! read straight into the caller's page, and per-request timeouts on a blocking socket. The
//! subset is five commands. std's `TcpStream` makes raw system calls and allocates only
//! through Rust's allocator (the shim's arena), never glibc's malloc.

use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One connection to one server, with its buffers (allocated once, reused).
#[derive(Debug)]
pub(crate) struct Conn {
    stream: TcpStream,
    /// Commands waiting for [`Conn::send`].
    wbuf: Vec<u8>,
    /// Received bytes; `rbuf[rpos..rlen]` not yet consumed.
    rbuf: Box<[u8]>,
    rpos: usize,
    rlen: usize,
}

/// What a server said to one command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `HD`, `MN`: done.
    Done,
    /// `VA`: a value of this many bytes follows (and was read).
    Value(usize),
    /// `EN` (get: no such key) or `NS` (set: not stored).
    Miss,
    /// `SERVER_ERROR` / `CLIENT_ERROR` / `ERROR`: refused (out of memory, ...).
    Refused,
}

/// Bytes of the read buffer: a few replies' headers and one value at least.
const RBUF: usize = 64 << 10;

/// How long a wait for a reply polls the socket before it sleeps in the kernel. A reply on
/// loopback comes back well within it, and a thread that slept for it pays its own wake-up
/// on top, tens of microseconds when its CPU had gone idle: the fault waiting for the page
/// pays it. Past it, the read blocks as before (a slow server costs this much CPU, no more).
const SPIN: Duration = Duration::from_micros(30);

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("memcached protocol: {what}"))
}

impl Conn {
    /// Connects to `addr`, at most `timeout`, which then bounds every read and write.
    ///
    /// # Errors
    /// The connection's error (refused, timed out, unreachable).
    ///
    /// Context: blocks up to `timeout`; allocates its buffers.
    pub(crate) fn connect(addr: &SocketAddr, timeout: Duration) -> io::Result<Conn> {
        let stream = TcpStream::connect_timeout(addr, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Conn {
            stream,
            wbuf: Vec::with_capacity(crate::BATCH_PAGES * (crate::VALUE_BYTES + 64)),
            rbuf: vec![0u8; RBUF].into_boxed_slice(),
            rpos: 0,
            rlen: 0,
        })
    }

    /// Queues `ms key len T0` with the value `parts` concatenated.
    pub(crate) fn push_set(&mut self, key: &crate::Key, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let _ = write!(self.wbuf, "ms {key} {len} T0\r\n");
        for part in parts {
            self.wbuf.extend_from_slice(part);
        }
        self.wbuf.extend_from_slice(b"\r\n");
    }

    /// Queues `mg key v`.
    pub(crate) fn push_get(&mut self, key: &crate::Key) {
        let _ = write!(self.wbuf, "mg {key} v\r\n");
    }

    /// Queues a quiet `md key q` (no reply unless it fails).
    pub(crate) fn push_delete(&mut self, key: &crate::Key) {
        let _ = write!(self.wbuf, "md {key} q\r\n");
    }

    /// Queues a command as given (tests).
    pub(crate) fn push_raw(&mut self, command: &[u8]) {
        self.wbuf.extend_from_slice(command);
    }

    /// Reads one reply to a get, whatever its length (tests): `None` for a miss.
    ///
    /// # Errors
    /// As [`Conn::read_reply`].
    pub(crate) fn read_any_value(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut line = [0u8; 256];
        let n = self.read_line(&mut line)?;
        let Some(rest) = line[..n].strip_prefix(b"VA ") else { return Ok(None) };
        let len_text = rest.split(|&b| b == b' ').next().unwrap_or_default();
        let len: usize = std::str::from_utf8(len_text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| bad("bad value length"))?;
        let mut value = vec![0u8; len + 2];
        self.read_bytes(&mut value)?;
        value.truncate(len);
        Ok(Some(value))
    }

    /// Queues `mn`, whose `MN` marks the end of a pipeline's replies.
    pub(crate) fn push_noop(&mut self) {
        self.wbuf.extend_from_slice(b"mn\r\n");
    }

    /// Writes every queued command.
    ///
    /// # Errors
    /// The socket's error (a timeout included): the connection must be dropped.
    pub(crate) fn send(&mut self) -> io::Result<()> {
        let result = self.stream.write_all(&self.wbuf);
        self.wbuf.clear();
        result
    }

    /// Sends a pipeline of quiet sets (`ms key len T0 q`, no reply when stored) ended by
    /// `mn`: each value is its `header` then its `page`, written from where they lie (one
    /// vectored write, no copy of the pages). [`Conn::read_until_noop`] then reads the
    /// replies: only failures answer before the `MN`.
    ///
    /// # Errors
    /// The socket's error (a timeout included): the connection must be dropped.
    ///
    /// Context: allocates the vector of slices (two per value).
    pub(crate) fn send_quiet_sets<'a>(
        &mut self,
        sets: impl Iterator<Item = (crate::Key, [u8; crate::HEADER_BYTES], &'a [u8])>,
    ) -> io::Result<()> {
        // The command text and headers go to `wbuf`; `cuts` says where each page goes
        // between them.
        self.wbuf.clear();
        let mut cuts: Vec<(usize, &'a [u8])> = Vec::with_capacity(crate::BATCH_PAGES);
        for (key, header, page) in sets {
            let len = header.len() + page.len();
            let _ = write!(self.wbuf, "ms {key} {len} T0 q\r\n");
            self.wbuf.extend_from_slice(&header);
            cuts.push((self.wbuf.len(), page));
            self.wbuf.extend_from_slice(b"\r\n");
        }
        self.wbuf.extend_from_slice(b"mn\r\n");
        let mut slices = Vec::with_capacity(2 * cuts.len() + 1);
        let mut from = 0;
        for &(cut, page) in &cuts {
            slices.push(IoSlice::new(&self.wbuf[from..cut]));
            slices.push(IoSlice::new(page));
            from = cut;
        }
        slices.push(IoSlice::new(&self.wbuf[from..]));
        let mut rest = &mut slices[..];
        let result = loop {
            if rest.is_empty() {
                break Ok(());
            }
            match self.stream.write_vectored(rest) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => IoSlice::advance_slices(&mut rest, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        drop(slices);
        self.wbuf.clear();
        result
    }

    /// Reads one reply line (without its `\r\n`) into `line`.
    fn read_line(&mut self, line: &mut [u8; 256]) -> io::Result<usize> {
        loop {
            let avail = &self.rbuf[self.rpos..self.rlen];
            if let Some(end) = avail.windows(2).position(|w| w == b"\r\n") {
                if end > line.len() {
                    return Err(bad("reply line too long"));
                }
                line[..end].copy_from_slice(&avail[..end]);
                self.rpos += end + 2;
                return Ok(end);
            }
            if avail.len() > line.len() {
                return Err(bad("reply line too long"));
            }
            self.fill()?;
        }
    }

    /// With nothing unread, polls the socket for up to [`SPIN`] (reading what comes into
    /// the buffer); the caller's read then finds it there, or blocks as before.
    fn spin_for_reply(&mut self) {
        if self.rpos < self.rlen {
            return;
        }
        (self.rpos, self.rlen) = (0, 0);
        let start = Instant::now();
        while start.elapsed() < SPIN {
            let flags = rustix::net::RecvFlags::DONTWAIT;
            match rustix::net::recv(&self.stream, &mut self.rbuf[..], flags) {
                Ok((n, _)) if n > 0 => {
                    self.rlen = n;
                    return;
                }
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => std::hint::spin_loop(),
                // Closed or failed: the blocking read that follows says which.
                _ => return,
            }
        }
    }

    /// Moves unread bytes to the front and reads more.
    fn fill(&mut self) -> io::Result<()> {
        self.rbuf.copy_within(self.rpos..self.rlen, 0);
        self.rlen -= self.rpos;
        self.rpos = 0;
        let n = self.stream.read(&mut self.rbuf[self.rlen..])?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed"));
        }
        self.rlen += n;
        Ok(())
    }

    /// Reads exactly `out.len()` bytes of a value.
    fn read_bytes(&mut self, out: &mut [u8]) -> io::Result<()> {
        let have = (self.rlen - self.rpos).min(out.len());
        out[..have].copy_from_slice(&self.rbuf[self.rpos..self.rpos + have]);
        self.rpos += have;
        if have < out.len() {
            self.stream.read_exact(&mut out[have..])?;
        }
        Ok(())
    }

    /// Skips `n` bytes of a value nobody wants.
    fn skip_bytes(&mut self, mut n: usize) -> io::Result<()> {
        let mut scratch = [0u8; 512];
        while n > 0 {
            let step = n.min(scratch.len());
            self.read_bytes(&mut scratch[..step])?;
            n -= step;
        }
        Ok(())
    }

    /// Reads the next reply. A value is read into `out` when it is exactly `out`'s total
    /// length (the parts in order), else skipped and reported by its length.
    ///
    /// # Errors
    /// The socket's error, or a reply this client does not understand: the connection must
    /// be dropped.
    pub(crate) fn read_reply(&mut self, out: &mut [&mut [u8]]) -> io::Result<Reply> {
        self.spin_for_reply();
        let mut line = [0u8; 256];
        let n = self.read_line(&mut line)?;
        let line = &line[..n];
        if line == b"HD" || line == b"MN" {
            return Ok(Reply::Done);
        }
        if line == b"EN" || line == b"NS" || line == b"NF" {
            return Ok(Reply::Miss);
        }
        if line.starts_with(b"SERVER_ERROR") || line.starts_with(b"CLIENT_ERROR") {
            return Ok(Reply::Refused);
        }
        let Some(rest) = line.strip_prefix(b"VA ") else {
            return Err(bad("unexpected reply"));
        };
        let len_text = rest.split(|&b| b == b' ').next().unwrap_or_default();
        let len: usize = std::str::from_utf8(len_text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| bad("bad value length"))?;
        let wanted: usize = out.iter().map(|p| p.len()).sum();
        if len == wanted {
            for part in out.iter_mut() {
                self.read_bytes(part)?;
            }
        } else {
            self.skip_bytes(len)?;
        }
        let mut crlf = [0u8; 2];
        self.read_bytes(&mut crlf)?;
        if &crlf != b"\r\n" {
            return Err(bad("value not followed by CRLF"));
        }
        Ok(Reply::Value(len))
    }

    /// Reads replies up to and including the `MN` of a pipeline, returning how many error
    /// lines came before it (the failures of quiet commands).
    ///
    /// # Errors
    /// As [`Conn::read_reply`].
    pub(crate) fn read_until_noop(&mut self) -> io::Result<u64> {
        let mut errors = 0;
        let mut line = [0u8; 256];
        loop {
            let n = self.read_line(&mut line)?;
            if &line[..n] == b"MN" {
                return Ok(errors);
            }
            errors += 1;
        }
    }

    /// The server's `stats`, handing each `STAT name value` to `each`.
    ///
    /// # Errors
    /// As [`Conn::read_reply`].
    pub(crate) fn stats(&mut self, each: &mut dyn FnMut(&str, &str)) -> io::Result<()> {
        self.wbuf.extend_from_slice(b"stats\r\n");
        self.send()?;
        let mut line = [0u8; 256];
        loop {
            let n = self.read_line(&mut line)?;
            let text = std::str::from_utf8(&line[..n]).map_err(|_| bad("stats not text"))?;
            if text == "END" {
                return Ok(());
            }
            let mut words = text.split(' ');
            if let (Some("STAT"), Some(name), Some(value)) =
                (words.next(), words.next(), words.next())
            {
                each(name, value);
            }
        }
    }
}
