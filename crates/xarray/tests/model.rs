//! Model test: random operations on an `XArray<Arc<Tracked>>` and on a `BTreeMap` model of
//! `first index -> (order, value or item id, marks)`, compared after every operation, with
//! `check_invariants()` after every operation and a live-item count that catches leaks and
//! double drops. Spare nodes from a `NodeReserve` are mixed in, so reused nodes are checked
//! too.
//!
//! Indices cluster in four windows (0, 2^20, 2^40 and the top 4096 of the key space) so
//! multi-index stores overlap, and orders run 0..=20 with a tail of 58..=64 for the
//! bad-input paths (misaligned, order too large, split to a larger order, value too large).

use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};
use xarray::{Entry, EntryRef, Error, Mark, NodeReserve, XArray, MAX_SPLIT_ORDERS, MAX_VALUE};

/// An item that counts how many of its kind are alive.
#[derive(Debug)]
struct Tracked {
    id: u64,
    live: Arc<AtomicI64>,
}

impl Tracked {
    fn new(id: u64, live: &Arc<AtomicI64>) -> Arc<Self> {
        live.fetch_add(1, Ordering::SeqCst);
        Arc::new(Tracked { id, live: Arc::clone(live) })
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Val {
    Value(u64),
    Item(u64),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct MEntry {
    order: u32,
    val: Val,
    marks: [bool; 3],
}

fn last(first: u64, order: u32) -> u64 {
    first + ((1u64 << order) - 1)
}

/// The model: entries by first index, disjoint.
#[derive(Default)]
struct Model {
    map: BTreeMap<u64, MEntry>,
}

impl Model {
    /// Entries intersecting `[start, end]`, in order.
    fn intersecting(&self, start: u64, end: u64) -> Vec<(u64, MEntry)> {
        let mut out = Vec::new();
        if let Some((&first, &e)) = self.map.range(..start).next_back() {
            if last(first, e.order) >= start {
                out.push((first, e));
            }
        }
        out.extend(self.map.range(start..=end).map(|(&f, &e)| (f, e)));
        out
    }

    fn covering(&self, index: u64) -> Option<(u64, MEntry)> {
        self.intersecting(index, index).into_iter().next()
    }

    fn check_range(index: u64, order: u32) -> Result<(), Error> {
        if order > 63 {
            return Err(Error::OrderTooLarge { order });
        }
        if index & ((1u64 << order) - 1) != 0 {
            return Err(Error::Misaligned { index, order });
        }
        Ok(())
    }

    fn check_value(val: Val) -> Result<(), Error> {
        match val {
            Val::Value(value) if value > MAX_VALUE => Err(Error::ValueTooLarge { value }),
            _ => Ok(()),
        }
    }

    fn covered(&self, index: u64, order: u32) -> Result<(), Error> {
        match self.covering(index) {
            Some((first, e)) if e.order > order => {
                Err(Error::Covered { index: first, order: e.order })
            }
            _ => Ok(()),
        }
    }

    /// Store after checks: returns the replaced entries.
    fn store(&mut self, index: u64, order: u32, val: Val) -> Vec<(u64, MEntry)> {
        let old = self.intersecting(index, last(index, order));
        let mut marks = [false; 3];
        for (first, e) in &old {
            self.map.remove(first);
            for (mark, &set) in marks.iter_mut().zip(&e.marks) {
                *mark |= set;
            }
        }
        self.map.insert(index, MEntry { order, val, marks });
        old
    }

    fn split(&mut self, first: u64, new_order: u32) {
        let e = self.map.remove(&first).expect("split of a model entry");
        for piece in 0..(1u64 << (e.order - new_order)) {
            self.map.insert(first + (piece << new_order), MEntry { order: new_order, ..e });
        }
    }

    fn live_items(&self) -> i64 {
        let ids: HashSet<u64> = self
            .map
            .values()
            .filter_map(|e| match e.val {
                Val::Item(id) => Some(id),
                Val::Value(_) => None,
            })
            .collect();
        ids.len() as i64
    }
}

#[derive(Debug, Clone)]
enum Op {
    Store {
        index: u64,
        order: u32,
        val: Val,
    },
    Insert {
        index: u64,
        order: u32,
        val: Val,
    },
    Erase {
        index: u64,
    },
    EraseRange {
        start: u64,
        len: u64,
    },
    Replace {
        index: u64,
        val: Val,
    },
    Cmpxchg {
        index: u64,
        expect_right: bool,
        new: Option<Val>,
    },
    Split {
        index: u64,
        new_order: u32,
    },
    SetMark {
        index: u64,
        mark: usize,
    },
    ClearMark {
        index: u64,
        mark: usize,
    },
    IterRange {
        start: u64,
        len: u64,
        mark: Option<usize>,
    },
    AddFolio {
        index: u64,
        order: u32,
    },
    Probe {
        index: u64,
    },
    /// Spare nodes for the next stores and splits to use (no change the model sees).
    Refill {
        count: usize,
    },
}

const WINDOWS: [u64; 4] = [0, 1 << 20, 1 << 40, u64::MAX - 4095];

fn index() -> impl Strategy<Value = u64> {
    (0..WINDOWS.len(), 0u64..4096).prop_map(|(w, off)| WINDOWS[w] + off)
}

fn order() -> impl Strategy<Value = u32> {
    prop_oneof![10 => 0u32..=4, 8 => 5u32..=12, 2 => 13u32..=20, 1 => 58u32..=64]
}

/// An index aligned to `order` most of the time (misaligned stores are refused).
fn ranged() -> impl Strategy<Value = (u64, u32)> {
    (index(), order(), 0..10u8).prop_map(|(index, order, dice)| {
        let aligned = if order >= 64 { index } else { index & !((1u64 << order) - 1) };
        (if dice == 0 { index } else { aligned }, order)
    })
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        6 => (0u64..1000).prop_map(Val::Value),
        1 => Just(Val::Value(MAX_VALUE)),
        1 => Just(Val::Value(MAX_VALUE + 1)),
        6 => Just(Val::Item(0)), // a fresh item; the id is assigned when run
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (ranged(), val()).prop_map(|((index, order), val)| Op::Store { index, order, val }),
        4 => (ranged(), val()).prop_map(|((index, order), val)| Op::Insert { index, order, val }),
        4 => index().prop_map(|index| Op::Erase { index }),
        2 => (index(), 0u64..3000).prop_map(|(start, len)| Op::EraseRange { start, len }),
        2 => (index(), val()).prop_map(|(index, val)| Op::Replace { index, val }),
        3 => (index(), any::<bool>(), proptest::option::of(val()))
            .prop_map(|(index, expect_right, new)| Op::Cmpxchg { index, expect_right, new }),
        4 => (index(), order()).prop_map(|(index, new_order)| Op::Split { index, new_order }),
        3 => (index(), 0usize..3).prop_map(|(index, mark)| Op::SetMark { index, mark }),
        2 => (index(), 0usize..3).prop_map(|(index, mark)| Op::ClearMark { index, mark }),
        2 => (index(), 0u64..5000, proptest::option::of(0usize..3))
            .prop_map(|(start, len, mark)| Op::IterRange { start, len, mark }),
        4 => ranged().prop_map(|(index, order)| Op::AddFolio { index, order }),
        3 => index().prop_map(|index| Op::Probe { index }),
        1 => (0usize..20).prop_map(|count| Op::Refill { count }),
    ]
}

/// The harness: the array, the model, and the items' bookkeeping.
struct Harness {
    xa: XArray<Arc<Tracked>>,
    model: Model,
    live: Arc<AtomicI64>,
    next_id: u64,
    weak: HashMap<u64, Weak<Tracked>>,
}

fn view(entry: EntryRef<'_, Tracked>) -> Val {
    match entry {
        EntryRef::Value(v) => Val::Value(v),
        EntryRef::Item(item) => Val::Item(item.id),
    }
}

fn owned(entry: &Entry<Arc<Tracked>>) -> Val {
    match entry {
        Entry::Value(v) => Val::Value(*v),
        Entry::Item(item) => Val::Item(item.id),
    }
}

const MARKS: [Mark; 3] = [Mark::M0, Mark::M1, Mark::M2];

impl Harness {
    fn new() -> Self {
        Harness {
            xa: XArray::new(),
            model: Model::default(),
            live: Arc::new(AtomicI64::new(0)),
            next_id: 1,
            weak: HashMap::new(),
        }
    }

    /// Makes the entry for `val` (a fresh item for `Val::Item`), and its model value.
    fn make(&mut self, val: Val) -> (Entry<Arc<Tracked>>, Val) {
        match val {
            Val::Value(v) => (Entry::Value(v), val),
            Val::Item(_) => {
                let id = self.next_id;
                self.next_id += 1;
                let item = Tracked::new(id, &self.live);
                self.weak.insert(id, Arc::downgrade(&item));
                (Entry::Item(item), Val::Item(id))
            }
        }
    }

    fn run(&mut self, op: &Op) {
        match *op {
            Op::Store { index, order, val } => self.store(index, order, val),
            Op::Insert { index, order, val } => self.insert(index, order, val),
            Op::Erase { index } => {
                let expected = self.model.covering(index);
                if let Some((first, _)) = expected {
                    self.model.map.remove(&first);
                }
                let got = self.xa.erase(index);
                assert_eq!(got.as_ref().map(owned), expected.map(|(_, e)| e.val));
            }
            Op::EraseRange { start, len } => {
                let end = start.saturating_add(len);
                let expected = self.model.intersecting(start, end);
                for (first, _) in &expected {
                    self.model.map.remove(first);
                }
                let mut got = Vec::new();
                let n = self.xa.erase_range(start..=end, |f, o, e| got.push((f, o, owned(&e))));
                let want: Vec<_> = expected.iter().map(|(f, e)| (*f, e.order, e.val)).collect();
                assert_eq!(got, want);
                assert_eq!(n, want.len());
            }
            Op::Replace { index, val } => self.replace(index, val),
            Op::Cmpxchg { index, expect_right, new } => self.cmpxchg(index, expect_right, new),
            Op::Split { index, new_order } => self.split(index, new_order),
            Op::SetMark { index, mark } => {
                let present = self.model.covering(index);
                if let Some((first, _)) = present {
                    self.model.map.get_mut(&first).expect("model").marks[mark] = true;
                }
                assert_eq!(self.xa.set_mark(index, MARKS[mark]), present.is_some());
            }
            Op::ClearMark { index, mark } => {
                let present = self.model.covering(index);
                if let Some((first, _)) = present {
                    self.model.map.get_mut(&first).expect("model").marks[mark] = false;
                }
                assert_eq!(self.xa.clear_mark(index, MARKS[mark]), present.is_some());
            }
            Op::IterRange { start, len, mark } => self.iter_range(start, len, mark),
            Op::AddFolio { index, order } => self.add_folio(index, order),
            Op::Probe { index } => self.probe(index),
            Op::Refill { count } => {
                let spares = self.xa.spare_nodes();
                self.xa.refill(NodeReserve::new(count));
                assert_eq!(self.xa.spare_nodes(), spares + count);
            }
        }
    }

    fn store(&mut self, index: u64, order: u32, val: Val) {
        let want = Model::check_range(index, order)
            .and(Model::check_value(val))
            .and_then(|()| self.model.covered(index, order));
        let (entry, mval) = self.make(val);
        let got = self.xa.store_order(index, order, entry);
        match want {
            Err(error) => {
                let refused = got.expect_err("the model refuses this store");
                assert_eq!(refused.error, error);
                assert_eq!(refused.entry.as_ref().map(owned), Some(mval), "entry handed back");
            }
            Ok(()) => {
                let old = self.model.store(index, order, mval);
                let at_index = old.iter().find(|(f, _)| *f == index).map(|(_, e)| e.val);
                let got = got.expect("the model accepts this store");
                assert_eq!(got.as_ref().map(owned), at_index);
            }
        }
    }

    fn insert(&mut self, index: u64, order: u32, val: Val) {
        let want =
            Model::check_range(index, order).and(Model::check_value(val)).and_then(|()| match self
                .model
                .intersecting(index, last(index, order))
                .first()
            {
                Some(&(first, e)) => Err(Error::Occupied { index: first, order: e.order }),
                None => Ok(()),
            });
        let (entry, mval) = self.make(val);
        let got = self.xa.insert(index, order, entry);
        match want {
            Err(error) => assert_eq!(got.expect_err("model refuses").error, error),
            Ok(()) => {
                got.expect("model accepts the insert");
                self.model.store(index, order, mval);
            }
        }
    }

    fn replace(&mut self, index: u64, val: Val) {
        let want = Model::check_value(val)
            .and_then(|()| self.model.covering(index).ok_or(Error::NotPresent { index }));
        let (entry, mval) = self.make(val);
        let got = self.xa.replace(index, entry);
        match want {
            Err(error) => assert_eq!(got.expect_err("model refuses").error, error),
            Ok((first, e)) => {
                assert_eq!(owned(&got.expect("model accepts the replace")), e.val);
                self.model.map.get_mut(&first).expect("model").val = mval;
            }
        }
    }

    fn cmpxchg(&mut self, index: u64, expect_right: bool, new: Option<Val>) {
        let current = self.model.covering(index);
        // The expected entry: the right one, or a wrong one (another value, a dead item id,
        // or "empty" where something is).
        let right = current.map(|(_, e)| e.val);
        let expected = if expect_right {
            right
        } else {
            match right {
                Some(Val::Value(v)) => Some(Val::Value(v + 1)),
                Some(Val::Item(_)) => None,
                None => Some(Val::Value(5)),
            }
        };
        let holder = expected.and_then(|val| match val {
            Val::Item(id) => self.weak.get(&id).and_then(Weak::upgrade),
            Val::Value(_) => None,
        });
        let expected_ref = match expected {
            None => None,
            Some(Val::Value(v)) => Some(EntryRef::Value(v)),
            Some(Val::Item(_)) => Some(EntryRef::Item(&**holder.as_ref().expect("live item"))),
        };
        let new_entry = new.map(|v| self.make(v));
        let new_val = new_entry.as_ref().map(|(_, v)| *v);
        let want = match new_val.map(Model::check_value) {
            Some(Err(error)) => Err(error),
            _ if expected != right => Err(Error::Mismatch { index }),
            _ => Ok(()),
        };
        let got = self.xa.compare_exchange(index, expected_ref, new_entry.map(|(e, _)| e));
        drop(holder);
        match want {
            Err(error) => assert_eq!(got.expect_err("model refuses").error, error),
            Ok(()) => {
                let old = got.expect("model accepts the cmpxchg");
                assert_eq!(old.as_ref().map(owned), right);
                match (current, new_val) {
                    (Some((first, _)), Some(v)) => {
                        self.model.map.get_mut(&first).expect("model").val = v;
                    }
                    (Some((first, _)), None) => {
                        self.model.map.remove(&first);
                    }
                    (None, Some(v)) => {
                        self.model.store(index, 0, v);
                    }
                    (None, None) => {}
                }
            }
        }
    }

    fn split(&mut self, index: u64, new_order: u32) {
        let want = match self.model.covering(index) {
            None => Err(Error::NotPresent { index }),
            Some((_, e)) if new_order > e.order => {
                Err(Error::SplitToLarger { order: e.order, new_order })
            }
            Some((_, e)) if e.order - new_order > MAX_SPLIT_ORDERS => {
                Err(Error::SplitTooLarge { order: e.order, new_order })
            }
            Some(found) => Ok(found),
        };
        let got = self.xa.split(index, new_order);
        match want {
            Err(error) => assert_eq!(got.expect_err("model refuses the split"), error),
            Ok((first, _)) => {
                got.expect("model accepts the split");
                self.model.split(first, new_order);
            }
        }
    }

    fn iter_range(&mut self, start: u64, len: u64, mark: Option<usize>) {
        let end = start.saturating_add(len);
        let want: Vec<(u64, u32, Val)> = self
            .model
            .intersecting(start, end)
            .into_iter()
            .filter(|(_, e)| mark.is_none_or(|m| e.marks[m]))
            .map(|(f, e)| (f, e.order, e.val))
            .collect();
        let iter = match mark {
            Some(m) => self.xa.iter_marked(start..=end, MARKS[m]),
            None => self.xa.iter_range(start..=end),
        };
        let got: Vec<_> = iter.map(|(f, o, e)| (f, o, view(e))).collect();
        assert_eq!(got, want);
        if let Some(m) = mark {
            let found = self.xa.find_marked(start, end, MARKS[m]).map(|(f, o, e)| (f, o, view(e)));
            assert_eq!(found, want.first().copied());
        }
    }

    /// The one-walk folio add through the cursor, against the model.
    fn add_folio(&mut self, index: u64, order: u32) {
        let (entry, mval) = self.make(Val::Item(0));
        let want = Model::check_range(index, order).and_then(|()| {
            let found = self.model.intersecting(index, last(index, order));
            if let Some((first, e)) = found.iter().find(|(_, e)| matches!(e.val, Val::Item(_))) {
                return Err(Error::Occupied { index: *first, order: e.order });
            }
            match found.first() {
                Some(&(_, e)) if e.order > order && e.order - order > MAX_SPLIT_ORDERS => {
                    Err(Error::SplitTooLarge { order: e.order, new_order: order })
                }
                _ => Ok(found.first().map(|&(_, e)| (e.val, e.order))),
            }
        });
        let got = add_folio(&mut self.xa, index, order, entry);
        match want {
            Err(error) => assert_eq!(got.expect_err("model refuses the add"), error),
            Ok(shadow) => {
                assert_eq!(got.expect("model accepts the add"), shadow);
                if let Some((first, e)) = self.model.covering(index) {
                    if e.order > order {
                        self.model.split(first, order);
                    }
                }
                self.model.store(index, order, mval);
            }
        }
    }

    fn probe(&self, index: u64) {
        let want = self.model.covering(index);
        let got = self.xa.load_order(index).map(|(f, o, e)| (f, o, view(e)));
        assert_eq!(got, want.map(|(f, e)| (f, e.order, e.val)));
        assert_eq!(self.xa.get_order(index), want.map(|(_, e)| e.order));
        assert_eq!(self.xa.load(index).map(view), want.map(|(_, e)| e.val));
    }

    /// The whole comparison, after every operation.
    fn compare(&self) {
        self.xa.check_invariants();
        let got: Vec<(u64, u32, Val, [bool; 3])> = self
            .xa
            .iter()
            .map(|(f, o, e)| (f, o, view(e), MARKS.map(|m| self.xa.get_mark(f, m))))
            .collect();
        let want: Vec<_> =
            self.model.map.iter().map(|(&f, e)| (f, e.order, e.val, e.marks)).collect();
        assert_eq!(got, want);
        assert_eq!(self.xa.len(), self.model.map.len() as u64);
        assert_eq!(self.xa.is_empty(), self.model.map.is_empty());
        assert_eq!(self.live.load(Ordering::SeqCst), self.model.live_items(), "item leak");
        for (&first, e) in &self.model.map {
            self.probe(first);
            self.probe(last(first, e.order));
        }
    }
}

/// The one-walk folio add, as the engine will write it (the same code as the cursor
/// module's documentation example, returning the error kinds the model predicts).
fn add_folio(
    xa: &mut XArray<Arc<Tracked>>,
    index: u64,
    order: u32,
    folio: Entry<Arc<Tracked>>,
) -> Result<Option<(Val, u32)>, Error> {
    let mut xas = xa.cursor(index, order)?;
    let mut shadow = None;
    while let Some((first, found_order, entry)) = xas.next_conflict() {
        match entry {
            EntryRef::Item(_) => return Err(Error::Occupied { index: first, order: found_order }),
            EntryRef::Value(v) => shadow = shadow.or(Some((Val::Value(v), found_order))),
        }
    }
    if shadow.is_some_and(|(_, found_order)| found_order > order) {
        xas.split()?;
    }
    xas.store(folio).map_err(|refused| refused.error)?;
    Ok(shadow)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn xarray_matches_btreemap_model(ops in proptest::collection::vec(op(), 1..80)) {
        let mut harness = Harness::new();
        for op in &ops {
            harness.run(op);
            harness.compare();
        }
        drop(harness.xa);
        prop_assert_eq!(harness.live.load(Ordering::SeqCst), 0, "items leaked at drop");
    }
}
