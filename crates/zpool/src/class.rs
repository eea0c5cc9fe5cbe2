//! The size-class table: which class a request goes to, and each class's zspage shape.
//!
//! A request of `size` bytes goes to step `ceil((size - 32) / 16)` (sizes up to 32 go to
//! step 0), whose object size is `32 + 16 * step`. Each step's zspage length is the number
//! of pages `k` in 1..=8 that wastes the smallest fraction of the zspage:
//!
//! ```text
//!   waste(k) = (k * 4096) mod size        chosen k = argmin waste(k) / k   (ties: fewer pages)
//!   e.g. size 1360:  k=1 waste 16/4096 = 0.39%    k=3 waste 48/12288 = 0.39%  → k = 1
//!        size 3000:  k=1 waste 1096 (26.8%), k=3 waste 288 (2.3%), k=8 2768 (8.4%) → k = 3
//! ```
//!
//! The kernel minimises the absolute waste instead; the fraction is what the memory
//! overhead is made of, and ties going to the shorter chain keep zspages small, which
//! makes compaction finer and the last, partly used zspage of a class cheaper.
//!
//! Merging: walking the steps from the largest down, a step whose (pages per zspage,
//! objects per zspage) equals those of the class just above it joins that class: its
//! objects could not be packed any tighter in a class of their own. Every step at or above
//! the first one with one object per one-page zspage thus lands in a single *huge class*.
//!
//! Invariant: classes are numbered by increasing object size; a step maps to the class with
//! the smallest object size at least its own, and every class's own step maps to itself.

use crate::{
    CLASS_DELTA_BYTES, MAX_ALLOC_BYTES, MAX_PAGES_PER_ZSPAGE, MIN_ALLOC_BYTES, PAGE_SIZE,
    SIZE_STEPS,
};

/// The index of a (merged) size class, 0 for the smallest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassIndex(pub u8);

/// The shape of one size class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassGeometry {
    /// Bytes per object slot (a multiple of 16).
    pub size_bytes: usize,
    /// Base pages chained into one zspage, 1..=8.
    pub pages_per_zspage: usize,
    /// Objects that fit in one zspage.
    pub objs_per_zspage: usize,
}

impl ClassGeometry {
    /// The shape for objects of `size_bytes`, with the least-waste zspage length.
    ///
    /// # Panics
    /// If `size_bytes` is 0 or larger than a page.
    pub fn for_size(size_bytes: usize) -> Self {
        assert!(size_bytes > 0 && size_bytes <= MAX_ALLOC_BYTES, "class size {size_bytes}");
        let pages_per_zspage = least_waste_pages(size_bytes);
        let objs_per_zspage = pages_per_zspage * PAGE_SIZE / size_bytes;
        ClassGeometry { size_bytes, pages_per_zspage, objs_per_zspage }
    }

    /// One object per one-page zspage: the class of near-incompressible pages.
    pub fn is_huge(&self) -> bool {
        self.pages_per_zspage == 1 && self.objs_per_zspage == 1
    }

    /// Bytes at the end of each zspage that no object can use.
    pub fn tail_waste_bytes(&self) -> usize {
        self.pages_per_zspage * PAGE_SIZE - self.objs_per_zspage * self.size_bytes
    }
}

/// The chain length in 1..=8 with the smallest waste fraction, ties to the shorter.
fn least_waste_pages(size_bytes: usize) -> usize {
    let mut best_pages = 1;
    let mut best_waste = PAGE_SIZE % size_bytes;
    for pages in 2..=MAX_PAGES_PER_ZSPAGE {
        let waste = (pages * PAGE_SIZE) % size_bytes;
        // waste / pages < best_waste / best_pages, without division.
        if waste * best_pages < best_waste * pages {
            best_pages = pages;
            best_waste = waste;
        }
    }
    best_pages
}

/// The object size of a size step.
pub const fn step_size_bytes(step: usize) -> usize {
    MIN_ALLOC_BYTES + step * CLASS_DELTA_BYTES
}

/// The size step a request of `size` bytes (1..=4096) rounds up to.
pub const fn step_of_size(size: usize) -> usize {
    if size <= MIN_ALLOC_BYTES {
        0
    } else {
        (size - MIN_ALLOC_BYTES).div_ceil(CLASS_DELTA_BYTES)
    }
}

/// All classes of a pool, after merging, and the step → class map.
#[derive(Debug, Clone)]
pub struct ClassTable {
    classes: Vec<ClassGeometry>,
    class_of_step: [u8; SIZE_STEPS],
}

impl ClassTable {
    /// Builds the table (a few microseconds; done once per pool).
    pub fn new() -> Self {
        // Walk from the largest step down so a step merges into the class above it.
        let mut descending: Vec<ClassGeometry> = Vec::with_capacity(SIZE_STEPS);
        let mut rank_of_step = [0usize; SIZE_STEPS];
        for step in (0..SIZE_STEPS).rev() {
            let geometry = ClassGeometry::for_size(step_size_bytes(step));
            let merges = descending.last().is_some_and(|above| {
                above.pages_per_zspage == geometry.pages_per_zspage
                    && above.objs_per_zspage == geometry.objs_per_zspage
            });
            if !merges {
                descending.push(geometry);
            }
            rank_of_step[step] = descending.len() - 1;
        }
        let count = descending.len();
        assert!(count <= usize::from(u8::MAX), "{count} classes do not fit a handle");
        let mut class_of_step = [0u8; SIZE_STEPS];
        for (step, rank) in rank_of_step.iter().enumerate() {
            // Ascending numbering: the largest class gets the highest index.
            class_of_step[step] = (count - 1 - rank) as u8;
        }
        descending.reverse();
        ClassTable { classes: descending, class_of_step }
    }

    /// How many classes remain after merging.
    pub fn len(&self) -> usize {
        self.classes.len()
    }

    /// Never true: there is at least the huge class.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// The class a request of `size` bytes goes to, or `None` outside 1..=4096.
    pub fn class_of_size(&self, size: usize) -> Option<ClassIndex> {
        if size == 0 || size > MAX_ALLOC_BYTES {
            return None;
        }
        Some(ClassIndex(self.class_of_step[step_of_size(size)]))
    }

    /// The shape of class `index`.
    ///
    /// # Panics
    /// If `index` is not a class of this table.
    pub fn geometry(&self, index: ClassIndex) -> ClassGeometry {
        self.classes[usize::from(index.0)]
    }

    /// All classes, smallest first.
    pub fn iter(&self) -> impl Iterator<Item = (ClassIndex, ClassGeometry)> + '_ {
        self.classes.iter().enumerate().map(|(i, g)| (ClassIndex(i as u8), *g))
    }

    /// The smallest object size that is stored one per page: compressing a page to this
    /// size or more saves no memory, so zswap should treat it as incompressible.
    pub fn huge_class_size(&self) -> usize {
        let huge = self.classes.iter().position(ClassGeometry::is_huge);
        let huge = huge.unwrap_or(self.classes.len() - 1);
        if huge == 0 {
            MIN_ALLOC_BYTES
        } else {
            // The class below the huge one ends where the huge class's steps begin.
            self.classes[huge - 1].size_bytes + 1
        }
    }

    /// Asserts the table's invariants (module essay).
    pub fn check_invariants(&self) {
        for pair in self.classes.windows(2) {
            assert!(pair[0].size_bytes < pair[1].size_bytes, "classes not ascending");
        }
        for step in 0..SIZE_STEPS {
            let size = step_size_bytes(step);
            let class = self.geometry(ClassIndex(self.class_of_step[step]));
            assert!(class.size_bytes >= size, "step {step} maps to a smaller class");
            assert!(class.objs_per_zspage >= 1);
            if step > 0 {
                let below = ClassIndex(self.class_of_step[step - 1]);
                assert!(below.0 <= self.class_of_step[step], "step map not monotonic");
            }
        }
        for (index, geometry) in self.iter() {
            let own = self.class_of_size(geometry.size_bytes);
            assert_eq!(own, Some(index), "class {index:?} does not map to itself");
        }
    }
}

impl Default for ClassTable {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_up() {
        assert_eq!(step_of_size(1), 0);
        assert_eq!(step_of_size(32), 0);
        assert_eq!(step_of_size(33), 1);
        assert_eq!(step_of_size(48), 1);
        assert_eq!(step_of_size(49), 2);
        assert_eq!(step_of_size(4096), SIZE_STEPS - 1);
        assert_eq!(step_size_bytes(SIZE_STEPS - 1), 4096);
    }

    #[test]
    fn least_waste_examples() {
        assert_eq!(ClassGeometry::for_size(4096).pages_per_zspage, 1);
        assert_eq!(ClassGeometry::for_size(2048).pages_per_zspage, 1);
        let g = ClassGeometry::for_size(3000);
        assert_eq!((g.pages_per_zspage, g.objs_per_zspage), (3, 4));
        let g = ClassGeometry::for_size(48);
        assert_eq!(g.pages_per_zspage, 3); // 12288 / 48 = 256 exactly
        assert_eq!(g.tail_waste_bytes(), 0);
    }

    #[test]
    fn table_is_consistent_and_merged() {
        let table = ClassTable::new();
        table.check_invariants();
        assert!(table.len() < SIZE_STEPS, "some steps must merge");
        assert!(table.geometry(ClassIndex(table.len() as u8 - 1)).is_huge());
        let huge = table.huge_class_size();
        assert!(huge > 3 * PAGE_SIZE / 4 && huge <= PAGE_SIZE, "huge class size {huge}");
        let below = table.class_of_size(huge - 1);
        let at = table.class_of_size(huge);
        assert!(!table.geometry(below.unwrap_or(ClassIndex(0))).is_huge());
        assert!(table.geometry(at.unwrap_or(ClassIndex(0))).is_huge());
    }

    #[test]
    fn out_of_range_sizes_have_no_class() {
        let table = ClassTable::new();
        assert_eq!(table.class_of_size(0), None);
        assert_eq!(table.class_of_size(4097), None);
        assert!(table.class_of_size(1).is_some());
    }

    #[test]
    fn waste_never_exceeds_one_object_per_zspage() {
        for step in 0..SIZE_STEPS {
            let g = ClassGeometry::for_size(step_size_bytes(step));
            assert!(g.tail_waste_bytes() < g.size_bytes);
        }
    }
}
