//! The `redis` workload: a Redis server holding `--size` bytes of values, loaded and read
//! back in full by this harness, every value verified.
//!
//! ```text
//!   redis-server (confined by the side: cgroup / uswap run), loopback port, no persistence
//!        ^  SET k:00000000 <1 KiB>  x N   (pipelined, 128 per round trip)
//!        |  GET in a scattered order x N  (pipelined, 64 per round trip), compared
//!   client thread in the harness (not confined: only the server's memory is measured)
//! ```
//!
//! Values are 1 KiB slices of the workload crate's page contents (so they compress like
//! a heap, not like redis-benchmark's constant filler) and are derived from the key index,
//! so the read-back needs no copy of the data. The GET order is a fixed bijection of the
//! key indices (the workload crate's Zipf scatter), so reads do not follow the load order.
//! Redis's own `redis-benchmark` cannot verify values, which is why the client is ours;
//! the RESP subset it speaks is SET, GET, PING and the replies to them.

use super::runner::{self, Sample};
use super::sys;
use super::workloads::{Measured, Placement, RunContext, Service};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use workload::content::{fill_page, PAGE_SIZE};

/// Bytes per value (redis-benchmark's `-d 1024` in the published runs).
pub const VALUE_BYTES: usize = 1024;
const VALUES_PER_PAGE: u64 = (PAGE_SIZE / VALUE_BYTES) as u64;
const LOAD_BATCH: u64 = 128;
const READ_BATCH: u64 = 64;
/// The largest bulk reply accepted (a value is 1 KiB; anything far larger is a bug).
const MAX_BULK_BYTES: usize = 1 << 20;

/// The value stored under key index `index`.
pub fn value_of(seed: u64, index: u64, page: &mut [u8; PAGE_SIZE]) -> &[u8] {
    fill_page(seed, index / VALUES_PER_PAGE, 1, page);
    let slot = (index % VALUES_PER_PAGE) as usize * VALUE_BYTES;
    &page[slot..slot + VALUE_BYTES]
}

/// Encodes one command as a RESP array of bulk strings.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// One reply of the RESP subset used here.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
}

/// Reads one reply.
///
/// # Errors
/// I/O errors, a malformed reply, a bulk string above 1 MiB.
pub fn read_reply(reader: &mut impl BufRead) -> Result<Reply> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.len() < 3 || !line.ends_with(b"\r\n") {
        bail!("malformed reply {:?}", String::from_utf8_lossy(&line));
    }
    let body = String::from_utf8_lossy(&line[1..line.len() - 2]).into_owned();
    match line[0] {
        b'+' => Ok(Reply::Status(body)),
        b'-' => Ok(Reply::Error(body)),
        b':' => Ok(Reply::Integer(body.parse().context("integer reply")?)),
        b'$' => {
            let len: i64 = body.parse().context("bulk length")?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let len = usize::try_from(len).context("bulk length")?;
            if len > MAX_BULK_BYTES {
                bail!("bulk reply of {len} bytes");
            }
            let mut data = vec![0; len + 2];
            std::io::Read::read_exact(reader, &mut data)?;
            data.truncate(len);
            Ok(Reply::Bulk(Some(data)))
        }
        other => bail!("unsupported reply type {:?}", other as char),
    }
}

/// The client's result.
#[derive(Debug, Clone, Default)]
struct ClientResult {
    keys: u64,
    load_s: f64,
    read_s: f64,
    verify_errors: u64,
    /// The Zipf reads of `run_zipf` (`from_s` relative to the client's start).
    service: Option<Service>,
}

/// Runs the redis workload under `placement`.
///
/// # Errors
/// The server did not start or answer, a protocol error, an interrupt, the time limit.
pub fn run(ctx: &RunContext, placement: &Placement<'_>) -> Result<Measured> {
    let (keys, seed) = ((ctx.size_bytes / VALUE_BYTES as u64).max(1), ctx.seed);
    serve(ctx, placement, move |port| client(port, keys, seed))
}

/// `uswap bench auto`'s Redis: loaded as [`run`] loads it, then read for `ctx.serve_s`
/// seconds in rounds of [`ZIPF_BATCH`] pipelined GETs, the keys drawn Zipf(0.99) by group of
/// the [`VALUES_PER_PAGE`] keys loaded one after another (a page's worth of values), the
/// groups' ranks scattered over the key space, every value compared. The service's
/// measure: GETs answered in that time, and each round trip's latency.
///
/// # Errors
/// As [`run`].
pub fn run_zipf(ctx: &RunContext, placement: &Placement<'_>) -> Result<Measured> {
    let (keys, seed) = ((ctx.size_bytes / VALUE_BYTES as u64).max(1), ctx.seed);
    let serve_for = Duration::from_secs_f64(ctx.serve_s.max(0.0));
    serve(ctx, placement, move |port| zipf_client(port, keys, seed, serve_for))
}

/// GETs per round trip of the Zipf reads: a service's small pipelines, not a bulk scan.
const ZIPF_BATCH: u64 = 16;

/// Starts the server under `placement`, runs `client` against it while sampling, stops it.
fn serve(
    ctx: &RunContext,
    placement: &Placement<'_>,
    client: impl FnOnce(u16) -> Result<ClientResult> + Send + 'static,
) -> Result<Measured> {
    let server = ctx.redis_server.as_ref().context("no redis-server")?;
    let port = free_port()?;
    let mut command = Command::new(server);
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "no", "--protected-mode", "yes", "--loglevel", "warning"])
        .arg("--dir")
        .arg(&ctx.scratch_dir);
    // Prepared before the stdio is set: the uswap side replaces the command.
    (placement.prepare)(&mut command)?;
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let start = Instant::now();
    let child = command.spawn().context("spawn redis-server")?;
    let pid = child.id();
    let client = std::thread::spawn(move || client(port));
    let mut samples = Vec::new();
    while !client.is_finished() {
        let mut sample: Sample = placement.probe.sample(pid);
        sample.t_s = start.elapsed().as_secs_f64();
        samples.push(sample);
        if sys::interrupted() || start.elapsed() > ctx.timeout {
            runner::kill_and_reap(pid);
            let _ = client.join(); // The client fails once the server is gone.
            if sys::interrupted() {
                return Err(runner::Interrupted.into());
            }
            bail!("redis ran past the {:?} limit and was killed", ctx.timeout);
        }
        std::thread::sleep(runner::SAMPLE_EVERY);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let result = client.join().map_err(|_| anyhow::anyhow!("redis client panicked"));
    let exit = runner::stop_server(pid, Duration::from_secs(10));
    let result = result??;
    let exit = exit.context("redis-server could not be reaped")?;
    let served = result.service.map_or(String::new(), |s| {
        format!(
            "; {} GETs in {:.1} s, round trip p50 {:.0} us",
            s.requests,
            s.serve_s,
            s.p50_ns as f64 / 1e3
        )
    });
    Ok(Measured {
        verify_errors: result.verify_errors,
        detail: format!(
            "{} keys x {VALUE_BYTES} B: load {:.1} s, verified read-back {:.1} s{served}",
            result.keys, result.load_s, result.read_s
        ),
        service: result.service,
        ..Measured::of_tree(wall_s, &exit, samples)
    })
}

/// A loopback port nobody listens on now.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("bind loopback")?;
    Ok(listener.local_addr()?.port())
}

fn connect(port: u16) -> Result<TcpStream> {
    // Bounded: 10 s for the server to come up.
    for _ in 0..200 {
        if let Ok(stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
            stream.set_read_timeout(Some(Duration::from_secs(600)))?;
            return Ok(stream);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("redis-server did not accept connections on 127.0.0.1:{port}")
}

fn client(port: u16, keys: u64, seed: u64) -> Result<ClientResult> {
    let start = Instant::now();
    let (mut reader, mut writer) = load(port, keys, seed)?;
    let load_s = start.elapsed().as_secs_f64();
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let read_start = Instant::now();
    let verify_errors = read_back(&mut reader, &mut writer, keys, seed, &mut page)?;
    let read_s = read_start.elapsed().as_secs_f64();
    Ok(ClientResult { keys, load_s, read_s, verify_errors, service: None })
}

/// The Zipf reads of [`run_zipf`] after the load.
fn zipf_client(port: u16, keys: u64, seed: u64, serve_for: Duration) -> Result<ClientResult> {
    let start = Instant::now();
    let (mut reader, mut writer) = load(port, keys, seed)?;
    let load_s = start.elapsed().as_secs_f64();
    let groups = keys.div_ceil(VALUES_PER_PAGE);
    let zipf = workload::zipf::Zipf::new(groups, workload::pattern::ZIPF_THETA);
    let prime = workload::pattern::coprime_prime(groups);
    let mut rng = workload::rng::SplitMix64::new(seed ^ 0x5EED);
    let mut latency = hdrhistogram::Histogram::<u64>::new(3).context("histogram")?;
    let (mut page, mut out, mut batch) = (Box::new([0u8; PAGE_SIZE]), Vec::new(), Vec::new());
    let (mut requests, mut verify_errors) = (0, 0);
    let from_s = start.elapsed().as_secs_f64();
    let serving = Instant::now();
    while serving.elapsed() < serve_for {
        let round = Instant::now();
        out.clear();
        batch.clear();
        for _ in 0..ZIPF_BATCH {
            let group = workload::pattern::scatter(zipf.sample(&mut rng) - 1, prime, groups);
            let index = (group * VALUES_PER_PAGE + rng.below(VALUES_PER_PAGE)).min(keys - 1);
            encode(&mut out, &[b"GET", format!("k:{index:08}").as_bytes()]);
            batch.push(index);
        }
        writer.write_all(&out)?;
        writer.flush()?;
        for &index in &batch {
            match read_reply(&mut reader)? {
                Reply::Bulk(Some(value)) if value == value_of(seed, index, &mut page) => {}
                _ => verify_errors += 1,
            }
        }
        requests += ZIPF_BATCH;
        let _ = latency.record(round.elapsed().as_nanos() as u64);
    }
    let serve_s = serving.elapsed().as_secs_f64();
    let service = Service {
        requests,
        serve_s,
        from_s,
        p50_ns: latency.value_at_quantile(0.5),
        p99_ns: latency.value_at_quantile(0.99),
    };
    Ok(ClientResult { keys, load_s, read_s: serve_s, verify_errors, service: Some(service) })
}

type Reader = BufReader<TcpStream>;
type Writer = BufWriter<TcpStream>;

/// Connects and SETs every key.
fn load(port: u16, keys: u64, seed: u64) -> Result<(Reader, Writer)> {
    let stream = connect(port)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = BufWriter::new(stream);
    let mut out = Vec::new();
    encode(&mut out, &[b"PING"]);
    writer.write_all(&out)?;
    writer.flush()?;
    if read_reply(&mut reader)? != Reply::Status("PONG".into()) {
        bail!("redis-server did not answer PING");
    }
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let mut first = 0;
    while first < keys {
        let last = (first + LOAD_BATCH).min(keys);
        out.clear();
        for index in first..last {
            let key = format!("k:{index:08}");
            encode(&mut out, &[b"SET", key.as_bytes(), value_of(seed, index, &mut page)]);
        }
        writer.write_all(&out)?;
        writer.flush()?;
        for _ in first..last {
            match read_reply(&mut reader)? {
                Reply::Status(s) if s == "OK" => {}
                other => bail!("SET answered {other:?}"),
            }
        }
        first = last;
    }
    Ok((reader, writer))
}

fn read_back(
    reader: &mut impl BufRead,
    writer: &mut impl Write,
    keys: u64,
    seed: u64,
    page: &mut [u8; PAGE_SIZE],
) -> Result<u64> {
    let prime = workload::pattern::coprime_prime(keys);
    let mut errors = 0;
    let mut out = Vec::new();
    let mut first = 0;
    while first < keys {
        let last = (first + READ_BATCH).min(keys);
        out.clear();
        for i in first..last {
            let key = format!("k:{:08}", workload::pattern::scatter(i, prime, keys));
            encode(&mut out, &[b"GET", key.as_bytes()]);
        }
        writer.write_all(&out)?;
        writer.flush()?;
        for i in first..last {
            let index = workload::pattern::scatter(i, prime, keys);
            match read_reply(reader)? {
                Reply::Bulk(Some(value)) if value == value_of(seed, index, page) => {}
                _ => errors += 1,
            }
        }
        first = last;
    }
    Ok(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_resp() {
        let mut out = Vec::new();
        encode(&mut out, &[b"SET", b"k", b"v\r\n"]);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n");
    }

    #[test]
    fn replies_decode() {
        let mut input: &[u8] = b"+OK\r\n-ERR no\r\n:42\r\n$3\r\na\r\n\r\n$-1\r\n";
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Status("OK".into()));
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Error("ERR no".into()));
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Integer(42));
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Bulk(Some(b"a\r\n".to_vec())));
        assert_eq!(read_reply(&mut input).unwrap(), Reply::Bulk(None));
        assert!(read_reply(&mut input).is_err());
        let mut huge: &[u8] = b"$99999999\r\n";
        assert!(read_reply(&mut huge).is_err());
    }

    #[test]
    fn values_are_distinct_and_deterministic() {
        let mut page = Box::new([0u8; PAGE_SIZE]);
        let a = value_of(1, 4, &mut page).to_vec();
        let b = value_of(1, 5, &mut page).to_vec();
        assert_eq!(a.len(), VALUE_BYTES);
        assert_ne!(a, b);
        assert_eq!(a, value_of(1, 4, &mut page));
    }
}
