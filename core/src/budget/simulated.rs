//! Common GPUs by their memory, for `--simulate-device` and `plan --what-if`: the budget
//! they would give, so the planner and recovery can be exercised on a machine without them.

use serde::Serialize;

const GIB: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SimulatedDevice {
    /// What `--simulate-device` takes.
    pub name: &'static str,
    pub label: &'static str,
    pub memory_bytes: u64,
}

/// The table, smallest first. Memory as sold; the budget is a fraction of it.
pub const DEVICES: &[SimulatedDevice] = &[
    SimulatedDevice {
        name: "rtx3070-laptop",
        label: "RTX 3070 Laptop (8 GiB)",
        memory_bytes: 8 * GIB,
    },
    SimulatedDevice {
        name: "rtx3060",
        label: "RTX 3060 (12 GiB)",
        memory_bytes: 12 * GIB,
    },
    SimulatedDevice {
        name: "t4",
        label: "Tesla T4 (16 GiB)",
        memory_bytes: 16 * GIB,
    },
    SimulatedDevice {
        name: "rtx3090",
        label: "RTX 3090 (24 GiB)",
        memory_bytes: 24 * GIB,
    },
    SimulatedDevice {
        name: "a100-40gb",
        label: "A100 40 GB",
        memory_bytes: 40 * GIB,
    },
    SimulatedDevice {
        name: "a100-80gb",
        label: "A100 80 GB",
        memory_bytes: 80 * GIB,
    },
    SimulatedDevice {
        name: "h100",
        label: "H100 80 GB",
        memory_bytes: 80 * GIB,
    },
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no simulated device named {name:?}; the table has: {known}")]
pub struct UnknownDevice {
    pub name: String,
    pub known: String,
}

/// Finds a device by name, forgiving case and `_` for `-`.
pub fn find(name: &str) -> Result<SimulatedDevice, UnknownDevice> {
    let wanted = name.trim().to_ascii_lowercase().replace('_', "-");
    DEVICES
        .iter()
        .find(|d| d.name == wanted)
        .copied()
        .ok_or_else(|| UnknownDevice {
            name: name.to_string(),
            known: DEVICES
                .iter()
                .map(|d| d.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_forgiving_and_unknown_ones_list_the_table() {
        assert_eq!(find("RTX3070_Laptop").unwrap().memory_bytes, 8 * GIB);
        let err = find("gtx480").unwrap_err().to_string();
        assert!(err.contains("gtx480") && err.contains("a100-80gb"), "{err}");
    }
}
