//! The values of `uswap run`'s knobs that are one of a few names, typed: `uswap run`
//! parses each once (a flag, or a line of the config file), the run's settings carry its
//! name (serde), and the shim matches on the type. A knob's names live only in its `NAMES`.
//!
//! With the `clap` feature each type is a `clap::ValueEnum`, so the help lists the names.

/// A type whose values are a fixed list of names.
macro_rules! named {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in the order the help lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];
            /// Their names, in the same order.
            pub const NAMES: &'static [&'static str] = &[$($text,)+];

            /// The value's name.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                Self::ALL.iter().copied().find(|v| v.name() == text).ok_or_else(|| {
                    format!("{text:?}: use {}", Self::NAMES.join(" or "))
                })
            }
        }

        // By name, as on the command line.
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        #[cfg(feature = "clap")]
        impl clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                Self::ALL
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                Some(clap::builder::PossibleValue::new(self.name()))
            }
        }
    };
}

named! {
    /// Whether the swap file's pages may stay in the page cache (`--swap-file-cache`).
    FileCache {
        /// The kernel keeps them while it has room (reads of recent page-outs are cheap).
        Keep = "keep",
        /// Written with `RWF_DONTCACHE`: the page cache drops them once on disk.
        Drop = "drop",
    }
}

named! {
    /// A switch (`--encrypt`).
    Switch {
        /// On.
        On = "on",
        /// Off.
        Off = "off",
    }
}

named! {
    /// When a fault maps a large folio (`--large-folios`; the engine's `LargeFolios`).
    LargeFolios {
        /// Wherever the aligned range is untouched.
        Always = "always",
        /// Only while faults walk forward through a region.
        Sequential = "sequential",
    }
}

named! {
    /// How a read of a page of zeros is mapped (`--zero-pages`).
    ZeroPages {
        /// Write-protected and uncharged until written.
        Protected = "protected",
        /// As any page, charged to the budget.
        Charged = "charged",
    }
}

named! {
    /// Who serves a fault on a swapped page (`--delivery`).
    Delivery {
        /// The handler thread, woken through userfaultfd.
        Handler = "handler",
        /// The faulting thread itself, in a SIGBUS handler.
        Sigbus = "sigbus",
    }
}

named! {
    /// Where the fault handler runs (`--handler-placement`).
    Placement {
        /// On the CPU of the thread it serves.
        Follow = "follow",
        /// Wherever the scheduler puts it.
        Free = "free",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_to_its_value() {
        for v in ZeroPages::ALL {
            assert_eq!(v.name().parse::<ZeroPages>(), Ok(*v));
        }
        assert_eq!(Delivery::NAMES, ["handler", "sigbus"]);
        assert_eq!(Switch::Off.to_string(), "off");
        assert_eq!("bogus".parse::<FileCache>().unwrap_err(), "\"bogus\": use keep or drop");
    }
}
