//! ZsPage: a chain of base pages holding the objects of one size class.
//!
//! The pages are separate 4 KiB pages from the pool's
//! [`PageArena`](crate::arena::PageArena) (the kernel's order-0 pages: no large allocation
//! is ever needed, and a chain's pages need not be adjacent; the arena carves them from
//! huge-page chunks). Objects are packed end to end across the chain: object `i` occupies
//! bytes `i * size .. (i + 1) * size` of the chain, so an object may start in one page and
//! end in the next; [`ZsPage::write`] and [`ZsPage::read`] copy it in two pieces then.
//!
//! Each object has a 4-byte [`ObjSlot`]: when the object is allocated, the handle-table
//! slot that owns it (the reverse map compaction needs to rewrite the handle); when free,
//! the next free object, forming the zspage's free list (LIFO, head in `free_head`).
//!
//! ```text
//!   objs:  [used h=17][free →3][used h=4][free →END][used h=9] ...   free_head = 1
//!   pages: [ page 0 ......................][ page 1 ..........] ...
//! ```
//!
//! A zspage of one object (the huge classes, where a page holds one object: every raw page
//! the pool keeps) has its one slot inline, so storing such a page makes one allocation,
//! not two (the kernel's one `zspage` slab object).
//!
//! The page pointers live inline in the `ZsPage` (not in a boxed slice beside it): a load
//! reaches an object's bytes through the handle table and the `ZsPage`, two dependent
//! memory reads, not three (on a cold load each is a likely cache miss).
//! [`ZsPage::with_object`] hands an object that lies in one page to its reader in place,
//! with no copy.
//!
//! Layout: what a free writes (the object slots, the free list head, the in-use count, the
//! fullness group) comes first, the page pointers after it, so for a one-object zspage the
//! slot a free writes and the page pointer a load reads lie in the first 40 bytes, not 64
//! apart: in one cache line half the time (the allocator aligns the descriptor to 16 bytes:
//! 40 bytes fit a line from offset 0 or 16), and then the page-in that loads an object and
//! frees it right after misses on it once. A load also starts fetching the line the free
//! will write ([`ZsPage::with_object`]) while the object's bytes are copied: in a profile of
//! the order-4 page-in, `ClassState::free` is about 1% of the samples.
//!
//! Invariants (checked by [`ZsPage::check_invariants`]): the free list visits exactly the
//! free objects, once each; `inuse` counts the used ones; the first `page_count` page
//! slots hold pages, the rest none, and `page_count` is the class's pages per zspage.

use crate::arena::PoolPage;
use crate::{MAX_PAGES_PER_ZSPAGE, PAGE_SIZE};
use std::mem::size_of;

/// Marks the end of a free list.
const NO_OBJ: u16 = u16::MAX;
/// Tag bit of a free object's slot.
const FREE_TAG: u32 = 1 << 31;

/// The per-object metadata word: `FREE_TAG | next free obj`, or the owning handle slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ObjSlot(u32);

impl ObjSlot {
    fn free(next: u16) -> Self {
        ObjSlot(FREE_TAG | u32::from(next))
    }

    fn used(owner: u32) -> Self {
        assert!(owner & FREE_TAG == 0, "handle slot {owner} too large");
        ObjSlot(owner)
    }

    fn owner(self) -> Option<u32> {
        (self.0 & FREE_TAG == 0).then_some(self.0)
    }

    fn next_free(self) -> Option<u16> {
        (self.0 & FREE_TAG != 0).then_some(self.0 as u16)
    }
}

/// A zspage's object slots: inline when it holds one object, else boxed. The same 16 bytes
/// either way (the one slot sits beside the box's non-null pointer niche).
#[derive(Debug)]
enum Slots {
    One(ObjSlot),
    Many(Box<[ObjSlot]>),
}

impl Slots {
    /// `objs` free slots chained in order into a free list; `None` when memory could not be
    /// had.
    fn new(objs: usize) -> Option<Slots> {
        if objs == 1 {
            return Some(Slots::One(ObjSlot::free(NO_OBJ)));
        }
        let mut slots = Vec::new();
        slots.try_reserve_exact(objs).ok()?;
        slots.extend(
            (0..objs)
                .map(|obj| ObjSlot::free(if obj + 1 < objs { (obj + 1) as u16 } else { NO_OBJ })),
        );
        Some(Slots::Many(slots.into_boxed_slice()))
    }
}

impl std::ops::Deref for Slots {
    type Target = [ObjSlot];
    fn deref(&self) -> &[ObjSlot] {
        match self {
            Slots::One(slot) => std::slice::from_ref(slot),
            Slots::Many(slots) => slots,
        }
    }
}

impl std::ops::DerefMut for Slots {
    fn deref_mut(&mut self) -> &mut [ObjSlot] {
        match self {
            Slots::One(slot) => std::slice::from_mut(slot),
            Slots::Many(slots) => slots,
        }
    }
}

/// A chain of pages and the objects in it.
#[derive(Debug)]
#[repr(C)] // field order kept: the free's fields, then the pages (module essay: layout)
pub(crate) struct ZsPage {
    objs: Slots,
    /// The fullness group this zspage is listed in, and its position in that list.
    pub(crate) group_pos: u32,
    free_head: u16,
    inuse: u16,
    pub(crate) group: u8,
    page_count: u8,
    pages: [Option<PoolPage>; MAX_PAGES_PER_ZSPAGE],
}

impl ZsPage {
    /// A new, empty zspage of `pages` pages holding `objs` objects, or `None` when memory
    /// could not be had.
    ///
    /// Context: allocates; call it with no lock held.
    #[cfg(test)]
    ///
    /// Boxed, so the class's zspage table holds one pointer per id, not the whole struct:
    /// the table keeps its high-water length, and 8 bytes per id there is what that costs.
    pub(crate) fn alloc(
        arena: &crate::arena::PageArena,
        pages: usize,
        objs: usize,
    ) -> Option<Box<Self>> {
        Self::alloc_from(pages, objs, || arena.alloc(), |page| arena.free(page))
    }

    /// As [`ZsPage::alloc`], taking its pages from `page` (the pool's spare pages first)
    /// and handing them to `give_back` if the zspage cannot be completed. A page's old
    /// contents never show: every object is written before it is read.
    pub(crate) fn alloc_from(
        pages: usize,
        objs: usize,
        mut page: impl FnMut() -> Option<PoolPage>,
        mut give_back: impl FnMut(PoolPage),
    ) -> Option<Box<Self>> {
        assert!(pages <= MAX_PAGES_PER_ZSPAGE, "a zspage of {pages} pages");
        let mut chain: [Option<PoolPage>; MAX_PAGES_PER_ZSPAGE] = Default::default();
        let slots = Slots::new(objs);
        let complete = slots.is_some()
            && chain.iter_mut().take(pages).all(|slot| {
                *slot = page();
                slot.is_some()
            });
        if !complete {
            chain.into_iter().flatten().for_each(&mut give_back);
            return None;
        }
        Some(Box::new(ZsPage {
            pages: chain,
            page_count: pages as u8,
            objs: slots?,
            free_head: if objs > 0 { 0 } else { NO_OBJ },
            inuse: 0,
            group: 0,
            group_pos: 0,
        }))
    }

    /// Gives the zspage's pages back (it must be empty: its objects are dead).
    #[allow(clippy::boxed_local)] // zspages live boxed; taking the box avoids a move out
    pub(crate) fn into_pages(self: Box<Self>) -> impl Iterator<Item = PoolPage> {
        debug_assert_eq!(self.inuse, 0, "pages of a zspage still in use");
        self.pages.into_iter().flatten()
    }

    /// Heap bytes a zspage of `objs` objects takes: the struct, and the boxed slots unless
    /// it has only one.
    pub(crate) fn meta_bytes(objs: usize) -> usize {
        size_of::<ZsPage>() + if objs == 1 { 0 } else { objs * size_of::<ObjSlot>() }
    }

    /// Objects in use.
    pub(crate) fn inuse(&self) -> usize {
        usize::from(self.inuse)
    }

    /// Objects this zspage holds when full.
    pub(crate) fn capacity(&self) -> usize {
        self.objs.len()
    }

    /// Pages in the chain.
    pub(crate) fn page_count(&self) -> usize {
        usize::from(self.page_count)
    }

    fn page(&self, index: usize) -> &[u8; PAGE_SIZE] {
        let page = self.pages.get(index).and_then(Option::as_ref);
        page.unwrap_or_else(|| panic!("page {index} beyond a zspage of {}", self.page_count))
    }

    fn page_mut(&mut self, index: usize) -> &mut [u8; PAGE_SIZE] {
        let count = self.page_count;
        let page = self.pages.get_mut(index).and_then(Option::as_mut);
        page.unwrap_or_else(|| panic!("page {index} beyond a zspage of {count}"))
    }

    /// Takes a free object for handle slot `owner`; `None` when full.
    pub(crate) fn alloc_obj(&mut self, owner: u32) -> Option<u16> {
        if self.free_head == NO_OBJ {
            return None;
        }
        let obj = self.free_head;
        let next = self.objs[usize::from(obj)].next_free();
        self.free_head = next.unwrap_or_else(|| panic!("free list reached used object {obj}"));
        self.objs[usize::from(obj)] = ObjSlot::used(owner);
        self.inuse += 1;
        Some(obj)
    }

    /// Frees object `obj` and returns the handle slot that owned it.
    ///
    /// # Panics
    /// If `obj` is already free (a double free inside the pool).
    pub(crate) fn free_obj(&mut self, obj: u16) -> u32 {
        let owner = self.owner(obj).unwrap_or_else(|| panic!("double free of object {obj}"));
        self.objs[usize::from(obj)] = ObjSlot::free(self.free_head);
        self.free_head = obj;
        self.inuse -= 1;
        owner
    }

    /// The handle slot owning object `obj`, or `None` if it is free.
    pub(crate) fn owner(&self, obj: u16) -> Option<u32> {
        self.objs[usize::from(obj)].owner()
    }

    /// The used objects, in index order.
    pub(crate) fn used_objs(&self) -> impl Iterator<Item = u16> + '_ {
        self.objs.iter().enumerate().filter(|(_, s)| s.owner().is_some()).map(|(i, _)| i as u16)
    }

    /// Copies `data` into the chain at byte `offset`, across a page edge if need be.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        let mut offset = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let (page, in_page) = (offset / PAGE_SIZE, offset % PAGE_SIZE);
            let n = rest.len().min(PAGE_SIZE - in_page);
            self.page_mut(page)[in_page..in_page + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            offset += n;
        }
    }

    /// Copies `out.len()` bytes out of the chain from byte `offset`.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        let mut offset = offset;
        let mut rest = out;
        while !rest.is_empty() {
            let (page, in_page) = (offset / PAGE_SIZE, offset % PAGE_SIZE);
            let n = rest.len().min(PAGE_SIZE - in_page);
            rest[..n].copy_from_slice(&self.page(page)[in_page..in_page + n]);
            rest = &mut rest[n..];
            offset += n;
        }
    }

    /// Calls `reader` with the `len` bytes from `offset`: in place when they lie in one
    /// page, else copied into `scratch` first (which must hold `len` bytes).
    pub(crate) fn with_object<R>(
        &self,
        offset: usize,
        len: usize,
        scratch: &mut [u8],
        reader: impl FnOnce(&[u8]) -> R,
    ) -> R {
        // The free that usually follows a load writes `objs` (module essay: layout).
        crate::arena::prefetch(&self.objs);
        let in_page = offset % PAGE_SIZE;
        if in_page + len <= PAGE_SIZE {
            return reader(&self.page(offset / PAGE_SIZE)[in_page..in_page + len]);
        }
        self.read(offset, &mut scratch[..len]);
        reader(&scratch[..len])
    }

    /// The page an object at `offset` of `len` bytes fills exactly, if it is a whole page
    /// (a raw page's object), for [`crate::arena::join`]. Prefetches what a free writes, as
    /// [`ZsPage::with_object`] does.
    pub(crate) fn whole_page(&self, offset: usize, len: usize) -> Option<&PoolPage> {
        crate::arena::prefetch(&self.objs);
        if len != PAGE_SIZE || !offset.is_multiple_of(PAGE_SIZE) {
            return None;
        }
        self.pages.get(offset / PAGE_SIZE).and_then(Option::as_ref)
    }

    /// Asserts the free list and the in-use count (module essay).
    pub(crate) fn check_invariants(&self, pages_per_zspage: usize) {
        assert_eq!(self.page_count(), pages_per_zspage, "zspage chain length");
        for (index, page) in self.pages.iter().enumerate() {
            assert_eq!(page.is_some(), index < pages_per_zspage, "page slot {index}");
        }
        let mut seen = vec![false; self.objs.len()];
        let mut free = 0;
        let mut cursor = self.free_head;
        while cursor != NO_OBJ {
            let obj = usize::from(cursor);
            assert!(!seen[obj], "free list loops at object {obj}");
            seen[obj] = true;
            free += 1;
            cursor = self.objs[obj].next_free().unwrap_or_else(|| panic!("used obj {obj} listed"));
        }
        let used = self.objs.iter().filter(|s| s.owner().is_some()).count();
        assert_eq!(used + free, self.objs.len(), "objects neither used nor on the free list");
        assert_eq!(used, self.inuse(), "in-use count");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_object_zspage_keeps_its_slot_inline() {
        // The inline slot costs the struct no size.
        assert_eq!(size_of::<Slots>(), size_of::<Box<[ObjSlot]>>());
        let arena = crate::arena::PageArena::new();
        let Some(mut zspage) = ZsPage::alloc(&arena, 1, 1) else { panic!("no memory") };
        assert!(matches!(zspage.objs, Slots::One(_)));
        assert_eq!(zspage.alloc_obj(7), Some(0));
        assert_eq!(zspage.alloc_obj(8), None, "one object only");
        assert_eq!(zspage.owner(0), Some(7));
        assert_eq!(zspage.free_obj(0), 7);
        zspage.check_invariants(1);
        assert_eq!(zspage.alloc_obj(9), Some(0), "the freed object is taken again");
        assert_eq!(ZsPage::meta_bytes(1), size_of::<ZsPage>());
        assert_eq!(ZsPage::meta_bytes(3), size_of::<ZsPage>() + 12);
    }

    #[test]
    fn a_raw_pages_free_and_load_fields_share_forty_bytes() {
        // Module essay, layout: the fields a free writes, then the first page pointer a
        // load reads, all in the first 40 bytes; and no byte more than the 96 it had.
        assert_eq!(std::mem::offset_of!(ZsPage, objs), 0);
        assert_eq!(std::mem::offset_of!(ZsPage, pages), 32);
        assert!(std::mem::offset_of!(ZsPage, page_count) < 32);
        assert_eq!(size_of::<ZsPage>(), 96);
    }

    #[test]
    fn straddling_object_round_trips() {
        let arena = crate::arena::PageArena::new();
        let Some(mut zspage) = ZsPage::alloc(&arena, 3, 256) else { panic!("no memory") };
        let data: Vec<u8> = (0..48u8).collect();
        // Object 85 of a 48-byte class: bytes 4080..4128, across pages 0 and 1.
        zspage.write(85 * 48, &data);
        let mut out = [0u8; 48];
        zspage.read(85 * 48, &mut out);
        assert_eq!(&out[..], &data[..]);
        assert_eq!(zspage.page(0)[4080..], data[..16]);
        assert_eq!(zspage.page(1)[..32], data[16..]);
    }

    #[test]
    fn with_object_reads_in_place_or_through_scratch() {
        let arena = crate::arena::PageArena::new();
        let Some(mut zspage) = ZsPage::alloc(&arena, 3, 256) else { panic!("no memory") };
        let data: Vec<u8> = (0..48u8).collect();
        zspage.write(84 * 48, &data); // bytes 4032..4080: in page 0
        zspage.write(85 * 48, &data); // bytes 4080..4128: across pages 0 and 1
        let mut scratch = [0xAAu8; 48];
        let in_place = zspage.with_object(84 * 48, 48, &mut scratch, |b| b.to_vec());
        assert_eq!(in_place, data);
        assert_eq!(scratch, [0xAA; 48], "an object in one page is read in place");
        let across = zspage.with_object(85 * 48, 48, &mut scratch, |b| b.to_vec());
        assert_eq!(across, data);
        assert_eq!(&scratch[..], &data[..], "a straddling object goes through scratch");
        zspage.check_invariants(3);
    }

    #[test]
    fn free_list_is_lifo_and_checked() {
        let arena = crate::arena::PageArena::new();
        let Some(mut zspage) = ZsPage::alloc(&arena, 1, 4) else { panic!("no memory") };
        let a = zspage.alloc_obj(10);
        let b = zspage.alloc_obj(11);
        assert_eq!((a, b), (Some(0), Some(1)));
        assert_eq!(zspage.free_obj(0), 10);
        assert_eq!(zspage.alloc_obj(12), Some(0));
        zspage.check_invariants(1);
        assert_eq!(zspage.alloc_obj(13), Some(2));
        assert_eq!(zspage.alloc_obj(14), Some(3));
        assert_eq!(zspage.alloc_obj(15), None);
        assert_eq!(zspage.inuse(), 4);
        zspage.check_invariants(1);
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_caught() {
        let arena = crate::arena::PageArena::new();
        let Some(mut zspage) = ZsPage::alloc(&arena, 1, 2) else { panic!("no memory") };
        let obj = zspage.alloc_obj(1).unwrap_or(0);
        zspage.free_obj(obj);
        zspage.free_obj(obj);
    }
}
