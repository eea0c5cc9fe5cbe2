//! CPU lists as taskset writes them (`0`, `0-3`, `0,2-3`): `uswap run --cpus` and
//! `--reclaim-cpus`, and the reclaimer's CPUs that the shim reads back from the
//! environment.

/// The CPUs `text` names, ascending, each once; every CPU below `max`.
///
/// # Errors
/// A phrase naming what is wrong (the caller puts the flag in front): an empty list, a
/// bad number, a reversed range, or a CPU at or past `max`.
pub fn parse_list(text: &str, max: usize) -> Result<Vec<usize>, String> {
    let number = |part: &str| -> Result<usize, String> {
        let cpu: usize =
            part.trim().parse().map_err(|_| format!("{part:?} is not a CPU number"))?;
        if cpu >= max {
            return Err(format!("CPU {cpu} is beyond the largest, {}", max - 1));
        }
        Ok(cpu)
    };
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(format!("range {part} runs backwards"));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return Err("name at least one CPU, e.g. 0 or 0-1".into());
    }
    Ok(cpus)
}

/// `cpus` (ascending) in the list syntax, runs as ranges: `0,2-3`.
pub fn format_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let first = cpus[i];
        while i + 1 < cpus.len() && cpus[i + 1] == cpus[i] + 1 {
            i += 1;
        }
        let last = cpus[i];
        parts.push(if first == last { first.to_string() } else { format!("{first}-{last}") });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_and_print_back() {
        for (text, cpus, printed) in [
            ("0", vec![0], "0"),
            ("0-3", vec![0, 1, 2, 3], "0-3"),
            ("0, 2-3,5", vec![0, 2, 3, 5], "0,2-3,5"),
            ("1-1", vec![1], "1"),
            ("3,1,1-2\n", vec![1, 2, 3], "1-3"),
        ] {
            assert_eq!(parse_list(text, 64).unwrap(), cpus, "{text:?}");
            assert_eq!(format_list(&cpus), printed, "{text:?}");
        }
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        for (text, expect) in [
            ("", "name at least one CPU"),
            (",", "name at least one CPU"),
            ("x", "not a CPU number"),
            ("3-1", "runs backwards"),
            ("0-", "not a CPU number"),
            ("64", "beyond the largest, 63"),
        ] {
            let error = parse_list(text, 64).unwrap_err();
            assert!(error.contains(expect), "{text:?}: {error}");
        }
    }
}
