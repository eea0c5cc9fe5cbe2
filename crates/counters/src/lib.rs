//! Counter tables: each counter of a layer is declared once, with its documentation, and
//! everything else is derived from that line, as the kernel derives `/proc/vmstat`'s names
//! from `enum vm_event_item` with `vmstat_text`:
//!
//! ```text
//!   counters::table! {
//!       /// live counters              live struct: one AtomicU64 per counter
//!       pub(crate) struct Counters;      Counters::snapshot_into(&self, &mut Stats)
//!       /// a snapshot                 Counters::reset(&self)
//!       #[derive(Debug, Clone, Default)]
//!       pub struct Stats {             snapshot struct: a u64 per counter, then the gauges
//!           counters {
//!               /// Stores.
//!               stores,                  Stats::fields() -> [(name, value)], counters
//!           }                                              first, then gauges
//!           gauges {
//!               /// Bytes held now.
//!               held_bytes: u64,         filled by the layer itself (sizes, limits, sums)
//!           }
//!       }
//!   }
//! ```
//!
//! Adding a counter is the one line in `counters { }` (and its `fetch_add` where the event
//! happens); adding a gauge is the one line in `gauges { }` and the line that fills it.
//! Gauges are `u64` or `bool` (0 or 1 in [`fields`]), or any type with `u64: From<T>`.
//!
//! A `prefix "crypt_";` line before `counters { }` puts the layer's name before every name
//! `each` and `fields` give (`crypt_sealed_pages` for the field `sealed_pages`), so a layer
//! whose names share a stats file with others keeps short field names.
//!
//! Besides `snapshot_into` and `reset`, the live struct has `const fn new()` (a `static`
//! table) and `each(&self, |name, value|)`, which hands out every counter without a
//! snapshot; the snapshot has `each` too (counters, then gauges). Neither `each`
//! allocates, nor does counting (a `fetch_add` on a field): only [`fields`] builds a `Vec`.
//!
//! Counters are relaxed atomics: each exact on its own, a snapshot not a consistent cut
//! across them (neither is `/proc/vmstat`).
//!
//! [`fields`]: #fields

#![deny(unsafe_code)]

#[doc(hidden)]
pub use std::sync::atomic::{AtomicU64 as __AtomicU64, Ordering as __Ordering};

/// A live counter: a std atomic, even in a crate whose own atomics are loom's under
/// `cfg(loom)` (counters are statistics, never synchronisation, so a model need not explore
/// them).
pub type Counter = std::sync::atomic::AtomicU64;

/// Declares a counter table (crate essay).
#[macro_export]
macro_rules! table {
    (
        @table $prefix:literal;
        $(#[$live_meta:meta])* $live_vis:vis struct $live:ident;
        $(#[$snap_meta:meta])* $snap_vis:vis struct $snap:ident {
            counters { $( $(#[$doc:meta])* $name:ident ),* $(,)? }
            $( gauges { $( $(#[$gdoc:meta])* $gauge:ident : $gty:ty ),* $(,)? } )?
        }
    ) => {
        $(#[$live_meta])*
        #[derive(Debug, Default)]
        $live_vis struct $live {
            $( $(#[$doc])* pub(crate) $name: $crate::__AtomicU64, )*
        }

        $(#[$snap_meta])*
        $snap_vis struct $snap {
            $( $(#[$doc])* pub $name: u64, )*
            $( $( $(#[$gdoc])* pub $gauge: $gty, )* )?
        }

        impl $live {
            /// Every counter at zero, in a `static` as well.
            #[allow(dead_code)]
            pub(crate) const fn new() -> Self {
                Self { $( $name: $crate::__AtomicU64::new(0), )* }
            }

            /// Copies every counter into `snap` (each exact; not a consistent cut across
            /// them); its gauges are left as they are.
            #[allow(dead_code)]
            pub(crate) fn snapshot_into(&self, snap: &mut $snap) {
                $( snap.$name = self.$name.load($crate::__Ordering::Relaxed); )*
            }

            /// Hands `out` every counter as `(name, value)`, in declaration order, without
            /// a snapshot and without allocating (for a thread that must not allocate).
            #[allow(dead_code)]
            pub(crate) fn each(&self, mut out: impl FnMut(&'static str, u64)) {
                $( out(concat!($prefix, stringify!($name)),
                       self.$name.load($crate::__Ordering::Relaxed)); )*
            }

            /// Every counter back to zero (a forked child counts its own events).
            #[allow(dead_code)]
            pub(crate) fn reset(&self) {
                $( self.$name.store(0, $crate::__Ordering::Relaxed); )*
            }
        }

        impl $snap {
            /// Hands `out` every counter, then every gauge, as `(name, value)` in
            /// declaration order (booleans as 0 or 1), without allocating.
            #[allow(dead_code)]
            pub fn each(&self, mut out: impl FnMut(&'static str, u64)) {
                $( out(concat!($prefix, stringify!($name)), self.$name); )*
                $( $( out(concat!($prefix, stringify!($gauge)), u64::from(self.$gauge)); )* )?
            }

            /// Every counter, then every gauge, as `(name, value)` in declaration order
            /// (booleans as 0 or 1), for vmstat-style text.
            #[allow(dead_code)]
            pub fn fields(&self) -> ::std::vec::Vec<(&'static str, u64)> {
                let mut fields = ::std::vec::Vec::new();
                self.each(|name, value| fields.push((name, value)));
                fields
            }
        }
    };
    (
        $(#[$live_meta:meta])* $live_vis:vis struct $live:ident;
        $(#[$snap_meta:meta])* $snap_vis:vis struct $snap:ident {
            prefix $prefix:literal;
            $($body:tt)*
        }
    ) => {
        $crate::table! { @table $prefix;
            $(#[$live_meta])* $live_vis struct $live;
            $(#[$snap_meta])* $snap_vis struct $snap { $($body)* }
        }
    };
    (
        $(#[$live_meta:meta])* $live_vis:vis struct $live:ident;
        $(#[$snap_meta:meta])* $snap_vis:vis struct $snap:ident { $($body:tt)* }
    ) => {
        $crate::table! { @table "";
            $(#[$live_meta])* $live_vis struct $live;
            $(#[$snap_meta])* $snap_vis struct $snap { $($body)* }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::table! {
        /// Live.
        pub(crate) struct Live;
        /// Snapshot.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Snap {
            counters {
                /// One.
                one,
                /// Two.
                two,
            }
            gauges {
                /// A size.
                bytes: u64,
                /// A state.
                full: bool,
            }
        }
    }

    #[test]
    fn one_line_per_counter_gives_its_atomic_its_field_and_its_name() {
        let live = Live::default();
        live.one.fetch_add(3, std::sync::atomic::Ordering::Relaxed);
        live.two.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut snap = Snap { bytes: 4096, full: true, ..Snap::default() };
        live.snapshot_into(&mut snap);
        assert_eq!(snap.fields(), [("one", 3), ("two", 1), ("bytes", 4096), ("full", 1)]);
        live.reset();
        live.snapshot_into(&mut snap);
        assert_eq!((snap.one, snap.two, snap.bytes), (0, 0, 4096));
    }

    crate::table! {
        /// Live, in a static.
        pub(crate) struct PrefixedLive;
        /// Snapshot.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct PrefixedSnap {
            prefix "layer_";
            counters {
                /// Three.
                three,
            }
            gauges {
                /// A size.
                bytes: u64,
            }
        }
    }

    static PREFIXED: PrefixedLive = PrefixedLive::new();

    #[test]
    fn a_prefix_goes_before_every_name_and_each_gives_what_fields_gives() {
        PREFIXED.three.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let mut live = Vec::new();
        PREFIXED.each(|name, value| live.push((name, value)));
        assert_eq!(live, [("layer_three", 2)]);
        let mut snap = PrefixedSnap { bytes: 7, ..PrefixedSnap::default() };
        PREFIXED.snapshot_into(&mut snap);
        assert_eq!(snap.three, 2);
        let mut each = Vec::new();
        snap.each(|name, value| each.push((name, value)));
        assert_eq!(each, [("layer_three", 2), ("layer_bytes", 7)]);
        assert_eq!(snap.fields(), each);
    }
}
