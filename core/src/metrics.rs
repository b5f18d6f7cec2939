//! Detection metrics over anomaly scores.

/// Area under the ROC curve: the probability that a random anomalous clip scores above a
/// random normal one, ties counting half (the Mann-Whitney statistic, as scikit-learn's
/// `roc_auc_score` gives). `None` when either class is empty.
pub fn roc_auc(normal: &[f64], anomalous: &[f64]) -> Option<f64> {
    if normal.is_empty() || anomalous.is_empty() {
        return None;
    }
    let mut all: Vec<(f64, bool)> = normal
        .iter()
        .map(|&s| (s, false))
        .chain(anomalous.iter().map(|&s| (s, true)))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Average ranks over ties, then sum the ranks of the anomalous scores.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j + 1 < all.len() && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_sum += mean_rank * all[i..=j].iter().filter(|(_, a)| *a).count() as f64;
        i = j + 1;
    }
    let (n_a, n_n) = (anomalous.len() as f64, normal.len() as f64);
    Some((rank_sum - n_a * (n_a + 1.0) / 2.0) / (n_a * n_n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_chance_and_inverted_rankings() {
        assert_eq!(roc_auc(&[0.1, 0.2], &[0.3, 0.4]), Some(1.0));
        assert_eq!(roc_auc(&[0.3, 0.4], &[0.1, 0.2]), Some(0.0));
        assert_eq!(roc_auc(&[0.5, 0.5], &[0.5]), Some(0.5));
        assert_eq!(roc_auc(&[], &[0.5]), None);
    }

    #[test]
    fn matches_the_pairwise_definition() {
        let normal = [0.1, 0.4, 0.35, 0.8, 0.35];
        let anomalous = [0.9, 0.35, 0.5, 0.2];
        let mut wins = 0.0;
        for a in anomalous {
            for n in normal {
                wins += if a > n {
                    1.0
                } else if a == n {
                    0.5
                } else {
                    0.0
                };
            }
        }
        let expected = wins / (normal.len() * anomalous.len()) as f64;
        assert!((roc_auc(&normal, &anomalous).unwrap() - expected).abs() < 1e-12);
    }
}
