//! Sizes in bytes as people write and read them: "2GiB" parsed, "1.50 GiB" printed. At the
//! bottom, so that the probe, the budget and the meter all say sizes alike.

/// A byte count for people: MiB below a GiB, GiB with two decimals above, so that a
/// budget and a need close to it still read differently.
pub fn human(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    let b = bytes as f64;
    if b < GIB {
        format!("{:.0} MiB", b / MIB)
    } else {
        format!("{:.2} GiB", b / GIB)
    }
}

/// Bytes as GiB with one decimal, the unit device memory is quoted in.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {0:?} as a memory size; write a number with a unit, e.g. 512MiB, 2GiB or 8GB")]
pub struct SizeError(pub String);

/// Reads `2GiB`, `512MiB`, `8GB`, `1.5G` or a plain number of bytes. `G`/`M`/`K` alone are
/// binary units, as GPU memory is quoted; `GB`/`MB`/`KB` are decimal.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| SizeError(text.into()))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(SizeError(text.into())),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes < 1.0 {
        return Err(SizeError(text.into()));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_gpu_memory_is_quoted() {
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("8GB"), Ok(8_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        for bad in ["", "GiB", "2 parsecs", "-1G", "0", "NaN"] {
            let err = parse_size(bad).unwrap_err().to_string();
            assert!(err.contains("512MiB"), "{bad}: {err}");
        }
    }
}
