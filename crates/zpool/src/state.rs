//! ClassState: everything of one size class that its mutex protects.
//!
//! ```text
//!   handles:  [slot 0: zspage 2 obj 5 size 700 gen 3][slot 1: free gen 8][slot 2: ...]
//!   zspages:  [Some(zs0)][None][Some(zs2)] ...        free_zspage_ids: [1]
//!   groups:   [0%: -][1-9%: 2][10-19%: -] .. [90-99%: 0]      full, unlisted: 3 4
//! ```
//!
//! A full zspage is in no list. Nothing looks for one (an allocation and compaction both
//! want room), and a free from a listed zspage rewrites the position of the zspage moved
//! into its place: for a full one that would be another zspage's cache line, cold on a
//! page-in (every raw page the pool keeps is a full zspage of one object). The kernel lists them
//! (`ZS_INUSE_RATIO_100`).
//!
//! Every method here runs with the class mutex held (the caller owns `&mut ClassState`
//! through the guard) and never allocates page memory: zspages come in already built and
//! go out to be dropped by the caller after unlocking. The tables (`handles`, `zspages`,
//! the id and slot free lists, the groups) grow geometrically, amortised, under the mutex;
//! that is the one allocation under a lock, on a sleeping lock, and bounded by the pool's
//! page limit.
//!
//! Invariants ([`ClassState::check_invariants`]):
//! - every live zspage records the fullness group its in-use ratio gives and, unless it is
//!   full, is listed there at the position it records; no empty zspage is kept (it is
//!   freed at once);
//! - every live handle slot points at a used object whose reverse map names that slot, and
//!   every used object is pointed at by its owner; dead slots are on the free-slot list;
//! - `objects` and `object_bytes` equal the sums over live slots.

use crate::arena::PoolPage;
use crate::class::{ClassGeometry, ClassIndex};
use crate::handle::{next_generation, Handle};
use crate::zspage::ZsPage;
use crate::{FULLNESS_GROUPS, PAGE_SIZE};
use std::mem::size_of;

/// `HandleSlot::zspage` of a free slot.
const DEAD: u32 = u32::MAX;
/// The full group, whose list stays empty (full zspages are not listed); group 0 (empty)
/// stays unused because empty zspages are freed.
const FULL_GROUP: usize = FULLNESS_GROUPS - 1;
/// `ZsPage::group_pos` of a zspage in no list.
const UNLISTED: u32 = u32::MAX;

/// One handle-table entry: where the handle's object is now.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandleSlot {
    generation: u32,
    zspage: u32,
    obj: u16,
    size: u16,
}

/// The group of a zspage with `inuse` of `capacity` objects: 0 empty, 11 full, else
/// `ratio / 10 + 1` so that one object of 127 lands in 1 (1-9%), not in "empty".
pub(crate) fn fullness_group(inuse: usize, capacity: usize) -> usize {
    if inuse == 0 {
        0
    } else if inuse == capacity {
        FULL_GROUP
    } else {
        100 * inuse / capacity / 10 + 1
    }
}

/// Where a handle's object is (returned by [`ClassState::locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub(crate) zspage: u32,
    pub(crate) obj: u16,
    pub(crate) size: usize,
}

/// Makes room for one more element, growing by a quarter instead of doubling: the tables
/// keep their high-water capacity, and a quarter wastes at most 20% of it where doubling
/// wastes up to half. Still geometric, so pushes stay amortised O(1).
fn grow_gently<T>(table: &mut Vec<T>) {
    if table.len() == table.capacity() {
        table.reserve_exact((table.len() / 4).max(16));
    }
}

/// What one compaction round did.
#[derive(Debug)]
pub(crate) struct CompactRound {
    pub(crate) moved: usize,
    pub(crate) freed: Option<Box<ZsPage>>,
}

/// A size class's mutable state. Lock: the class's `Mutex` (every field).
#[derive(Debug)]
pub(crate) struct ClassState {
    index: ClassIndex,
    geometry: ClassGeometry,
    zspages: Vec<Option<Box<ZsPage>>>,
    free_zspage_ids: Vec<u32>,
    groups: [Vec<u32>; FULLNESS_GROUPS],
    handles: Vec<HandleSlot>,
    free_slots: Vec<u32>,
    live_zspages: usize,
    objects: usize,
    object_bytes: usize,
    /// Pages and metadata bytes last added to the pool's totals (see `ZsPool::sync`).
    pub(crate) accounted_pages: usize,
    pub(crate) accounted_meta_bytes: usize,
}

impl ClassState {
    pub(crate) fn new(index: ClassIndex, geometry: ClassGeometry) -> Self {
        ClassState {
            index,
            geometry,
            zspages: Vec::new(),
            free_zspage_ids: Vec::new(),
            groups: Default::default(),
            handles: Vec::new(),
            free_slots: Vec::new(),
            live_zspages: 0,
            objects: 0,
            object_bytes: 0,
            accounted_pages: 0,
            accounted_meta_bytes: 0,
        }
    }

    pub(crate) fn index(&self) -> ClassIndex {
        self.index
    }

    pub(crate) fn geometry(&self) -> ClassGeometry {
        self.geometry
    }

    pub(crate) fn live_zspages(&self) -> usize {
        self.live_zspages
    }

    pub(crate) fn objects(&self) -> usize {
        self.objects
    }

    pub(crate) fn object_bytes(&self) -> usize {
        self.object_bytes
    }

    /// Pages held by this class's zspages.
    pub(crate) fn pages(&self) -> usize {
        self.live_zspages * self.geometry.pages_per_zspage
    }

    /// Metadata bytes held, by capacity: the tables and lists, and per live zspage the
    /// `ZsPage` itself (its page pointers inline) and its object slots.
    pub(crate) fn meta_bytes(&self) -> usize {
        let id = size_of::<u32>();
        let per_zspage = ZsPage::meta_bytes(self.geometry.objs_per_zspage);
        self.zspages.capacity() * size_of::<Option<Box<ZsPage>>>()
            + self.free_zspage_ids.capacity() * id
            + self.groups.iter().map(|g| g.capacity() * id).sum::<usize>()
            + self.handles.capacity() * size_of::<HandleSlot>()
            + self.free_slots.capacity() * id
            + self.live_zspages * per_zspage
    }

    /// zspages per fullness group.
    pub(crate) fn fullness(&self) -> [usize; FULLNESS_GROUPS] {
        let listed: usize = self.groups.iter().map(Vec::len).sum();
        let mut fullness: [usize; FULLNESS_GROUPS] = std::array::from_fn(|g| self.groups[g].len());
        fullness[FULL_GROUP] = self.live_zspages - listed;
        fullness
    }

    // ---- allocation ------------------------------------------------------------------

    /// Allocates a `size`-byte object in the fullest non-full zspage, if there is one.
    pub(crate) fn alloc_in_existing(&mut self, size: usize) -> Option<Handle> {
        let id = self.fullest_nonfull(None)?;
        Some(self.alloc_in(id, size))
    }

    /// Allocates a `size`-byte object, using `fresh` only if no existing zspage has room
    /// (another thread may have made room while the lock was dropped). Returns the handle
    /// and the fresh zspage if it was not needed, for the caller to free after unlocking.
    pub(crate) fn alloc_with_fresh(
        &mut self,
        fresh: Box<ZsPage>,
        size: usize,
    ) -> (Handle, Option<Box<ZsPage>>) {
        if let Some(handle) = self.alloc_in_existing(size) {
            return (handle, Some(fresh));
        }
        let id = self.insert_zspage(fresh);
        (self.alloc_in(id, size), None)
    }

    fn alloc_in(&mut self, id: u32, size: usize) -> Handle {
        let (slot, generation) = self.new_slot();
        let zspage = self.zspage_mut(id);
        let obj = zspage.alloc_obj(slot).unwrap_or_else(|| panic!("zspage {id} listed non-full"));
        self.handles[slot as usize] = HandleSlot { generation, zspage: id, obj, size: size as u16 };
        self.objects += 1;
        self.object_bytes += size;
        let emptied = self.fix_fullness(id);
        assert!(emptied.is_none(), "zspage {id} empty after an allocation");
        Handle::new(self.index, slot, generation)
    }

    fn new_slot(&mut self) -> (u32, u32) {
        if let Some(slot) = self.free_slots.pop() {
            return (slot, self.handles[slot as usize].generation);
        }
        let slot = u32::try_from(self.handles.len()).unwrap_or(DEAD);
        assert!(slot < DEAD >> 1, "handle table of class {:?} overflows", self.index);
        grow_gently(&mut self.handles);
        self.handles.push(HandleSlot { generation: 1, zspage: DEAD, obj: 0, size: 0 });
        (slot, 1)
    }

    /// Frees the handle's object; returns its zspage if that became empty (already taken
    /// out of the class), for the caller to drop after unlocking.
    pub(crate) fn free(&mut self, handle: Handle) -> Option<Box<ZsPage>> {
        let at = self.locate(handle);
        let slot = handle.slot() as usize;
        let owner = self.zspage_mut(at.zspage).free_obj(at.obj);
        assert_eq!(owner, handle.slot(), "object owned by another handle");
        let entry = &mut self.handles[slot];
        *entry = HandleSlot {
            generation: next_generation(entry.generation),
            zspage: DEAD,
            obj: 0,
            size: 0,
        };
        grow_gently(&mut self.free_slots);
        self.free_slots.push(handle.slot());
        self.objects -= 1;
        self.object_bytes -= at.size;
        self.fix_fullness(at.zspage)
    }

    // ---- access ----------------------------------------------------------------------

    /// Where `handle`'s object is.
    ///
    /// # Panics
    /// If the handle is stale (its object was freed) or belongs to no object here.
    pub(crate) fn locate(&self, handle: Handle) -> Location {
        assert_eq!(handle.class(), self.index, "handle {handle:?} of another class");
        let entry = self.handles.get(handle.slot() as usize);
        let entry = entry.unwrap_or_else(|| panic!("handle {handle:?} beyond the table"));
        let live = entry.zspage != DEAD && entry.generation == handle.generation();
        assert!(live, "stale handle {handle:?} (freed, or never allocated)");
        Location { zspage: entry.zspage, obj: entry.obj, size: usize::from(entry.size) }
    }

    /// Byte offset of object `obj` in its zspage chain.
    pub(crate) fn offset_of(&self, obj: u16) -> usize {
        usize::from(obj) * self.geometry.size_bytes
    }

    pub(crate) fn write(&mut self, handle: Handle, data: &[u8]) {
        let at = self.locate(handle);
        assert_eq!(
            data.len(),
            at.size,
            "write of {} bytes to a {}-byte object",
            data.len(),
            at.size
        );
        let offset = self.offset_of(at.obj);
        self.zspage_mut(at.zspage).write(offset, data);
    }

    pub(crate) fn read(&self, handle: Handle, buf: &mut [u8]) -> usize {
        let at = self.locate(handle);
        assert!(buf.len() >= at.size, "read buffer {} < object {}", buf.len(), at.size);
        self.zspage(at.zspage).read(self.offset_of(at.obj), &mut buf[..at.size]);
        at.size
    }

    /// Calls `reader` with the object's bytes (in place, or copied into `scratch` when
    /// they cross a page edge).
    pub(crate) fn read_with<R>(
        &self,
        handle: Handle,
        scratch: &mut [u8],
        reader: impl FnOnce(&[u8]) -> R,
    ) -> R {
        let at = self.locate(handle);
        assert!(scratch.len() >= at.size, "scratch {} < object {}", scratch.len(), at.size);
        self.zspage(at.zspage).with_object(self.offset_of(at.obj), at.size, scratch, reader)
    }

    /// The page `handle`'s object fills exactly, if it is a whole page (a raw page).
    ///
    /// # Panics
    /// As [`ClassState::locate`].
    pub(crate) fn whole_page(&self, handle: Handle) -> Option<&PoolPage> {
        let at = self.locate(handle);
        self.zspage(at.zspage).whole_page(self.offset_of(at.obj), at.size)
    }

    // ---- zspages and fullness groups -------------------------------------------------

    fn zspage(&self, id: u32) -> &ZsPage {
        let zspage = self.zspages.get(id as usize).and_then(Option::as_ref);
        zspage.unwrap_or_else(|| panic!("zspage {id} is not live"))
    }

    fn zspage_mut(&mut self, id: u32) -> &mut ZsPage {
        let zspage = self.zspages.get_mut(id as usize).and_then(Option::as_mut);
        zspage.unwrap_or_else(|| panic!("zspage {id} is not live"))
    }

    fn insert_zspage(&mut self, zspage: Box<ZsPage>) -> u32 {
        let group = fullness_group(zspage.inuse(), zspage.capacity());
        let id = match self.free_zspage_ids.pop() {
            Some(id) => {
                self.zspages[id as usize] = Some(zspage);
                id
            }
            None => {
                grow_gently(&mut self.zspages);
                self.zspages.push(Some(zspage));
                (self.zspages.len() - 1) as u32
            }
        };
        self.list(id, group);
        self.live_zspages += 1;
        id
    }

    /// Records `group` as zspage `id`'s and lists it there, unless that is the full group.
    fn list(&mut self, id: u32, group: usize) {
        let pos = if group == FULL_GROUP {
            UNLISTED
        } else {
            self.groups[group].push(id);
            (self.groups[group].len() - 1) as u32
        };
        let zspage = self.zspage_mut(id);
        zspage.group = group as u8;
        zspage.group_pos = pos;
    }

    /// Takes zspage `id` out of its group and the table.
    fn remove_zspage(&mut self, id: u32) -> Box<ZsPage> {
        self.unlist(id);
        let zspage = self.zspages[id as usize].take();
        let zspage = zspage.unwrap_or_else(|| panic!("zspage {id} is not live"));
        grow_gently(&mut self.free_zspage_ids);
        self.free_zspage_ids.push(id);
        self.live_zspages -= 1;
        zspage
    }

    fn unlist(&mut self, id: u32) {
        let (group, pos) = {
            let zspage = self.zspage(id);
            (usize::from(zspage.group), zspage.group_pos as usize)
        };
        if group == FULL_GROUP {
            return;
        }
        let removed = self.groups[group].swap_remove(pos);
        assert_eq!(removed, id, "group list out of step");
        if let Some(&moved) = self.groups[group].get(pos) {
            self.zspage_mut(moved).group_pos = pos as u32;
        }
    }

    /// Moves zspage `id` to the group its in-use ratio gives; an emptied zspage is taken
    /// out and returned instead.
    fn fix_fullness(&mut self, id: u32) -> Option<Box<ZsPage>> {
        let zspage = self.zspage(id);
        let group = fullness_group(zspage.inuse(), zspage.capacity());
        if group == 0 {
            return Some(self.remove_zspage(id));
        }
        if group != usize::from(zspage.group) {
            self.unlist(id);
            self.list(id, group);
        }
        None
    }

    /// The fullest zspage with room, other than `except`.
    fn fullest_nonfull(&self, except: Option<u32>) -> Option<u32> {
        (1..FULL_GROUP)
            .rev()
            .find_map(|g| self.groups[g].iter().rev().find(|&&id| Some(id) != except))
            .copied()
    }

    /// The emptiest zspage.
    fn emptiest(&self) -> Option<u32> {
        (1..FULL_GROUP).find_map(|g| self.groups[g].last().copied())
    }

    // ---- compaction ------------------------------------------------------------------

    /// Whether the free slots add up to at least one whole zspage, so moving objects could
    /// free one (the kernel's `zs_can_compact`).
    fn can_compact(&self) -> bool {
        let capacity = self.live_zspages * self.geometry.objs_per_zspage;
        capacity - self.objects >= self.geometry.objs_per_zspage
    }

    /// One round: move objects from the emptiest zspage into the fullest other one until
    /// the source is empty (then it is freed) or the destination full. `None` when there is
    /// nothing worth moving. Moves at most one zspage's objects: the lock is held for a
    /// bounded time.
    pub(crate) fn compact_round(&mut self) -> Option<CompactRound> {
        if !self.can_compact() {
            return None;
        }
        let src_id = self.emptiest()?;
        let dst_id = self.fullest_nonfull(Some(src_id))?;
        let mut src = self.zspages[src_id as usize].take()?;
        let mut moved = 0;
        let mut buf = [0u8; PAGE_SIZE];
        for obj in 0..src.capacity() as u16 {
            let Some(owner) = src.owner(obj) else { continue };
            let dst = self.zspage_mut(dst_id);
            let Some(dst_obj) = dst.alloc_obj(owner) else { break };
            let size = usize::from(self.handles[owner as usize].size);
            src.read(self.offset_of(obj), &mut buf[..size]);
            let dst_offset = self.offset_of(dst_obj);
            self.zspage_mut(dst_id).write(dst_offset, &buf[..size]);
            let entry = &mut self.handles[owner as usize];
            entry.zspage = dst_id;
            entry.obj = dst_obj;
            src.free_obj(obj);
            moved += 1;
        }
        self.zspages[src_id as usize] = Some(src);
        let _dst_never_empties = self.fix_fullness(dst_id);
        let freed = self.fix_fullness(src_id);
        Some(CompactRound { moved, freed })
    }

    // ---- invariants ------------------------------------------------------------------

    /// Asserts the invariants of the module essay.
    pub(crate) fn check_invariants(&self) {
        let geometry = self.geometry;
        let mut live = 0;
        for (id, zspage) in self.zspages.iter().enumerate() {
            let Some(zspage) = zspage else { continue };
            live += 1;
            zspage.check_invariants(geometry.pages_per_zspage);
            assert_eq!(zspage.capacity(), geometry.objs_per_zspage);
            let group = fullness_group(zspage.inuse(), zspage.capacity());
            assert!(group != 0, "empty zspage {id} kept");
            assert_eq!(usize::from(zspage.group), group, "zspage {id} in the wrong group");
            if group == FULL_GROUP {
                assert_eq!(zspage.group_pos, UNLISTED, "full zspage {id} listed");
            } else {
                let listed = self.groups[group].get(zspage.group_pos as usize);
                assert_eq!(listed, Some(&(id as u32)), "zspage {id} not at its group position");
            }
            for obj in zspage.used_objs() {
                let owner = zspage.owner(obj).unwrap_or(DEAD) as usize;
                let entry = self.handles[owner];
                assert_eq!((entry.zspage, entry.obj), (id as u32, obj), "reverse map");
            }
        }
        assert_eq!(live, self.live_zspages, "live zspage count");
        let full = self.zspages.iter().flatten().filter(|z| z.inuse() == z.capacity()).count();
        let listed: usize = self.groups.iter().map(Vec::len).sum();
        assert_eq!(listed + full, live, "zspages listed in groups");
        assert!(self.groups[0].is_empty(), "empty group in use");
        assert!(self.groups[FULL_GROUP].is_empty(), "full zspages listed");
        let free_ids = self.zspages.iter().filter(|z| z.is_none()).count();
        assert_eq!(free_ids, self.free_zspage_ids.len(), "free zspage ids");
        self.check_handles();
    }

    fn check_handles(&self) {
        let (mut objects, mut bytes, mut dead) = (0, 0, 0);
        for (slot, entry) in self.handles.iter().enumerate() {
            if entry.zspage == DEAD {
                dead += 1;
                continue;
            }
            objects += 1;
            bytes += usize::from(entry.size);
            assert!(entry.size > 0 && usize::from(entry.size) <= self.geometry.size_bytes);
            let owner = self.zspage(entry.zspage).owner(entry.obj);
            assert_eq!(owner, Some(slot as u32), "slot {slot} points at a foreign object");
        }
        assert_eq!(dead, self.free_slots.len(), "free handle slots");
        for &slot in &self.free_slots {
            assert_eq!(self.handles[slot as usize].zspage, DEAD, "live slot on the free list");
        }
        assert_eq!(objects, self.objects, "object count");
        assert_eq!(bytes, self.object_bytes, "object bytes");
        let used: usize = self.zspages.iter().flatten().map(|z| z.inuse()).sum();
        assert_eq!(used, self.objects, "objects in zspages");
    }
}
