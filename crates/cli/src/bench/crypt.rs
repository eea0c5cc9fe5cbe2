//! `uswap bench crypt`: what sealing the swap file's pages costs (backend's crypt layer).
//!
//! Two measurements, in one run:
//!
//! 1. **The AEADs alone**: seal then open one 4 KiB page in place, AES-256-GCM against
//!    ChaCha20-Poly1305 (both RustCrypto, the candidates for the layer), ns per page
//!    (median of the per-page times over `pages` pages). Why the layer uses AES-GCM.
//! 2. **The file tier's path through the engine**, encryption off and on side by side: an
//!    engine on simulated memory (no userfaultfd), no compressed pool, so every page-out is
//!    a write to a real swap file (a private, unlinked file in the temporary directory,
//!    page cache kept as `uswap run`'s default) and every page-in a read from it. Page-out
//!    and page-in of every folio of a region of corpus pages, timed per call, ns per page
//!    (p50 of the per-call times; a 64 KiB folio's divided by 16), at order 0 and 4.
//!
//! Each configuration runs `ROUNDS` times, the configurations alternating so each meets the
//! same spells of load on a shared machine; the figure kept is the median of the rounds'
//! p50s. The ratio `on / off` per path is the cost of encryption.

use super::CommonOpts;
use crate::report::{format_figure, Report};
use aes_gcm::aead::{AeadInOut, KeyInit};
use anyhow::Context;
use engine::mem_source::MemorySource;
use engine::{BackendConfig, Engine, EngineConfig, PageSource, SwapConfig};
use hdrhistogram::Histogram;
use std::sync::Arc;
use std::time::Instant;
use zswap::corpus::Corpus;

const PAGE: usize = 4096;
const BASE: u64 = 0x7e00_0000_0000;

/// Rounds per configuration (`--quick`: 1).
const ROUNDS: usize = 5;

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000_000, 3)?)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Seal + open ns per page (p50) of `cipher` over `pages` corpus pages.
fn aead_round<A: AeadInOut>(cipher: &A, corpus: &Corpus, pages: usize) -> anyhow::Result<f64> {
    let mut hist = histogram()?;
    let mut buf = vec![0u8; PAGE];
    let mut nonce = aes_gcm::aead::Nonce::<A>::default();
    for i in 0..pages {
        buf.copy_from_slice(corpus.page(i));
        nonce[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let aad = (i as u64).to_le_bytes();
        let start = Instant::now();
        let tag = cipher
            .encrypt_inout_detached(&nonce, &aad, buf.as_mut_slice().into())
            .map_err(|_| anyhow::anyhow!("seal"))?;
        cipher
            .decrypt_inout_detached(&nonce, &aad, buf.as_mut_slice().into(), &tag)
            .map_err(|_| anyhow::anyhow!("open"))?;
        hist.record((start.elapsed().as_nanos() as u64).max(1))?;
        anyhow::ensure!(buf == corpus.page(i), "page {i} came back wrong");
    }
    Ok(hist.value_at_quantile(0.5) as f64)
}

/// Seal + open ns per page (p50) with ring's AES-256-GCM (BoringSSL's assembly).
fn ring_round(key: &[u8; 32], corpus: &Corpus, pages: usize) -> anyhow::Result<f64> {
    use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    let key = UnboundKey::new(&AES_256_GCM, key).map_err(|_| anyhow::anyhow!("ring key"))?;
    let key = LessSafeKey::new(key);
    let mut hist = histogram()?;
    let mut buf = vec![0u8; PAGE];
    for i in 0..pages {
        buf.copy_from_slice(corpus.page(i));
        let mut nonce = [0u8; 12];
        nonce[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let aad = (i as u64).to_le_bytes();
        let start = Instant::now();
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut buf,
            )
            .map_err(|_| anyhow::anyhow!("seal"))?;
        key.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            tag,
            &mut buf,
            0..,
        )
        .map_err(|_| anyhow::anyhow!("open"))?;
        hist.record((start.elapsed().as_nanos() as u64).max(1))?;
        anyhow::ensure!(buf == corpus.page(i), "page {i} came back wrong");
    }
    Ok(hist.value_at_quantile(0.5) as f64)
}

/// One file-tier round's figures, ns per page (p50).
#[derive(Clone, Copy)]
struct FileRun {
    pageout: f64,
    pagein: f64,
}

fn file_engine(
    pages: u64,
    order: u32,
    encrypt: bool,
) -> anyhow::Result<(Engine, Arc<MemorySource>)> {
    let bytes = pages * PAGE as u64;
    let source = Arc::new(MemorySource::new(BASE, pages));
    let dyn_source: Arc<dyn PageSource> = source.clone();
    let backend = BackendConfig::File { dir: std::env::temp_dir(), path: None, keep: false };
    let config = EngineConfig {
        budget_bytes: 2 * bytes + (64 << 20),
        folio_order: order,
        readahead_max_pages: 0,
        background_reclaim: false,
        swap: SwapConfig {
            backend,
            size_bytes: bytes + (4 << 20),
            encrypt,
            ..SwapConfig::default()
        },
        zswap: None,
        ..EngineConfig::default()
    };
    let engine = Engine::new(config, dyn_source).context("engine")?;
    engine.add_region(BASE, bytes).context("region")?;
    Ok((engine, source))
}

/// Pages out then in every folio of a region of corpus pages through the swap file.
fn file_round(corpus: &Corpus, pages: u64, order: u32, encrypt: bool) -> anyhow::Result<FileRun> {
    let (engine, source) = file_engine(pages, order, encrypt)?;
    for page in 0..pages {
        source
            .write(&engine, BASE + page * PAGE as u64, corpus.page(page as usize))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    let folio_pages = 1u64 << order;
    let folio_bytes = folio_pages * PAGE as u64;
    let (mut out_hist, mut in_hist) = (histogram()?, histogram()?);
    for folio in 0..pages / folio_pages {
        let addr = BASE + folio * folio_bytes;
        let start = Instant::now();
        let paged = engine.pageout(addr, folio_bytes).context("pageout")?;
        out_hist.record((start.elapsed().as_nanos() as u64 / folio_pages).max(1))?;
        anyhow::ensure!(paged == folio_pages, "folio {folio}: paged out {paged} pages");
    }
    let stats = engine.stats();
    anyhow::ensure!(stats.counters.pswpout == pages, "every page went to the file");
    let mut buf = vec![0u8; PAGE];
    for folio in 0..pages / folio_pages {
        let addr = BASE + folio * folio_bytes;
        let start = Instant::now();
        engine.handle_fault(addr, false).context("fault")?;
        in_hist.record((start.elapsed().as_nanos() as u64 / folio_pages).max(1))?;
        source.read(&engine, addr, &mut buf).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let first = (folio * folio_pages) as usize;
        anyhow::ensure!(buf == corpus.page(first), "folio {folio} came back wrong");
    }
    let mut sealed = 0;
    engine.backend_counters(&mut |name, value| {
        if name == "crypt_sealed_pages" {
            sealed = value;
        }
    });
    anyhow::ensure!(sealed == if encrypt { pages } else { 0 }, "{sealed} pages sealed");
    Ok(FileRun {
        pageout: out_hist.value_at_quantile(0.5) as f64,
        pagein: in_hist.value_at_quantile(0.5) as f64,
    })
}

/// Runs the benchmark.
///
/// # Errors
/// A setup failure (no temporary directory to put a swap file in), or a page that came
/// back wrong.
pub fn run(opts: &CommonOpts) -> anyhow::Result<Report> {
    let pages: u64 = if opts.quick { 2048 } else { 16384 };
    let rounds = if opts.quick { 1 } else { ROUNDS };
    let corpus = Corpus::generate(1, pages as usize);
    let mut key = [0u8; 32];
    rustix::rand::getrandom(&mut key, rustix::rand::GetRandomFlags::empty())?;
    let aes = aes_gcm::Aes256Gcm::new(&key.into());
    let chacha = chacha20poly1305::ChaCha20Poly1305::new(&key.into());
    let configs = [(0u32, false), (0, true), (4, false), (4, true)];
    let mut aead: [Vec<f64>; 3] = Default::default();
    let mut file: Vec<(Vec<f64>, Vec<f64>)> = vec![Default::default(); configs.len()];
    for _ in 0..rounds {
        aead[0].push(aead_round(&aes, &corpus, pages as usize)?);
        aead[1].push(aead_round(&chacha, &corpus, pages as usize)?);
        aead[2].push(ring_round(&key, &corpus, pages as usize)?);
        for (i, &(order, encrypt)) in configs.iter().enumerate() {
            let run = file_round(&corpus, pages, order, encrypt)?;
            file[i].0.push(run.pageout);
            file[i].1.push(run.pagein);
        }
    }
    let mut report = Report::new("crypt");
    let (aes_ns, chacha_ns) = (median(&mut aead[0]), median(&mut aead[1]));
    let ring_ns = median(&mut aead[2]);
    let table = report.table(
        &format!("Seal + open of one 4 KiB page, ns (median of {rounds} rounds' p50)"),
        &["AEAD", "ns per page", "GB/s each way"],
    );
    let rows = [
        ("AES-256-GCM (RustCrypto)", aes_ns),
        ("ChaCha20-Poly1305 (RustCrypto)", chacha_ns),
        ("AES-256-GCM (ring)", ring_ns),
    ];
    for (name, ns) in rows {
        let gbs = 2.0 * PAGE as f64 / ns;
        table.row([name.to_string(), format_figure(ns), format!("{gbs:.2}")]);
    }
    report.field("aes256gcm_seal_open_ns", aes_ns);
    report.field("chacha20poly1305_seal_open_ns", chacha_ns);
    report.field("ring_aes256gcm_seal_open_ns", ring_ns);
    report.field("chacha_over_aes", chacha_ns / aes_ns);
    let figures: Vec<FileRun> = file
        .iter_mut()
        .map(|(out, inn)| FileRun { pageout: median(out), pagein: median(inn) })
        .collect();
    let table = report.table(
        &format!(
            "The file tier through the engine, ns per page ({pages} pages, no pool, median of \
             {rounds} rounds' p50)"
        ),
        &["order", "encrypt", "page-out", "page-in", "page-out on/off", "page-in on/off"],
    );
    for (i, &(order, encrypt)) in configs.iter().enumerate() {
        let (plain, run) = (figures[i - usize::from(encrypt)], figures[i]);
        let ratio =
            |on: f64, off: f64| if encrypt { format!("{:.2}", on / off) } else { "-".into() };
        table.row([
            order.to_string(),
            if encrypt { "on" } else { "off" }.to_string(),
            format_figure(run.pageout),
            format_figure(run.pagein),
            ratio(run.pageout, plain.pageout),
            ratio(run.pagein, plain.pagein),
        ]);
    }
    for (i, &(order, encrypt)) in configs.iter().enumerate() {
        let (plain, run) = (figures[i - usize::from(encrypt)], figures[i]);
        let mode = if encrypt { "on" } else { "off" };
        report.field(&format!("file_pageout_ns_order{order}_encrypt_{mode}"), run.pageout);
        report.field(&format!("file_pagein_ns_order{order}_encrypt_{mode}"), run.pagein);
        if encrypt {
            report.field(&format!("pageout_ratio_order{order}"), run.pageout / plain.pageout);
            report.field(&format!("pagein_ratio_order{order}"), run.pagein / plain.pagein);
        }
    }
    report.field("rounds", rounds);
    report.note(
        "the swap file's page cache is kept (uswap run's default): page-in reads memory, the \
         path where encryption weighs most",
    );
    Ok(report)
}
