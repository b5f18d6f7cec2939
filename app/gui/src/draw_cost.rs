//! What drawing the window costs the run: the CPU time of the window's threads (the UI thread
//! and, where the window is drawn in software, Mesa's llvmpipe threads) against the time a
//! step takes. On a machine whose cores train, that time is taken from training; the training
//! panel says so when it is a noticeable share of a step.

use std::time::{Duration, Instant};

/// The share of a step's time above which the training panel says what drawing costs.
pub const NOTICEABLE: f64 = 0.10;

/// How often the window's CPU time is read, and the span its rate is taken over.
const WINDOW: Duration = Duration::from_secs(2);

/// A reading: when, the window's CPU seconds so far, the run's step and the frames drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    at: Instant,
    cpu_s: f64,
    step: u64,
    frames: u64,
}

/// The window's CPU time per step and per frame over the last couple of seconds.
#[derive(Debug, Clone, Default)]
pub struct DrawCost {
    last: Option<Reading>,
    /// Frames drawn so far.
    frames: u64,
    /// CPU seconds the window took per step, and the wall seconds a step took, over the
    /// last span that had steps in it.
    per_step: Option<(f64, f64)>,
    /// CPU seconds a frame took, over the last span that had frames in it.
    per_frame: Option<f64>,
}

impl DrawCost {
    /// Whether a reading at `now` would be taken (the first, or a [`WINDOW`] after the last).
    pub fn due(&self, now: Instant) -> bool {
        self.last
            .is_none_or(|last| now.saturating_duration_since(last.at) >= WINDOW)
    }

    /// The window drew a frame.
    pub fn frame(&mut self) {
        self.frames += 1;
    }

    /// Takes a reading at `now` (at most one a [`WINDOW`]): `cpu_s` the window's CPU seconds so
    /// far, `step` the run's newest step. Returns whether it made new figures; a span without
    /// steps (paused, planning) leaves the per-step figure as it was.
    pub fn read(&mut self, now: Instant, cpu_s: f64, step: u64) -> bool {
        let reading = Reading {
            at: now,
            cpu_s,
            step,
            frames: self.frames,
        };
        let Some(last) = self.last else {
            self.last = Some(reading);
            return false;
        };
        let wall = now.saturating_duration_since(last.at);
        if wall < WINDOW {
            return false;
        }
        self.last = Some(reading);
        if cpu_s < last.cpu_s {
            return false;
        }
        let cpu = cpu_s - last.cpu_s;
        let frames = self.frames.saturating_sub(last.frames);
        if frames > 0 {
            self.per_frame = Some(cpu / frames as f64);
        }
        let steps = step.saturating_sub(last.step);
        if steps > 0 {
            let steps = steps as f64;
            self.per_step = Some((cpu / steps, wall.as_secs_f64() / steps));
        }
        true
    }

    /// The window's CPU time a frame.
    pub fn per_frame(&self) -> Option<Duration> {
        self.per_frame.map(Duration::from_secs_f64)
    }

    /// Forgets the readings (a new run); the cost of a frame stays.
    pub fn reset(&mut self) {
        *self = Self {
            per_frame: self.per_frame,
            ..Self::default()
        };
    }

    /// The window's CPU time per step and its share of a step's time.
    pub fn per_step(&self) -> Option<(Duration, f64)> {
        let (cpu, step) = self.per_step?;
        (step > 0.0).then(|| (Duration::from_secs_f64(cpu), cpu / step))
    }

    /// The training panel's line, when drawing costs a noticeable share of a step.
    pub fn line(&self) -> Option<String> {
        let (cpu, share) = self.per_step()?;
        (share > NOTICEABLE).then(|| {
            format!(
                "Drawing this window takes {:.0} ms of CPU time a step, {:.0}% of a step's time: \
                 minimise the window or train with trainer-cli for full speed",
                cpu.as_secs_f64() * 1e3,
                share * 100.0
            )
        })
    }
}

/// The CPU seconds the window's threads have taken: the calling (UI) thread's and those of
/// threads named `llvmpipe-*` (Mesa's software rasteriser). `None` where the system does not
/// say (only Linux's /proc is read).
pub fn window_cpu_seconds() -> Option<f64> {
    #[cfg(target_os = "linux")]
    {
        linux::window_cpu_seconds()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
mod linux {
    /// Clock ticks a second of /proc's CPU times: 100 on every Linux build that matters
    /// (`getconf CLK_TCK`).
    const TICKS: f64 = 100.0;

    pub fn window_cpu_seconds() -> Option<f64> {
        let mut ticks = ticks_of(&std::fs::read_to_string("/proc/thread-self/stat").ok()?)?;
        for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let path = task.path();
            let named = std::fs::read_to_string(path.join("comm"))
                .is_ok_and(|name| name.starts_with("llvmpipe"));
            if named {
                ticks += std::fs::read_to_string(path.join("stat"))
                    .ok()
                    .and_then(|s| ticks_of(&s))
                    .unwrap_or(0);
            }
        }
        Some(ticks as f64 / TICKS)
    }

    /// utime + stime of a /proc stat line: fields 14 and 15, counted after the name in
    /// parentheses (which may hold spaces).
    pub fn ticks_of(stat: &str) -> Option<u64> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        Some(utime + stime)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_noticeable_share_is_said_and_a_small_one_is_not() {
        let start = Instant::now();
        let mut cost = DrawCost::default();
        cost.read(start, 10.0, 100);
        assert_eq!(cost.line(), None);
        // 2 s, 20 steps of 100 ms, 0.6 CPU seconds drawing: 30 ms a step, 30%.
        cost.read(start + Duration::from_secs(2), 10.6, 120);
        let (cpu, share) = cost.per_step().expect("a figure");
        assert!((cpu.as_secs_f64() - 0.03).abs() < 1e-9);
        assert!((share - 0.3).abs() < 1e-9);
        let line = cost.line().expect("30% is noticeable");
        assert!(line.contains("30 ms") && line.contains("30%"), "{line}");
        // The next span draws little: 2 ms a step, 10 frames of 4 ms.
        for _ in 0..10 {
            cost.frame();
        }
        assert!(cost.read(start + Duration::from_secs(4), 10.64, 140));
        assert_eq!(cost.line(), None);
        let frame = cost.per_frame().expect("frames were drawn");
        assert!((frame.as_secs_f64() - 0.004).abs() < 1e-9, "{frame:?}");
    }

    #[test]
    fn spans_without_steps_or_too_short_leave_the_figure() {
        let start = Instant::now();
        let mut cost = DrawCost::default();
        cost.read(start, 1.0, 10);
        cost.read(start + Duration::from_millis(500), 5.0, 20);
        assert_eq!(cost.per_step(), None);
        cost.read(start + Duration::from_secs(2), 1.5, 20);
        assert!(cost.line().is_some());
        // Paused: no steps in the span, the figure stays.
        cost.read(start + Duration::from_secs(5), 3.0, 20);
        assert!(cost.line().is_some());
        cost.reset();
        assert_eq!(cost.per_step(), None);
        assert_eq!(cost.line(), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn proc_stat_times_are_read_past_a_name_with_spaces() {
        let stat = "4242 (llvmpipe 0) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0";
        assert_eq!(linux::ticks_of(stat), Some(300));
        assert_eq!(linux::ticks_of("garbage"), None);
        // This thread has a figure, and it grows with work.
        let before = window_cpu_seconds().expect("Linux has /proc");
        let mut x = 0u64;
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = window_cpu_seconds().expect("Linux has /proc");
        assert!(after > before, "{before} -> {after}");
    }
}
