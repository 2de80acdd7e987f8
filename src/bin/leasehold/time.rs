//! Times and sizes as an operator reads them: RFC 3339 in and out (UTC, milliseconds), durations
//! in words (`23s`, `4m 10s`, `2d 3h`), sizes in binary units. Pure; the calendar is Howard
//! Hinnant's days-from-civil algorithm (proleptic Gregorian, as RFC 3339 is).

use std::time::Duration;

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01: `(year, month, day)`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC, to the millisecond
/// (`2023-11-14T22:13:20.000Z`).
pub fn format_rfc3339(unix_ms: u64) -> String {
    let secs = (unix_ms / 1_000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60,
        unix_ms % 1_000
    )
}

/// An RFC 3339 time (`2023-11-14T22:13:20Z`, `…20.5+01:00`; `t`, `z` and a space for `T` too)
/// as milliseconds since the Unix epoch; digits past the millisecond are dropped. A time
/// before 1970 is refused.
pub fn parse_rfc3339(text: &str) -> Result<u64, String> {
    let b = text.as_bytes();
    let digits = |from: usize, len: usize| -> Result<i64, String> {
        let part = text.get(from..from + len).ok_or("too short")?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(format!("{part:?} is not a number"));
        }
        part.parse()
            .map_err(|_| format!("{part:?} is not a number"))
    };
    let at = |i: usize, want: &[u8]| b.get(i).is_some_and(|c| want.contains(c));
    if !(at(4, b"-") && at(7, b"-") && at(10, b"Tt ") && at(13, b":") && at(16, b":")) {
        return Err("not of the form YYYY-MM-DDTHH:MM:SS".into());
    }
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} does not exist"));
    }
    if day < 1 || day > i64::from(days_in_month(year, month as u32)) {
        return Err(format!("{year:04}-{month:02} has no day {day}"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!(
            "{hour:02}:{minute:02}:{second:02} is no time of day"
        ));
    }
    let mut i = 19;
    let mut millis = 0;
    if at(i, b".") {
        let frac: String = text[i + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if frac.is_empty() {
            return Err("a '.' with no fraction".into());
        }
        let first3 = format!("{frac:0<3}");
        millis = first3[..3].parse::<i64>().map_err(|e| e.to_string())?;
        i += 1 + frac.len();
    }
    let offset_s = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && at(i + 3, b":") => {
            let (h, m) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
            if h > 23 || m > 59 {
                return Err("the offset is out of range".into());
            }
            let s = h * 3_600 + m * 60;
            if *sign == b'+' { s } else { -s }
        }
        _ => return Err("no offset (Z or ±HH:MM) at the end".into()),
    };
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_s;
    let ms = secs * 1_000 + millis;
    u64::try_from(ms).map_err(|_| "it lies before 1970".to_string())
}

/// A duration in words, two units at most: `850ms`, `23s`, `4m 10s`, `2h 3m`, `3d 4h`.
pub fn words(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let Some(first) = units.iter().position(|(size, _)| s >= *size) else {
        return format!("{s}s");
    };
    let (size, name) = units[first];
    let mut text = format!("{}{name}", s / size);
    if let Some((next, next_name)) = units.get(first + 1)
        && (s % size) / next > 0
    {
        text.push_str(&format!(" {}{next_name}", (s % size) / next));
    }
    text
}

/// A size in binary units: `512 B`, `1.5 KiB`, `20.0 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1_024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1_024.0;
    let mut unit = 0;
    while value >= 1_024.0 && unit + 1 < UNITS.len() {
        value /= 1_024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calendar_round_trips_over_four_centuries_of_days() {
        for days in (-200_000..200_000).step_by(37) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    #[test]
    fn rfc3339_out_and_back() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        for ms in [0, 951_782_400_000, 1_700_000_000_123, 4_102_444_799_999] {
            assert_eq!(parse_rfc3339(&format_rfc3339(ms)), Ok(ms));
        }
    }

    #[test]
    fn rfc3339_takes_offsets_fractions_and_lowercase() {
        let t = 1_700_000_000_000;
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20Z"), Ok(t));
        assert_eq!(parse_rfc3339("2023-11-14t22:13:20z"), Ok(t));
        assert_eq!(parse_rfc3339("2023-11-14 22:13:20Z"), Ok(t));
        assert_eq!(parse_rfc3339("2023-11-15T00:13:20+02:00"), Ok(t));
        assert_eq!(parse_rfc3339("2023-11-14T21:43:20-00:30"), Ok(t));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.1Z"), Ok(t + 100));
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.123456789Z"), Ok(t + 123));
    }

    #[test]
    fn rfc3339_refuses_what_is_not_a_moment() {
        for bad in [
            "2023-11-14",
            "2023-11-14T22:13:20",
            "2023-02-29T00:00:00Z",
            "2023-11-31T00:00:00Z",
            "2023-11-14T24:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+2:00",
            "2023-11-14T22:13:20Zjunk",
            "1969-12-31T23:59:59Z",
            "20231114T221320Z",
        ] {
            assert!(parse_rfc3339(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_rfc3339("2024-02-29T00:00:00Z"), Ok(1_709_164_800_000));
    }

    #[test]
    fn durations_and_sizes_read_as_words() {
        let s = Duration::from_secs;
        assert_eq!(words(Duration::from_millis(850)), "850ms");
        assert_eq!(words(s(23)), "23s");
        assert_eq!(words(s(250)), "4m 10s");
        assert_eq!(words(s(240)), "4m");
        assert_eq!(words(s(2 * 3_600 + 3 * 60 + 9)), "2h 3m");
        assert_eq!(words(s(3 * 86_400 + 4 * 3_600)), "3d 4h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1_536), "1.5 KiB");
        assert_eq!(bytes(20 << 20), "20.0 MiB");
    }
}
