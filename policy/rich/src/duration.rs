//! ISO 8601 durations as RICH writes them (`PT10S`, `PT1M30S`, `PT0.5S`, `P1D`): the subset
//! with days, hours, minutes and (decimal) seconds. Years and months have no fixed length and
//! are refused.

/// Milliseconds, or `None` if `s` is not in the supported subset.
pub fn parse_ms(s: &str) -> Option<u64> {
    let rest = s.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut total: f64 = 0.0;
    let mut any = false;
    let mut take = |part: &str, units: &[(char, f64)]| -> Option<()> {
        let mut num = String::new();
        let mut allowed = units.iter();
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                num.push(c);
                continue;
            }
            // Units must come in order, each at most once.
            let (_, ms) = allowed.by_ref().find(|(u, _)| *u == c)?;
            if num.is_empty() || (c != 'S' && num.contains('.')) {
                return None;
            }
            total += num.parse::<f64>().ok()? * ms;
            num.clear();
            any = true;
        }
        num.is_empty().then_some(())
    };
    take(date, &[('D', 86_400_000.0)])?;
    if let Some(t) = time {
        if t.is_empty() {
            return None;
        }
        take(t, &[('H', 3_600_000.0), ('M', 60_000.0), ('S', 1000.0)])?;
    }
    (any && total.is_finite() && total < 1e15).then_some(total.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_ms;

    #[test]
    fn the_subset_rich_uses() {
        assert_eq!(parse_ms("PT10S"), Some(10_000));
        assert_eq!(parse_ms("PT1M30S"), Some(90_000));
        assert_eq!(parse_ms("PT0.5S"), Some(500));
        assert_eq!(parse_ms("P1DT1H"), Some(90_000_000));
        for bad in [
            "", "P", "PT", "10S", "PT10", "P1Y", "PT1S1M", "PT1.5M", "PTS", "PT1SS",
        ] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }
}
