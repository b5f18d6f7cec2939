//! The what-if's calibration: the planner's own, plus one step several times its largest in
//! each precision, so that the large budgets of the table's GPUs are read near a
//! measurement. In host memory that step is held to the room the machine has; the room is
//! not part of the key a calibration is kept under (free memory moves between two runs a
//! moment apart), the rooms that would choose the same steps are kept beside it.

use anyhow::Result;
use headroom_core::Target;
use headroom_core::plan::cache::Kept;
use headroom_core::plan::{self, Calibration, MeasuredCost};
use headroom_core::precision::Precision;
use headroom_core::readback::block_on;
use headroom_core::registry::BuiltIn;
use serde::{Deserialize, Serialize};

/// A calibration with the rooms for which it stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LargeCalibration {
    pub calibration: Calibration,
    pub rooms: Rooms,
}

/// The rooms, in bytes, that choose the same larger steps: at least `from`, below `below`
/// (none: any room above `from`, and no room figure at all).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rooms {
    pub from: f64,
    pub below: Option<f64>,
}

impl Rooms {
    pub const ANY: Rooms = Rooms {
        from: 0.0,
        below: None,
    };

    /// Whether `room` (none: the machine gave no free figure, nothing is held) would choose
    /// the same steps.
    pub fn hold(&self, room: Option<u64>) -> bool {
        match room {
            None => self.below.is_none(),
            Some(room) => {
                let room = room as f64;
                room >= self.from && self.below.is_none_or(|below| room < below)
            }
        }
    }

    fn and(self, other: Rooms) -> Rooms {
        let below = match (self.below, other.below) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Rooms {
            from: self.from.max(other.from),
            below,
        }
    }
}

/// The larger step's patches in a room, from `4 x large` halved while its cost is over the
/// room (`large` and under: no larger step), and the rooms that choose the same.
fn larger_step(cost: Option<&MeasuredCost>, large: usize, room: Option<u64>) -> (usize, Rooms) {
    let mut patches = 4 * large;
    let mut rooms = Rooms::ANY;
    let (Some(room), Some(cost)) = (room, cost) else {
        // No figure to hold it to: any room from the first step's cost picks it as well.
        if let Some(cost) = cost {
            rooms.from = cost.at(patches);
        }
        return (patches, rooms);
    };
    let room = room as f64;
    while patches > large && cost.at(patches) > room {
        // A room of at least this step's cost would have stopped here.
        let over = cost.at(patches);
        rooms.below = Some(rooms.below.map_or(over, |b| b.min(over)));
        patches /= 2;
    }
    if patches > large {
        rooms.from = cost.at(patches);
    }
    (patches, rooms)
}

/// Calibration plus one step four times the larger calibration step's size, of each kind a
/// large plan uses (f32, and the half precision): a step's peak grows faster per patch at
/// larger sizes (docs/PLANNER.md), and a what-if plan reaches thousands of patches with no
/// dry-run to correct it. `room`: what the larger step may take, as the steps measured
/// before it predict (half of the memory free where it runs).
pub fn measure<T: BuiltIn>(
    target: Target,
    model: &T,
    room: Option<u64>,
) -> Result<LargeCalibration> {
    let mut calibration = block_on(plan::calibrate(target, model))?;
    let half = calibration.memory.half.as_ref().map(|h| h.precision);
    let [_, large] = plan::calibration_patches(model, target.backend);
    let mut rooms = Rooms::ANY;
    // A task whose examples are long sequences calibrates at one and two: their per-example
    // part is already most of a step, and four times its larger step (seed 004's size: 8
    // GB) is what a budget plans, not what reading it needs.
    let f32 = model
        .calibration_examples()
        .is_none()
        .then_some(Precision::F32);
    for precision in f32.into_iter().chain(half) {
        // The device's largest buffer may refuse four times the larger step (seed 000's GAN,
        // 64 whole spectrograms, on NVIDIA's Vulkan driver): halved until it runs, or left
        // out, the calibration standing without it. In host memory nothing refuses: the
        // system ends the process (the same GAN on flex, about 30 GiB of a 24 GiB machine),
        // so there the step is held to the room first.
        let (mut patches, held) =
            larger_step(calibration.memory.cost(precision, false), large, room);
        rooms = rooms.and(held);
        while patches > large {
            match block_on(plan::measure_step(target, model, patches, precision, false)) {
                Ok(step) => {
                    plan::learn(&mut calibration, step);
                    break;
                }
                Err(plan::CalibrationError::Step(error)) if error.device_refusal().is_some() => {
                    tracing::info!(patches, "the device refused a large calibration step");
                    patches /= 2;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(LargeCalibration { calibration, rooms })
}

/// The calibration kept from an earlier what-if on `device` with this build, where `room`
/// chooses its steps again, else one measured now (after `announce`) and kept;
/// `recalibrate`: measures whatever is kept.
pub fn kept<T: BuiltIn>(
    recalibrate: bool,
    target: Target,
    device: &str,
    model: &T,
    room: Option<u64>,
    announce: impl FnOnce(),
) -> Result<(Calibration, Kept)> {
    let (large, kept) = crate::kept::kept(
        recalibrate,
        &key_parts(target, device, model),
        |kept: &LargeCalibration| kept.rooms.hold(room),
        || {
            announce();
            measure(target, model, room)
        },
    )?;
    Ok((large.calibration, kept))
}

/// Whether [`kept`] would answer from an earlier run.
pub fn is_kept<T: BuiltIn>(target: Target, device: &str, model: &T, room: Option<u64>) -> bool {
    crate::kept::is_kept(
        &key_parts(target, device, model),
        |kept: &LargeCalibration| kept.rooms.hold(room),
    )
}

/// What a what-if's calibration depends on beside the build: the device it was measured
/// on and the model's settings (the room is kept in the value, [`Rooms`]).
fn key_parts<T: BuiltIn>(target: Target, device: &str, model: &T) -> [String; 4] {
    [
        "what-if calibration".into(),
        serde_json::to_string(&target).unwrap_or_default(),
        device.into(),
        format!("{model:?}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every room the kept range admits chooses the step the range was kept with, and every
    /// room it refuses chooses another, over rooms on both sides of each step's cost.
    #[test]
    fn kept_rooms_are_exactly_the_rooms_that_choose_the_same_step() {
        let large = 64;
        // Whole bytes at every step, so that a room of exactly a step's cost is tried.
        let cost = MeasuredCost::new([(8, 10e6), (64, 38e6)]);
        let steps = [large, 2 * large, 4 * large].map(|p| cost.at(p));
        let mut rooms: Vec<Option<u64>> = vec![None, Some(0)];
        for step in steps {
            for offset in [-1.0, 0.0, 1.0] {
                rooms.push(Some((step + offset) as u64));
            }
        }
        let mut chosen = std::collections::BTreeSet::new();
        for &kept_with in &rooms {
            let (patches, held) = larger_step(Some(&cost), large, kept_with);
            chosen.insert(patches);
            assert!(held.hold(kept_with), "{kept_with:?}: {held:?}");
            for &other in &rooms {
                let same = larger_step(Some(&cost), large, other).0 == patches;
                assert_eq!(
                    held.hold(other),
                    same,
                    "kept with {kept_with:?} ({patches} patches, {held:?}), asked with {other:?}"
                );
            }
        }
        // The rooms above reach every choice, "no larger step" included.
        assert_eq!(chosen.into_iter().collect::<Vec<_>>(), [64, 128, 256]);
    }

    #[test]
    fn two_precisions_hold_where_both_do() {
        let a = Rooms {
            from: 10.0,
            below: Some(30.0),
        };
        let b = Rooms {
            from: 20.0,
            below: None,
        };
        let both = a.and(b);
        assert!(!both.hold(Some(15)) && both.hold(Some(25)) && !both.hold(Some(30)));
        assert!(!both.hold(None));
        assert!(Rooms::ANY.hold(None) && Rooms::ANY.hold(Some(0)));
    }
}
