//! The swap device's backend as the configuration builds it: a file or memory, wrapped in
//! the integrity layer asked for (a forked child's own backend gets the same layers).

use super::*;

pub(super) fn make_backend(config: &EngineConfig) -> Result<Arc<dyn Backend>, Error> {
    let swap = &config.swap;
    let nr_pages = swap.size_bytes / PAGE_SIZE as u64;
    let size_bytes = nr_pages * PAGE_SIZE as u64;
    let plain: Arc<dyn Backend> = match &swap.backend {
        BackendConfig::Memory => Arc::new(MemoryBackend::new(nr_pages)),
        BackendConfig::File { dir, path, keep } => {
            let at = path.as_ref().unwrap_or(dir);
            let options = FileOptions { keep: *keep, ..FileOptions::default() };
            let file = FileBackend::create(at, size_bytes, options)
                .map_err(|e| Error::Config(format!("swap file at {}: {e}", at.display())))?;
            Arc::new(file)
        }
        BackendConfig::Custom(backend) => backend.clone(),
    };
    wrap_backend(config, plain)
}

/// `plain` with the layers the configuration asks for on top: every page sealed
/// (AES-256-GCM under a key made now), or a crc32c per slot. One integrity layer, never
/// two: a GCM tag authenticates what a crc32c would check. A forked child's own backend
/// gets the same layers under a key of its own (one key never seals two pages with one
/// nonce, and the parent's key goes on counting from the same nonce).
pub(super) fn wrap_backend(
    config: &EngineConfig,
    plain: Arc<dyn Backend>,
) -> Result<Arc<dyn Backend>, Error> {
    if config.swap.encrypt {
        let sealed = CryptBackend::new(ArcBackend(plain))
            .map_err(|e| Error::Config(format!("swap encryption: {e}")))?;
        Ok(Arc::new(sealed))
    } else if config.swap.checksums {
        Ok(Arc::new(ChecksumBackend::new(ArcBackend(plain))))
    } else {
        Ok(plain)
    }
}

/// Lets an `Arc<dyn Backend>` be wrapped by the generic checksum layer.
#[derive(Clone)]
struct ArcBackend(Arc<dyn Backend>);

impl Backend for ArcBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), backend::Error> {
        self.0.write(offset, data)
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), backend::Error> {
        self.0.read(offset, buf)
    }
    fn discard(&self, offset: u64, nr: u64) -> Result<(), backend::Error> {
        self.0.discard(offset, nr)
    }
    fn is_synchronous(&self) -> bool {
        self.0.is_synchronous()
    }
    fn nr_pages(&self) -> u64 {
        self.0.nr_pages()
    }
    fn out_of_space(&self) -> bool {
        self.0.out_of_space()
    }
    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        self.0.counters(out);
    }
    fn fork(&self, step: backend::ForkStep) {
        self.0.fork(step);
    }
}
