//! Where a run's memory budget comes from: the user's own figure, a simulated GPU's memory,
//! or the device's free memory, the last two times a fraction. Every front-end resolves its
//! budget here, so the same choice gives the same bytes and the same words everywhere.

use super::simulated::SimulatedDevice;
use crate::probe::DeviceReport;
use crate::setting::{Described, PlainWords, Setting, Wording};
use crate::size::human;

/// The fraction of a device's memory a budget takes unless the user says otherwise: what
/// the rest of the process and the driver need is outside the plan.
pub const DEFAULT_FRACTION: f64 = 0.9;

/// What a budget is made from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetSource {
    /// The user's figure in bytes, taken as it is (no fraction).
    Given(u64),
    /// A simulated GPU's memory x the fraction.
    Simulated(SimulatedDevice),
    /// The training device's free memory (its total where free is unknown) x the fraction.
    FreeMemory,
    /// Room the front-end measured itself where no probe can (a web page's WebAssembly
    /// memory not yet taken) x the fraction; `of` says what it is.
    Room { free_bytes: u64, of: &'static str },
    /// A figure taken where the device does not say its memory (WebGPU in a page); `why`
    /// says so and how to give another.
    Assumed { bytes: u64, why: &'static str },
}

/// A budget and the words that say where it came from ("RAM free 23.10 GiB x 0.9").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedBudget {
    pub bytes: u64,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", self.describe(&PlainWords))]
pub enum BudgetError {
    Fraction(f64),
    NoDevice,
    /// Why the device's free memory is unknown.
    UnknownFreeMemory(String),
}

impl Described for BudgetError {
    fn describe(&self, words: &dyn Wording) -> String {
        match self {
            BudgetError::Fraction(fraction) => format!(
                "{} must be above 0 and at most 1 (got {fraction})",
                words.setting(Setting::MemoryFraction)
            ),
            BudgetError::NoDevice => format!(
                "no device to size the budget from; choose a device, or give {}",
                words.setting(Setting::MemoryBudget)
            ),
            BudgetError::UnknownFreeMemory(why) => {
                format!("{why}; give {}", words.setting(Setting::MemoryBudget))
            }
        }
    }
}

impl BudgetSource {
    /// The budget in bytes; `device` is the device the run trains on, needed for
    /// [`BudgetSource::FreeMemory`] only.
    pub fn resolve(
        &self,
        fraction: f64,
        device: Option<&DeviceReport>,
    ) -> Result<ResolvedBudget, BudgetError> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(BudgetError::Fraction(fraction));
        }
        match self {
            BudgetSource::Given(bytes) => Ok(ResolvedBudget {
                bytes: *bytes,
                source: format!("given as {}", human(*bytes)),
            }),
            BudgetSource::Simulated(d) => Ok(ResolvedBudget {
                bytes: (d.memory_bytes as f64 * fraction) as u64,
                source: format!("simulated {} x {fraction}", d.label),
            }),
            BudgetSource::Room { free_bytes, of } => Ok(ResolvedBudget {
                bytes: (*free_bytes as f64 * fraction) as u64,
                source: format!("{of}: {} x {fraction}", human(*free_bytes)),
            }),
            BudgetSource::Assumed { bytes, why } => Ok(ResolvedBudget {
                bytes: *bytes,
                source: format!("{why}: {}", human(*bytes)),
            }),
            BudgetSource::FreeMemory => {
                let device = device.ok_or(BudgetError::NoDevice)?;
                let (bytes, source) =
                    free_memory(device, fraction).map_err(BudgetError::UnknownFreeMemory)?;
                Ok(ResolvedBudget { bytes, source })
            }
        }
    }
}

/// A training budget on `device`: `fraction` of its free memory (of its total when free is
/// unknown), with the words that say where it came from; `Err` says why none.
fn free_memory(device: &DeviceReport, fraction: f64) -> Result<(u64, String), String> {
    let name = if device.backend.is_host() {
        "RAM"
    } else {
        &device.name
    };
    let (bytes, what) = match (device.free_memory.bytes, device.total_memory.bytes) {
        (Some(free), _) => (free, "free"),
        (None, Some(total)) => (total, "total (free unknown)"),
        (None, None) => {
            return Err(format!(
                "the free memory of {} is unknown ({})",
                device.name, device.free_memory.source
            ));
        }
    };
    Ok((
        (bytes as f64 * fraction) as u64,
        format!("{name} {what} {} x {fraction}", human(bytes)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;
    use crate::budget::simulated as devices;
    use crate::probe::MemoryFigure;

    fn cpu(free: Option<u64>) -> DeviceReport {
        let mut d = crate::probe::cpu::probe()
            .into_iter()
            .find(|d| d.backend == BackendKind::Flex)
            .expect("a CPU device");
        d.free_memory = MemoryFigure {
            bytes: free,
            source: "test".into(),
            at_least: false,
        };
        d.total_memory = MemoryFigure {
            bytes: None,
            source: "test".into(),
            at_least: false,
        };
        d
    }

    #[test]
    fn each_source_gives_its_bytes_and_says_where_they_came_from() {
        let given = BudgetSource::Given(512 << 20).resolve(0.5, None).unwrap();
        assert_eq!(
            given.bytes,
            512 << 20,
            "the user's figure takes no fraction"
        );
        assert_eq!(given.source, "given as 512 MiB");
        let t4 = devices::find("t4").unwrap();
        let simulated = BudgetSource::Simulated(t4).resolve(0.5, None).unwrap();
        assert_eq!(simulated.bytes, 8 << 30);
        assert!(
            simulated.source.contains("Tesla T4"),
            "{}",
            simulated.source
        );
        let free = BudgetSource::FreeMemory
            .resolve(0.9, Some(&cpu(Some(10 << 30))))
            .unwrap();
        assert_eq!(free.bytes, (10.0 * 0.9 * (1u64 << 30) as f64) as u64);
        assert!(free.source.starts_with("RAM free"), "{}", free.source);
    }

    #[test]
    fn what_cannot_give_a_budget_says_why() {
        assert_eq!(
            BudgetSource::FreeMemory.resolve(0.9, None),
            Err(BudgetError::NoDevice)
        );
        let unknown = BudgetSource::FreeMemory
            .resolve(0.9, Some(&cpu(None)))
            .unwrap_err();
        assert!(
            unknown.to_string().contains("free memory")
                && unknown.to_string().contains("give the memory budget"),
            "{unknown}"
        );
        assert_eq!(
            BudgetSource::Given(1).resolve(1.5, None),
            Err(BudgetError::Fraction(1.5))
        );
    }

    /// A page's budget: the room it measured x the fraction, or the figure it assumes.
    #[test]
    fn a_page_measures_its_room_or_says_what_it_assumes() {
        let room = BudgetSource::Room {
            free_bytes: 1000,
            of: "WebAssembly memory not yet taken by the page",
        }
        .resolve(DEFAULT_FRACTION, None)
        .unwrap();
        assert_eq!(room.bytes, 900);
        assert!(
            room.source
                .starts_with("WebAssembly memory not yet taken by the page: ")
        );
        assert!(room.source.ends_with(" x 0.9"), "{}", room.source);
        let assumed = BudgetSource::Assumed {
            bytes: 1 << 30,
            why: "WebGPU does not report the GPU's memory",
        }
        .resolve(DEFAULT_FRACTION, None)
        .unwrap();
        assert_eq!(assumed.bytes, 1 << 30, "no fraction of an assumed figure");
        assert!(
            assumed.source.starts_with("WebGPU does not report"),
            "{}",
            assumed.source
        );
    }
}
