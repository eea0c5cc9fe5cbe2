//! Sizes as users write them: `4096`, `64K`, `256M`, `1.5G`, `2GiB`, `512MB`, `1T`.
//!
//! Suffixes are binary (K = 1024), with or without `i` and `B` (`M`, `Mi`, `MB`, `MiB`,
//! any case); a bare number is bytes (`B` alone too). Anything else is an error that names
//! the suffix, so `--budget 256X` fails before the program starts. A fraction is allowed
//! with a suffix (`1.5G`) and rounded down to whole bytes.

/// Why a size could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// Empty input.
    Empty,
    /// No number where one was expected.
    NotANumber {
        /// The input.
        input: String,
    },
    /// A suffix that is not K/M/G/T (with optional `i`, `B`).
    UnknownSuffix {
        /// The input.
        input: String,
        /// The suffix found.
        suffix: String,
    },
    /// The value does not fit in 64 bits.
    TooLarge {
        /// The input.
        input: String,
    },
}

impl std::fmt::Display for SizeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeError::Empty => write!(f, "empty size"),
            SizeError::NotANumber { input } => {
                write!(f, "size {input:?} does not start with a number")
            }
            SizeError::UnknownSuffix { input, suffix } => write!(
                f,
                "size {input:?}: unknown suffix {suffix:?} (use K, M, G or T, with or without \
                 i/B, e.g. 256M or 2GiB)"
            ),
            SizeError::TooLarge { input } => write!(f, "size {input:?} is too large"),
        }
    }
}

impl std::error::Error for SizeError {}

/// The multiplier of a suffix (case-insensitive), `None` if unknown.
fn multiplier(suffix: &str) -> Option<u64> {
    let lower = suffix.to_ascii_lowercase();
    let unit = lower.strip_suffix('b').unwrap_or(&lower);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let shift = match unit {
        "" => return (lower.is_empty() || lower == "b").then_some(1),
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    // "ib" alone, "kbi" and the like are not sizes.
    let canonical = [unit.to_string(), format!("{unit}i"), format!("{unit}b"), format!("{unit}ib")];
    canonical.contains(&lower).then_some(1u64 << shift)
}

/// Parses a size (module essay).
///
/// # Errors
/// [`SizeError`] naming what is wrong.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let text = input.trim();
    if text.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.matches('.').count() > 1 {
        return Err(SizeError::NotANumber { input: input.to_string() });
    }
    let Some(scale) = multiplier(suffix.trim()) else {
        let suffix = suffix.trim().to_string();
        return Err(SizeError::UnknownSuffix { input: input.to_string(), suffix });
    };
    let too_large = || SizeError::TooLarge { input: input.to_string() };
    match number.split_once('.') {
        None => {
            let whole: u64 = number.parse().map_err(|_| too_large())?;
            whole.checked_mul(scale).ok_or_else(too_large)
        }
        Some((whole, frac)) => {
            let whole: u64 = whole.parse().map_err(|_| too_large())?;
            let frac_digits = frac.len().min(9) as u32;
            let frac: u64 = if frac.is_empty() {
                0
            } else {
                frac[..frac_digits as usize].parse().map_err(|_| too_large())?
            };
            let base = whole.checked_mul(scale).ok_or_else(too_large)?;
            let part = u128::from(frac) * u128::from(scale) / 10u128.pow(frac_digits);
            base.checked_add(part as u64).ok_or_else(too_large)
        }
    }
}

/// A size for people: the largest binary unit that keeps three significant digits
/// (`256.0 MiB`, `4.00 KiB`, `812 B`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_with_and_without_i_and_b() {
        for (text, bytes) in [
            ("4096", 4096),
            ("4096B", 4096),
            ("64K", 64 << 10),
            ("64k", 64 << 10),
            ("64KiB", 64 << 10),
            ("64KB", 64 << 10),
            ("64Ki", 64 << 10),
            ("256M", 256 << 20),
            ("256MiB", 256 << 20),
            ("2G", 2 << 30),
            ("2 GiB", 2 << 30),
            ("1T", 1 << 40),
            ("1.5G", 3 << 29),
            ("0.5K", 512),
        ] {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn bad_sizes_name_what_is_wrong() {
        let e = parse_size("256X").unwrap_err();
        assert!(matches!(e, SizeError::UnknownSuffix { ref suffix, .. } if suffix == "X"), "{e}");
        assert!(e.to_string().contains("unknown suffix \"X\""), "{e}");
        for bad in ["256Mx", "12iB", "5KBi", "1P"] {
            assert!(matches!(parse_size(bad), Err(SizeError::UnknownSuffix { .. })), "{bad}");
        }
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(matches!(parse_size("M"), Err(SizeError::NotANumber { .. })));
        assert!(matches!(parse_size(".5M"), Err(SizeError::NotANumber { .. })));
        assert!(matches!(parse_size("1.2.3M"), Err(SizeError::NotANumber { .. })));
        assert!(matches!(parse_size("99999999999T"), Err(SizeError::TooLarge { .. })));
    }

    #[test]
    fn sizes_format_with_three_digits() {
        assert_eq!(format_size(812), "812 B");
        assert_eq!(format_size(4096), "4.00 KiB");
        assert_eq!(format_size(256 << 20), "256 MiB");
        assert_eq!(format_size(3 << 29), "1.50 GiB");
        assert_eq!(format_size(45 << 20), "45.0 MiB");
    }

    proptest::proptest! {
        #[test]
        fn whole_numbers_with_suffixes_parse_exactly(n in 0u64..1_000_000, unit in 0usize..5) {
            let suffix = ["", "K", "MiB", "gb", "Ti"][unit];
            let shift = [0, 10, 20, 30, 40][unit];
            proptest::prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n << shift));
        }
    }
}
