//! How close generated patches are to real ones of their class, in numbers.
//!
//! Features: a patch's band profile, each mel band's mean over the patch's frames and its
//! standard deviation over them (2 x mels values): the harmonics a machine hums at and how
//! steady they are, what tells the built-in set's IDs apart. Per class, the Fréchet
//! distance between Gaussians fitted to the real and the generated profiles, with diagonal
//! covariances (|mu_r - mu_g|^2 + sum (sigma_r - sigma_g)^2): 0 when the two match in mean
//! and spread, growing as they part. Diagonal rather than full covariance: a few hundred
//! patches per class cannot estimate 128 x 128 covariances, and no matrix square root is
//! needed. Beside it, how often a generated patch's nearest real class centroid (bands
//! scaled by the real patches' spread) is its own class: whether the classes come out apart.

/// A patch's band profile: each band's mean over frames, then each band's standard
/// deviation over frames. `patch`: `mels x frames` values, band by band.
pub fn band_profile(patch: &[f32], mels: usize, frames: usize) -> Vec<f64> {
    let mut means = Vec::with_capacity(mels);
    let mut spreads = Vec::with_capacity(mels);
    for band in patch.chunks(frames.max(1)).take(mels) {
        let n = band.len().max(1) as f64;
        let mean = band.iter().map(|&v| v as f64).sum::<f64>() / n;
        let variance = band.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        means.push(mean);
        spreads.push(variance.sqrt());
    }
    means.extend(spreads);
    means
}

/// A Gaussian with a diagonal covariance, fitted to feature vectors.
#[derive(Debug, Clone, PartialEq)]
struct Diagonal {
    mean: Vec<f64>,
    deviation: Vec<f64>,
}

impl Diagonal {
    fn fit(features: &[&[f64]]) -> Option<Self> {
        let first = features.first()?;
        let n = features.len() as f64;
        let mut mean = vec![0.0; first.len()];
        for f in features {
            for (m, v) in mean.iter_mut().zip(f.iter()) {
                *m += v / n;
            }
        }
        let mut variance = vec![0.0; first.len()];
        for f in features {
            for ((s, v), m) in variance.iter_mut().zip(f.iter()).zip(&mean) {
                *s += (v - m).powi(2) / n;
            }
        }
        Some(Self {
            mean,
            deviation: variance.into_iter().map(f64::sqrt).collect(),
        })
    }

    /// The Fréchet distance to `other`: for diagonal covariances the squared distance of
    /// the means plus that of the standard deviations.
    fn frechet(&self, other: &Self) -> f64 {
        let means: f64 = self
            .mean
            .iter()
            .zip(&other.mean)
            .map(|(a, b)| (a - b).powi(2))
            .sum();
        let spreads: f64 = self
            .deviation
            .iter()
            .zip(&other.deviation)
            .map(|(a, b)| (a - b).powi(2))
            .sum();
        means + spreads
    }
}

/// One class's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassQuality {
    pub class: usize,
    pub real: usize,
    pub generated: usize,
    /// The Fréchet distance of the band profiles; `None` without patches of both.
    pub frechet: Option<f64>,
    /// Share of the generated patches whose nearest real class centroid is their class.
    pub recognised: f64,
    /// The same share for the real patches: what the centroids can tell apart at all.
    pub real_recognised: f64,
}

/// Each class's figures, real and generated features given as (class, profile).
pub fn compare(
    real: &[(usize, Vec<f64>)],
    generated: &[(usize, Vec<f64>)],
    classes: usize,
) -> Vec<ClassQuality> {
    fn of(set: &[(usize, Vec<f64>)], class: usize) -> Vec<&[f64]> {
        set.iter()
            .filter(|(c, _)| *c == class)
            .map(|(_, f)| f.as_slice())
            .collect()
    }
    let real_fits: Vec<Option<Diagonal>> =
        (0..classes).map(|c| Diagonal::fit(&of(real, c))).collect();
    // Bands scaled by the real patches' spread over all classes, so that no band's units
    // decide the nearest centroid.
    let all: Vec<&[f64]> = real.iter().map(|(_, f)| f.as_slice()).collect();
    let scale = Diagonal::fit(&all).map(|d| d.deviation);
    let nearest = |features: &[f64]| -> Option<usize> {
        let scale = scale.as_ref()?;
        real_fits
            .iter()
            .enumerate()
            .filter_map(|(c, fit)| {
                let fit = fit.as_ref()?;
                let distance: f64 = features
                    .iter()
                    .zip(&fit.mean)
                    .zip(scale)
                    .map(|((v, m), s)| ((v - m) / s.max(1e-6)).powi(2))
                    .sum();
                Some((c, distance))
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, _)| c)
    };
    let share = |set: &[&[f64]], class: usize| {
        let hits = set.iter().filter(|f| nearest(f) == Some(class)).count();
        hits as f64 / set.len().max(1) as f64
    };
    (0..classes)
        .map(|class| {
            let (r, g) = (of(real, class), of(generated, class));
            let frechet = match (&real_fits[class], Diagonal::fit(&g)) {
                (Some(real), Some(generated)) => Some(real.frechet(&generated)),
                _ => None,
            };
            ClassQuality {
                class,
                real: r.len(),
                generated: g.len(),
                frechet,
                recognised: share(&g, class),
                real_recognised: share(&r, class),
            }
        })
        .collect()
}

/// The mean Fréchet distance over the classes that have one: the run's quality figure
/// (lower is better). `None` when no class has both real and generated patches.
pub fn mean_frechet(classes: &[ClassQuality]) -> Option<f64> {
    let known: Vec<f64> = classes.iter().filter_map(|c| c.frechet).collect();
    (!known.is_empty()).then(|| known.iter().sum::<f64>() / known.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_band_profile_is_each_bands_mean_then_its_spread() {
        // Two bands of four frames: [1, 1, 1, 1] and [0, 2, 0, 2].
        let patch = [1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 0.0, 2.0];
        assert_eq!(band_profile(&patch, 2, 4), vec![1.0, 1.0, 0.0, 1.0]);
    }

    /// Hand-computed: real class 0 profiles [0, 0] and [2, 0] (mean [1, 0], deviations
    /// [1, 0]); generated [1, 0] and [1, 2] (mean [1, 1], deviations [0, 1]). Distance:
    /// means 0 + 1, deviations 1 + 1 = 3.
    #[test]
    fn the_frechet_distance_of_diagonal_gaussians_is_hand_checked() {
        let real = vec![(0, vec![0.0, 0.0]), (0, vec![2.0, 0.0])];
        let generated = vec![(0, vec![1.0, 0.0]), (0, vec![1.0, 2.0])];
        let quality = compare(&real, &generated, 1);
        assert_eq!(quality[0].frechet, Some(3.0));
        assert_eq!((quality[0].real, quality[0].generated), (2, 2));
        assert_eq!(mean_frechet(&quality), Some(3.0));
        // The same patches are at distance 0.
        assert_eq!(compare(&real, &real, 1)[0].frechet, Some(0.0));
    }

    #[test]
    fn generated_patches_are_recognised_by_the_nearest_real_centroid() {
        let real = vec![
            (0, vec![0.0, 0.0]),
            (0, vec![0.2, 0.0]),
            (1, vec![5.0, 5.0]),
            (1, vec![5.2, 5.0]),
        ];
        // One generated class-0 patch lands near class 1: half recognised.
        let generated = vec![
            (0, vec![0.1, 0.1]),
            (0, vec![4.9, 5.1]),
            (1, vec![5.0, 4.8]),
        ];
        let quality = compare(&real, &generated, 2);
        assert_eq!(quality[0].recognised, 0.5);
        assert_eq!(quality[1].recognised, 1.0);
        assert_eq!(quality[0].real_recognised, 1.0);
        assert!(quality[0].frechet.unwrap() > quality[1].frechet.unwrap());
    }
}
