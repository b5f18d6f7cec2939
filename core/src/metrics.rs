//! Detection metrics over anomaly scores, and transcription error rates.

/// Area under the ROC curve: the probability that a random anomalous clip scores above a
/// random normal one, ties counting half, as scikit-learn's `roc_auc_score` gives (the
/// trapezoids under the ROC corners equal that Mann-Whitney statistic). `None` when either
/// class is empty.
pub fn roc_auc(normal: &[f64], anomalous: &[f64]) -> Option<f64> {
    partial_auc(normal, anomalous, 1.0)
}

/// The ROC curve's corners, (false-positive rate, true-positive rate) from (0, 0) to (1, 1),
/// one per distinct score taken as the threshold, highest first (as `roc_curve` has them).
fn roc_points(normal: &[f64], anomalous: &[f64]) -> Vec<(f64, f64)> {
    let mut all: Vec<(f64, bool)> = normal
        .iter()
        .map(|&s| (s, false))
        .chain(anomalous.iter().map(|&s| (s, true)))
        .collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (n_n, n_a) = (normal.len() as f64, anomalous.len() as f64);
    let mut points = vec![(0.0, 0.0)];
    let (mut fp, mut tp) = (0usize, 0usize);
    let mut i = 0;
    while i < all.len() {
        let mut j = i;
        while j < all.len() && all[j].0 == all[i].0 {
            if all[j].1 {
                tp += 1;
            } else {
                fp += 1;
            }
            j += 1;
        }
        points.push((fp as f64 / n_n, tp as f64 / n_a));
        i = j;
    }
    points
}

/// Partial AUC over false-positive rates up to `max_fpr`, McClish-standardised so that chance
/// is 0.5 and perfect is 1: the DCASE 2020 Task 2 pAUC, computed as scikit-learn's
/// `roc_auc_score(max_fpr=...)` does. `None` when either class is empty or `max_fpr` is not
/// in (0, 1].
pub fn partial_auc(normal: &[f64], anomalous: &[f64], max_fpr: f64) -> Option<f64> {
    if normal.is_empty() || anomalous.is_empty() || !(max_fpr > 0.0 && max_fpr <= 1.0) {
        return None;
    }
    let points = roc_points(normal, anomalous);
    // The curve up to max_fpr, closed by the point interpolated at max_fpr.
    let stop = points
        .iter()
        .position(|&(fpr, _)| fpr > max_fpr)
        .unwrap_or(points.len());
    let mut curve: Vec<(f64, f64)> = points[..stop].to_vec();
    if let (Some(&(x0, y0)), Some(&(x1, y1))) = (points.get(stop.wrapping_sub(1)), points.get(stop))
    {
        curve.push((max_fpr, y0 + (y1 - y0) * (max_fpr - x0) / (x1 - x0)));
    }
    let area: f64 = curve
        .windows(2)
        .map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0)
        .sum();
    if max_fpr == 1.0 {
        return Some(area);
    }
    let (min_area, max_area) = (0.5 * max_fpr * max_fpr, max_fpr);
    Some(0.5 * (1.0 + (area - min_area) / (max_area - min_area)))
}

/// Errors of a set of transcriptions against their references, as ASR toolkits count them:
/// the edit distance (substitutions, deletions, insertions) summed over utterances, over
/// the references' length summed. Counts accumulate utterance by utterance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCount {
    pub edits: usize,
    pub reference: usize,
}

impl ErrorCount {
    /// Character errors of `hypothesis` against `reference` (spaces are characters).
    pub fn characters(reference: &str, hypothesis: &str) -> Self {
        Self {
            edits: strsim::levenshtein(reference, hypothesis),
            reference: reference.chars().count(),
        }
    }

    /// Word errors, words split at white space.
    pub fn words(reference: &str, hypothesis: &str) -> Self {
        let reference: Vec<&str> = reference.split_whitespace().collect();
        let hypothesis: Vec<&str> = hypothesis.split_whitespace().collect();
        Self {
            edits: strsim::generic_levenshtein(&reference, &hypothesis),
            reference: reference.len(),
        }
    }

    pub fn add(&mut self, other: Self) {
        self.edits += other.edits;
        self.reference += other.reference;
    }

    /// Edits per reference unit (CER or WER); `None` with no reference at all. Above 1 where
    /// the hypotheses insert more than the references hold.
    pub fn rate(&self) -> Option<f64> {
        (self.reference > 0).then(|| self.edits as f64 / self.reference as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores and scikit-learn's AUC and pAUC for them (tests/fixtures/make_auc_fixture.py).
    #[test]
    fn auc_and_pauc_match_scikit_learn() {
        let fixture: serde_json::Value =
            serde_json::from_str(include_str!("../../tests/fixtures/auc_sklearn.json")).unwrap();
        let max_fpr = fixture["max_fpr"].as_f64().unwrap();
        let cases = fixture["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 40);
        let floats = |v: &serde_json::Value| -> Vec<f64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        };
        for (i, case) in cases.iter().enumerate() {
            let (normal, anomalous) = (floats(&case["normal"]), floats(&case["anomalous"]));
            let auc = roc_auc(&normal, &anomalous).unwrap();
            let pauc = partial_auc(&normal, &anomalous, max_fpr).unwrap();
            let want = (
                case["auc"].as_f64().unwrap(),
                case["pauc"].as_f64().unwrap(),
            );
            assert!(
                (auc - want.0).abs() < 1e-12,
                "case {i}: auc {auc} vs {}",
                want.0
            );
            assert!(
                (pauc - want.1).abs() < 1e-12,
                "case {i}: pauc {pauc} vs {}",
                want.1
            );
            let full = partial_auc(&normal, &anomalous, 1.0).unwrap();
            assert!(
                (full - auc).abs() < 1e-12,
                "case {i}: pAUC over all FPRs is the AUC"
            );
        }
        assert_eq!(partial_auc(&[], &[1.0], 0.1), None);
        assert_eq!(partial_auc(&[0.0], &[1.0], 0.0), None);
    }

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

    #[test]
    fn error_rates_count_edits_over_the_references_length() {
        let mut cer = ErrorCount::characters("THE CAT", "THE BAT");
        assert_eq!(
            cer,
            ErrorCount {
                edits: 1,
                reference: 7
            }
        );
        cer.add(ErrorCount::characters("DOG", "DOGS"));
        assert_eq!(cer.rate(), Some(2.0 / 10.0));
        let wer = ErrorCount::words("the cat sat down", "the sat down now");
        assert_eq!(
            wer,
            ErrorCount {
                edits: 2,
                reference: 4
            }
        );
        assert_eq!(ErrorCount::words("", "").rate(), None);
        assert_eq!(ErrorCount::characters("AB", "").rate(), Some(1.0));
    }
}
