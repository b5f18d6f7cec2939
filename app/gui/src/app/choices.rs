//! What the user chose before a run: where the memory budget comes from, and the parts of the
//! plan they pinned (the rest are the planner's to choose).

use headroom_core::plan::Fixed;
use headroom_core::precision::Precision;

/// What the user chose the memory budget from: the plan panel's radio buttons and text field,
/// resolved by core's `BudgetSource` (`HeadroomApp::budget`).
#[derive(Debug, Clone, PartialEq)]
pub enum BudgetChoice {
    /// The default fraction of the selected device's free memory.
    FreeMemory,
    /// A simulated GPU's memory (index into `devices::DEVICES`), x the default fraction.
    Simulated(usize),
    /// The user's figure, e.g. "2GiB".
    Custom(String),
}

/// A value the user may pin; unpinned ones are the planner's to choose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pin<T> {
    pub pinned: bool,
    pub value: T,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pins {
    pub micro_batch: Pin<usize>,
    pub n_patches: Pin<usize>,
    pub accumulation: Pin<usize>,
    pub precision: Pin<Precision>,
    pub checkpointing: Pin<bool>,
}

impl Default for Pins {
    fn default() -> Self {
        let unpinned = |value| Pin {
            pinned: false,
            value,
        };
        Self {
            micro_batch: unpinned(8),
            n_patches: unpinned(4),
            accumulation: unpinned(1),
            precision: Pin {
                pinned: false,
                value: Precision::F32,
            },
            checkpointing: Pin {
                pinned: false,
                value: false,
            },
        }
    }
}

impl Pins {
    pub fn fixed(&self) -> Fixed {
        let pick = |p: Pin<usize>| p.pinned.then_some(p.value);
        Fixed {
            micro_batch: pick(self.micro_batch),
            n_patches: pick(self.n_patches),
            accumulation: pick(self.accumulation),
            checkpointing: self
                .checkpointing
                .pinned
                .then_some(self.checkpointing.value),
            precision: self.precision.pinned.then_some(self.precision.value),
            ..Fixed::default()
        }
    }
}
