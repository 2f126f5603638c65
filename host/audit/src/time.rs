//! UTC timestamps and day names without a time-zone library: the log only ever needs UTC.

use std::time::{SystemTime, UNIX_EPOCH};

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn split(t: SystemTime) -> (i64, u64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    ((secs / 86_400) as i64, secs % 86_400, d.subsec_millis())
}

/// `2026-11-30T00:05:50.123Z`.
pub fn format_rfc3339(t: SystemTime) -> String {
    let (days, sod, ms) = split(t);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", sod / 3600, sod / 60 % 60, sod % 60)
}

/// `2026-11-30`: the UTC day, which names the day's file.
pub fn day_of(t: SystemTime) -> String {
    let (days, _, _) = split(t);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        _ => 0,
    }
}

fn digits(s: &str) -> Option<u32> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten()
}

/// Whether `day` is a real UTC day written as the writer writes it (`2026-11-30`).
pub fn is_valid_day(day: &str) -> bool {
    let b = day.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    match (digits(&day[..4]), digits(&day[5..7]), digits(&day[8..])) {
        (Some(y), Some(m), Some(d)) => (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m),
        _ => false,
    }
}

/// Whether `time` is a real instant written exactly as [`format_rfc3339`] writes it.
pub fn is_valid_time(time: &str) -> bool {
    let b = time.as_bytes();
    if b.len() != 24
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[23] != b'Z'
    {
        return false;
    }
    let (h, m, s, ms) = (
        digits(&time[11..13]),
        digits(&time[14..16]),
        digits(&time[17..19]),
        digits(&time[20..23]),
    );
    is_valid_day(&time[..10])
        && h.is_some_and(|h| h < 24)
        && m.is_some_and(|m| m < 60)
        && s.is_some_and(|s| s < 60)
        && ms.is_some()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn formats_known_instants() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_997_150_123);
        assert_eq!(format_rfc3339(t), "2026-11-30T00:05:50.123Z");
        assert_eq!(day_of(t), "2026-11-30");
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // A leap day.
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(day_of(leap), "2000-02-29");
    }

    #[test]
    fn validates_days_and_times_as_written() {
        assert!(is_valid_time(&format_rfc3339(SystemTime::now())));
        assert!(is_valid_time("2000-02-29T23:59:59.999Z"));
        for bad in [
            "2026-11-30T08:256:31Z",
            "2026-11-30T24:00:00.000Z",
            "2026-02-29T00:00:00.000Z",
            "2026-11-30 00:00:00.000Z",
            "2026-11-30T00:00:00.000",
        ] {
            assert!(!is_valid_time(bad), "{bad}");
        }
        assert!(is_valid_day("2026-12-01"));
        for bad in ["9999-99-99", "2026-13-01", "2026-04-31", "x", "2026-1-01"] {
            assert!(!is_valid_day(bad), "{bad}");
        }
    }
}
