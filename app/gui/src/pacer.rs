//! When the window repaints for what the background jobs report. A message that changes what
//! the app is doing (a run started, finished or failed; a calibration done) is shown at once;
//! a step's figures are shown at most once an interval, however fast steps come: drawing the
//! window on a software renderer costs CPU time that training on the CPU needs, and a few
//! frames a second are enough for bars and curves (docs/GUI.md, "Drawing while training").

use std::time::{Duration, Instant};

/// Repaints for step events, at most one this often.
pub const STEP_INTERVAL: Duration = Duration::from_millis(250);

/// The longest interval between repaints for step events, however costly a frame.
pub const MAX_STEP_INTERVAL: Duration = Duration::from_secs(1);

/// The share of one core that drawing for step events may take: a frame that costs more CPU
/// time than this share of [`STEP_INTERVAL`] (a window drawn in software, by Mesa's llvmpipe)
/// stretches the interval, up to [`MAX_STEP_INTERVAL`].
pub const DRAW_SHARE: f64 = 0.04;

/// The interval between repaints for step events when a frame costs `frame_cpu` of CPU time.
pub fn interval_for(frame_cpu: Duration) -> Duration {
    let wanted = frame_cpu.as_secs_f64() / DRAW_SHARE;
    Duration::from_secs_f64(
        wanted.clamp(STEP_INTERVAL.as_secs_f64(), MAX_STEP_INTERVAL.as_secs_f64()),
    )
}

/// A repaint asked for this long ago that has not happened is asked for again (a frame egui
/// skipped must not leave the window stale).
const STALE: Duration = Duration::from_secs(2);

/// Decides, for each message, whether and when to ask for a repaint.
#[derive(Debug, Clone)]
pub struct RepaintPacer {
    interval: Duration,
    /// When the window last drew a frame.
    last_paint: Option<Instant>,
    /// When the repaint asked for and not yet drawn is due.
    scheduled: Option<Instant>,
}

impl Default for RepaintPacer {
    fn default() -> Self {
        Self::new(STEP_INTERVAL)
    }
}

impl RepaintPacer {
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last_paint: None,
            scheduled: None,
        }
    }

    /// A message arrived at `now`: the delay after which to ask for a repaint (zero: at once),
    /// or `None` where a repaint already asked for will show it. An `urgent` message is due at
    /// once; another one interval after the last frame, or at once where that has passed.
    pub fn arrived(&mut self, now: Instant, urgent: bool) -> Option<Duration> {
        let due = match self.last_paint {
            Some(painted) if !urgent => (painted + self.interval).max(now),
            _ => now,
        };
        let pending = self
            .scheduled
            .is_some_and(|s| s <= due && now.saturating_duration_since(s) < STALE);
        if pending {
            return None;
        }
        self.scheduled = Some(due);
        Some(due.saturating_duration_since(now))
    }

    /// Repaints for step events at most once `interval` from now on.
    pub fn set_interval(&mut self, interval: Duration) {
        self.interval = interval;
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The window drew a frame at `now`: what arrived before it is shown.
    pub fn painted(&mut self, now: Instant) {
        self.last_paint = Some(now);
        // A repaint due later (one asked for before a frame that something else caused) still
        // comes: kept, so that messages meanwhile do not ask for another.
        if self.scheduled.is_some_and(|s| s <= now) {
            self.scheduled = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Plays `arrivals` (ms after the start, urgent) against a window that paints each
    /// repaint when it is due; returns the times it painted.
    fn play(arrivals: &[(u64, bool)], until: u64) -> Vec<u64> {
        let start = Instant::now();
        let mut pacer = RepaintPacer::default();
        pacer.painted(start);
        let mut due: Option<u64> = None;
        let mut paints = Vec::new();
        let mut next = arrivals.iter().peekable();
        for t in 0..=until {
            let now = start + ms(t);
            if due.is_some_and(|d| d <= t) {
                pacer.painted(now);
                paints.push(t);
                due = None;
            }
            while let Some(&&(at, urgent)) = next.peek() {
                if at != t {
                    break;
                }
                next.next();
                if let Some(delay) = pacer.arrived(now, urgent) {
                    let at = t + delay.as_millis() as u64;
                    due = Some(due.map_or(at, |d| d.min(at)));
                }
            }
        }
        paints
    }

    #[test]
    fn a_burst_of_steps_asks_for_one_repaint_within_the_interval() {
        let start = Instant::now();
        let mut pacer = RepaintPacer::default();
        pacer.painted(start);
        // Twenty steps in 100 ms: one repaint, due one interval after the last frame.
        let asked: Vec<Duration> = (0..20)
            .filter_map(|i| pacer.arrived(start + ms(5 * i), false))
            .collect();
        assert_eq!(asked, vec![STEP_INTERVAL]);
    }

    #[test]
    fn steps_after_a_quiet_spell_are_drawn_at_once() {
        let start = Instant::now();
        let mut pacer = RepaintPacer::default();
        pacer.painted(start);
        assert_eq!(pacer.arrived(start + ms(900), false), Some(Duration::ZERO));
        assert_eq!(pacer.arrived(start + ms(901), false), None);
    }

    #[test]
    fn steady_steps_repaint_at_the_bounded_rate() {
        // A step every 20 ms for 2 s: about 8 frames, never two closer than the interval.
        let arrivals: Vec<(u64, bool)> = (1..100).map(|i| (20 * i, false)).collect();
        let paints = play(&arrivals, 2_100);
        assert!((7..=9).contains(&paints.len()), "{paints:?}");
        for pair in paints.windows(2) {
            assert!(
                pair[1] - pair[0] >= STEP_INTERVAL.as_millis() as u64,
                "{paints:?}"
            );
        }
        // The last step is shown within an interval of its arrival.
        let last = arrivals.last().map_or(0, |a| a.0);
        assert!(
            paints.iter().any(|&p| p >= last && p - last <= 250),
            "{paints:?}"
        );
    }

    #[test]
    fn a_state_change_is_drawn_at_once_even_inside_a_burst() {
        let start = Instant::now();
        let mut pacer = RepaintPacer::default();
        pacer.painted(start);
        assert_eq!(
            pacer.arrived(start + ms(10), false),
            Some(STEP_INTERVAL - ms(10))
        );
        // The run finished: at once, not at the paced time.
        assert_eq!(pacer.arrived(start + ms(20), true), Some(Duration::ZERO));
        // Before that frame, nothing more is asked.
        assert_eq!(pacer.arrived(start + ms(21), true), None);
        assert_eq!(pacer.arrived(start + ms(22), false), None);
        pacer.painted(start + ms(25));
        assert_eq!(pacer.arrived(start + ms(30), true), Some(Duration::ZERO));
    }

    #[test]
    fn costly_frames_stretch_the_interval_up_to_its_bound() {
        // A frame of 2 ms CPU (drawn on a GPU): a few a second.
        assert_eq!(interval_for(ms(2)), STEP_INTERVAL);
        // 30 ms (llvmpipe, 1280 x 860): 750 ms, drawing 4% of a core.
        assert_eq!(interval_for(ms(30)), ms(750));
        assert_eq!(interval_for(ms(500)), MAX_STEP_INTERVAL);
        let start = Instant::now();
        let mut pacer = RepaintPacer::default();
        pacer.set_interval(ms(750));
        pacer.painted(start);
        assert_eq!(pacer.arrived(start + ms(100), false), Some(ms(650)));
    }

    #[test]
    fn a_repaint_that_never_came_is_asked_for_again() {
        let start = Instant::now();
        let mut pacer = RepaintPacer::default();
        assert_eq!(pacer.arrived(start, false), Some(Duration::ZERO));
        assert_eq!(pacer.arrived(start + ms(100), false), None);
        assert_eq!(
            pacer.arrived(start + STALE + ms(1), false),
            Some(Duration::ZERO)
        );
    }
}
