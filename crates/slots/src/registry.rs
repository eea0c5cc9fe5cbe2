//! `SwapDevices`: the table of swap devices by type (the kernel's `swap_info[]`), so a
//! swap entry finds its device. At most `MAX_SWAPFILES` = 32 devices; one more is an
//! error at setup, as `swapon` fails with `EPERM` (LTP swapon03).
//!
//! Locks: one reader-writer lock over the table, taken briefly; devices are shared as
//! `Arc`, so a lookup never holds it while the device is used.

use crate::{
    Error, SlotFreeHook, SwapDevice, SwapDeviceOptions, SwapEntry, SwapType, MAX_SWAPFILES,
};
use backend::Backend;
use parking_lot::RwLock;
use std::sync::Arc;

/// The swap devices of one engine, by type.
#[derive(Default)]
pub struct SwapDevices {
    /// Slot `ty` holds the device of that type (the table lock).
    table: RwLock<[Option<Arc<SwapDevice>>; MAX_SWAPFILES]>,
}

impl SwapDevices {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates a device over `backend` under the lowest free type number.
    ///
    /// # Errors
    /// [`Error::TooManyDevices`] when all 32 types are taken; the errors of
    /// [`SwapDevice::new`].
    ///
    /// Context: takes the table lock for writing; allocates the device.
    pub fn add(
        &self,
        backend: Arc<dyn Backend>,
        options: SwapDeviceOptions,
        hook: Option<Arc<dyn SlotFreeHook>>,
    ) -> Result<Arc<SwapDevice>, Error> {
        let mut table = self.table.write();
        let free = table.iter().position(Option::is_none);
        let ty = free.and_then(|i| SwapType::new(i as u8));
        let Some(ty) = ty else { return Err(Error::TooManyDevices { max: MAX_SWAPFILES }) };
        let si = Arc::new(SwapDevice::new(ty, backend, options, hook)?);
        table[usize::from(ty.get())] = Some(Arc::clone(&si));
        Ok(si)
    }

    /// The device of type `ty`.
    pub fn get(&self, ty: SwapType) -> Option<Arc<SwapDevice>> {
        self.table.read()[usize::from(ty.get())].clone()
    }

    /// The device an entry belongs to.
    pub fn device_of(&self, entry: SwapEntry) -> Option<Arc<SwapDevice>> {
        self.get(entry.swap_type())
    }

    /// Takes device `ty` out of the table (its type number can be reused).
    pub fn remove(&self, ty: SwapType) -> Option<Arc<SwapDevice>> {
        self.table.write()[usize::from(ty.get())].take()
    }

    /// Number of devices.
    pub fn len(&self) -> usize {
        self.table.read().iter().flatten().count()
    }

    /// No devices.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
