//! Byte sizes on the command line: `4096`, `64K`, `256M`, `1G`, `1GiB`, `1.5G`.
//!
//! Suffixes are binary (K = 1024), as `free`, `swapon` and the cgroup files read them; a
//! trailing `B` or `iB` is accepted and ignored. Sizes are bounded to 2^50 bytes (1 PiB) so
//! that every product a caller makes from them stays far from overflow.

use crate::WorkloadError;

/// The largest size accepted: 1 PiB.
pub const MAX_SIZE_BYTES: u64 = 1 << 50;

/// Parses a size such as `256M` into bytes.
///
/// # Errors
/// [`WorkloadError::BadSize`] for an empty string, an unknown suffix, a negative or
/// non-finite number, or a size above [`MAX_SIZE_BYTES`].
pub fn parse_size(text: &str) -> Result<u64, WorkloadError> {
    let bad = || WorkloadError::BadSize { text: text.to_string() };
    let trimmed = text.trim();
    let body = trimmed
        .strip_suffix("iB")
        .or_else(|| trimmed.strip_suffix("ib"))
        .or_else(|| trimmed.strip_suffix(['B', 'b']))
        .unwrap_or(trimmed);
    let (number, shift) = match body.chars().last() {
        Some('k' | 'K') => (&body[..body.len() - 1], 10),
        Some('m' | 'M') => (&body[..body.len() - 1], 20),
        Some('g' | 'G') => (&body[..body.len() - 1], 30),
        Some('t' | 'T') => (&body[..body.len() - 1], 40),
        Some(c) if c.is_ascii_digit() || c == '.' => (body, 0),
        _ => return Err(bad()),
    };
    let number = number.trim();
    if number.is_empty() {
        return Err(bad());
    }
    let bytes = if let Ok(whole) = number.parse::<u64>() {
        whole.checked_shl(shift).filter(|b| b >> shift == whole).ok_or_else(bad)?
    } else {
        let value: f64 = number.parse().map_err(|_| bad())?;
        if !value.is_finite() || value < 0.0 {
            return Err(bad());
        }
        let scaled = value * (1u64 << shift) as f64;
        if scaled > MAX_SIZE_BYTES as f64 {
            return Err(bad());
        }
        scaled.round() as u64
    };
    if bytes > MAX_SIZE_BYTES {
        return Err(bad());
    }
    Ok(bytes)
}

/// Formats bytes the way [`parse_size`] reads them, exact when possible: `256M`, `1G`,
/// otherwise with one decimal (`1.5G`), or plain bytes below 1 KiB.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u32, &str); 4] = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in UNITS {
        let unit_bytes = 1u64 << shift;
        if bytes >= unit_bytes {
            if bytes.is_multiple_of(unit_bytes) {
                return format!("{}{unit}", bytes >> shift);
            }
            return format!("{:.1}{unit}", bytes as f64 / unit_bytes as f64);
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_binary() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 64 << 10);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("2gb").unwrap(), 2 << 30);
        assert_eq!(parse_size(" 1.5G ").unwrap(), 3 << 29);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
    }

    #[test]
    fn nonsense_is_rejected() {
        for text in ["", "G", "-1G", "1X", "abc", "1.2.3M", "nanG", "infG", "2048T", "0x10"] {
            assert!(parse_size(text).is_err(), "{text:?} accepted");
        }
    }

    #[test]
    fn overflow_is_rejected_not_wrapped() {
        assert!(parse_size("18446744073709551615K").is_err());
        assert!(parse_size("1025T").is_err());
        assert_eq!(parse_size("1024T").unwrap(), MAX_SIZE_BYTES);
    }

    #[test]
    fn format_round_trips() {
        for bytes in [0, 1, 1023, 1024, 4096, 256 << 20, 1 << 30, 3 << 29, 5 << 40] {
            let text = format_size(bytes);
            let back = parse_size(&text).unwrap();
            if bytes % 1024 == 0 || bytes < 1024 {
                assert_eq!(back, bytes, "{text}");
            }
        }
        assert_eq!(format_size(256 << 20), "256M");
        assert_eq!(format_size(3 << 29), "1.5G");
    }
}
