//! A memory budget the trainer treats like the size of its device, shared so that it can be
//! changed while a run is going (a test lowers it to force an out-of-memory at a chosen step).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::human;

/// Bytes the run may use; clones share one value.
#[derive(Debug, Clone, Default)]
pub struct Budget(Arc<AtomicU64>);

impl Budget {
    pub fn new(bytes: u64) -> Self {
        Self(Arc::new(AtomicU64::new(bytes)))
    }

    /// The budget now; `None` once it has been lifted (set to 0).
    pub fn bytes(&self) -> Option<u64> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            b => Some(b),
        }
    }

    pub fn set(&self, bytes: u64) {
        self.0.store(bytes, Ordering::Relaxed);
    }
}

/// A measured peak above the budget: out-of-memory as far as the run is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("out of memory: the step reached {} of a {} budget", human(*peak_bytes), human(*budget_bytes))]
pub struct OverBudget {
    pub peak_bytes: u64,
    pub budget_bytes: u64,
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

    #[test]
    fn clones_share_one_budget_and_zero_lifts_it() {
        let budget = Budget::new(100);
        let shared = budget.clone();
        shared.set(50);
        assert_eq!(budget.bytes(), Some(50));
        shared.set(0);
        assert_eq!(budget.bytes(), None);
    }
}
