//! The memory budget: where it comes from ([`source`]: the user's figure, a simulated GPU's
//! memory ([`simulated`]), a device's free memory, a page's room) and the live figure a run
//! measures its steps against, shared so that it can be changed while a run is going (a test
//! lowers it to force an out-of-memory at a chosen step).

pub mod simulated;
pub mod source;

pub use simulated::SimulatedDevice;
pub use source::{BudgetError, BudgetSource, DEFAULT_FRACTION, ResolvedBudget};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::size::human;

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

#[cfg(test)]
mod tests {
    use super::*;

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
