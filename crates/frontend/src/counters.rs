//! One table per set of counters: each counter is declared once, with its documentation,
//! and the live struct (relaxed atomics), its snapshot (plain numbers), the copy between
//! them, the reset and the `(name, value)` list are derived from it (the kernel's
//! `vm_event_item` with `vmstat_text`).
//!
//! ```text
//!   counter_table! {
//!       /// live counters of X           live: Counters       (AtomicU64 fields)
//!       Counters => XStats;              snapshot: XStats     (u64 fields, Copy)
//!       /// Takes.                       Counters::snapshot() -> XStats
//!       takes,                           Counters::reset()
//!       ...                              XStats::fields() -> [(name, value)]
//!   }
//! ```

/// Declares a counter table (module essay).
#[macro_export]
macro_rules! counter_table {
    (
        $(#[$live_doc:meta])* $live:ident => $(#[$snap_doc:meta])* $snap:ident;
        $( $(#[$doc:meta])* $name:ident ),* $(,)?
    ) => {
        $(#[$live_doc])*
        #[derive(Debug, Default)]
        pub(crate) struct $live {
            $( $(#[$doc])* pub(crate) $name: std::sync::atomic::AtomicU64, )*
        }

        $(#[$snap_doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $snap {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl $live {
            /// Every counter now (each exact; not a consistent cut across them).
            pub(crate) fn snapshot(&self) -> $snap {
                $snap { $( $name: self.$name.load(std::sync::atomic::Ordering::Relaxed), )* }
            }

            /// Every counter back to zero (a forked child counts its own events).
            #[allow(dead_code)]
            pub(crate) fn reset(&self) {
                $( self.$name.store(0, std::sync::atomic::Ordering::Relaxed); )*
            }
        }

        impl $snap {
            /// Every counter as `(name, value)`, in declaration order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
}
