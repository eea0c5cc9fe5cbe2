//! The cursor, and the one-walk folio add the swap cache and the region page tables follow
//! (the seed's `__filemap_add_folio` shape: conflicts, shadow order, split when needed,
//! store, under one lock hold).

use std::sync::Arc;
use xarray::{Entry, EntryRef, Error, XArray};

/// A stand-in for the engine's folio.
#[derive(Debug, PartialEq)]
struct Folio {
    id: u64,
}

/// What the add found: the first shadow in the range, with its order.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    shadow: Option<(u64, u32)>,
}

/// The one-walk add: fail if any folio is in `[index, index + 2^order)`; remember the first
/// shadow there and its order; split a larger shadow covering the range down to the folio's
/// order; store the folio over the range (smaller shadows inside are replaced).
fn add_folio(
    xa: &mut XArray<Arc<Folio>>,
    index: u64,
    order: u32,
    folio: Arc<Folio>,
) -> Result<Found, Error> {
    let mut xas = xa.cursor(index, order)?;
    let mut shadow = None;
    while let Some((first, found_order, entry)) = xas.next_conflict() {
        match entry {
            EntryRef::Item(_) => return Err(Error::Occupied { index: first, order: found_order }),
            EntryRef::Value(value) => shadow = shadow.or(Some((value, found_order))),
        }
    }
    if shadow.is_some_and(|(_, found_order)| found_order > order) {
        xas.split()?;
    }
    xas.store(Entry::Item(folio)).map_err(|refused| refused.error)?;
    Ok(Found { shadow })
}

fn folio(id: u64) -> Arc<Folio> {
    Arc::new(Folio { id })
}

fn layout(xa: &XArray<Arc<Folio>>) -> Vec<(u64, u32, String)> {
    xa.iter()
        .map(|(first, order, entry)| {
            let what = match entry {
                EntryRef::Value(v) => format!("shadow {v}"),
                EntryRef::Item(f) => format!("folio {}", f.id),
            };
            (first, order, what)
        })
        .collect()
}

#[test]
fn one_walk_folio_add() {
    let mut xa = XArray::new();

    // Into an empty range: no shadow.
    assert_eq!(add_folio(&mut xa, 0, 2, folio(1)), Ok(Found { shadow: None }));

    // Over a shadow of the same order: the shadow is reported and replaced.
    xa.store_order(64, 4, Entry::Value(10)).expect("store");
    assert_eq!(add_folio(&mut xa, 64, 4, folio(2)), Ok(Found { shadow: Some((10, 4)) }));

    // Inside a larger shadow (a 2 MiB folio evicted, a 32 KiB one coming back): the shadow
    // is split to the folio's order, only the folio's piece is replaced.
    xa.store_order(1024, 9, Entry::Value(20)).expect("store");
    assert_eq!(add_folio(&mut xa, 1024 + 64, 3, folio(3)), Ok(Found { shadow: Some((20, 9)) }));
    let pieces: Vec<_> = xa.iter_range(1024..=1535).collect();
    assert_eq!(pieces.len(), 64);
    assert!(pieces.iter().all(|&(_, order, _)| order == 3));
    assert_eq!(xa.load(1024 + 64).and_then(EntryRef::item).map(|f| f.id), Some(3));
    assert_eq!(xa.load(1024 + 72).and_then(EntryRef::value), Some(20));

    // Over several smaller shadows: all replaced, the first one reported.
    for page in 0..8 {
        xa.store(4096 + page * 64, Entry::Value(30 + page)).expect("store");
    }
    assert_eq!(add_folio(&mut xa, 4096, 9, folio(4)), Ok(Found { shadow: Some((30, 0)) }));
    assert_eq!(xa.iter_range(4096..=4607).count(), 1);

    // A folio anywhere in the range: refused, nothing changes.
    let before = layout(&xa);
    assert_eq!(
        add_folio(&mut xa, 1024, 9, folio(5)),
        Err(Error::Occupied { index: 1024 + 64, order: 3 })
    );
    assert_eq!(add_folio(&mut xa, 0, 0, folio(6)), Err(Error::Occupied { index: 0, order: 2 }));
    assert_eq!(add_folio(&mut xa, 3, 1, folio(7)), Err(Error::Misaligned { index: 3, order: 1 }));
    assert_eq!(layout(&xa), before);
    xa.check_invariants();
}

#[test]
fn cursor_reads_order_and_erases_its_range() {
    let mut xa = XArray::<Arc<Folio>>::new();
    xa.store_order(512, 9, Entry::Value(1)).expect("store");
    xa.store(1024, Entry::Value(2)).expect("store");
    let mut xas = xa.cursor(768, 6).expect("cursor");
    assert_eq!((xas.index(), xas.order(), xas.last()), (768, 6, 831));
    assert_eq!(xas.get_order(), Some(9));
    assert_eq!(xas.load().and_then(EntryRef::value), Some(1));
    assert_eq!(xas.next_conflict().map(|(f, o, _)| (f, o)), Some((512, 9)));
    assert!(xas.next_conflict().is_none(), "a covering entry is reported once");
    xas.set_range(1024, 0).expect("range");
    assert_eq!(xas.next_conflict().map(|(f, o, _)| (f, o)), Some((1024, 0)));
    xas.set_range(0, 11).expect("range");
    let mut erased = Vec::new();
    assert_eq!(xas.erase(|f, o, e| erased.push((f, o, e))), 2);
    assert_eq!(erased, [(512, 9, Entry::Value(1)), (1024, 0, Entry::Value(2))]);
    assert!(xas.array().is_empty());
    assert_eq!(xa.cursor(1, 1).err(), Some(Error::Misaligned { index: 1, order: 1 }));
    xa.check_invariants();
}

#[test]
fn cursor_split_is_bounded() {
    let mut xa = XArray::<Arc<Folio>>::new();
    xa.store_order(0, 20, Entry::Value(1)).expect("store");
    let mut xas = xa.cursor(0, 0).expect("cursor");
    assert_eq!(xas.split(), Err(Error::SplitTooLarge { order: 20, new_order: 0 }));
    assert_eq!(xa.get_order(5), Some(20), "a refused split changes nothing");
    xa.check_invariants();
}
