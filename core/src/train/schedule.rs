//! Cosine decay of the learning rate, a function of the step alone. burn's scheduler keeps
//! an iteration counter as state; a closed form needs none, so a checkpoint's step is the
//! whole scheduler state and resuming cannot drift from it.

pub fn cosine_lr(initial: f64, min: f64, step: u64, total_steps: u64) -> f64 {
    let progress = (step as f64 / total_steps.max(1) as f64).min(1.0);
    min + 0.5 * (initial - min) * (1.0 + (std::f64::consts::PI * progress).cos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_high_ends_low_halfway_half() {
        assert_eq!(cosine_lr(1e-3, 0.0, 0, 100), 1e-3);
        assert!((cosine_lr(1e-3, 0.0, 50, 100) - 5e-4).abs() < 1e-12);
        assert!(cosine_lr(1e-3, 1e-5, 100, 100) - 1e-5 < 1e-12);
        assert!(cosine_lr(1e-3, 0.0, 30, 100) > cosine_lr(1e-3, 0.0, 31, 100));
    }
}
