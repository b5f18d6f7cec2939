//! The contrastive loss over a step's pairs and retrieval recall over a held-out split.
//!
//! Loss: CLIP's and CLAP's symmetric InfoNCE. Each pair's audio embedding scored against
//! every text embedding of the step (their dot products, the embeddings of unit length,
//! times a learned scale), cross-entropy of its own text among them; the same from each text
//! to every audio; the mean of the two. Every other pair of the step is a negative, so the
//! loss couples the step's examples: a step split into micro-batches is the same function
//! only by gradient caching (`crate::step::cached`).

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor};

/// The symmetric InfoNCE loss of `n` pairs' embeddings, `audio` and `text` `[n, width]` of
/// unit length, the logits scaled by `exp(log_scale)` (`[1]`).
pub fn info_nce(audio: Tensor<2>, text: Tensor<2>, log_scale: Tensor<1>) -> Tensor<1> {
    let n = audio.dims()[0];
    let scale = log_scale.exp().reshape([1, 1]);
    let logits = audio.matmul(text.transpose()) * scale;
    let own = Tensor::<1, Int>::arange(0..n as i64, &logits.device()).reshape([n, 1]);
    let by_audio = log_softmax(logits.clone(), 1).gather(1, own.clone());
    let by_text = log_softmax(logits.transpose(), 1).gather(1, own);
    (by_audio.mean() + by_text.mean()).div_scalar(-2.0)
}

/// `x` scaled to unit length, row by row.
pub fn unit(x: Tensor<2>) -> Tensor<2> {
    let norm = x.clone().square().sum_dim(1).sqrt().add_scalar(1e-8);
    x / norm
}

/// Recall at each k, both ways, over `n` pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct Recall {
    pub ks: Vec<usize>,
    /// For each k, the share of audio whose own text is among the k texts it scores
    /// highest.
    pub audio_to_text: Vec<f64>,
    /// The same from each text to the audio.
    pub text_to_audio: Vec<f64>,
}

/// Recall at `ks` from `similarity`, `n x n` row by row: row i is audio i scored against
/// every text, pair i's own text in column i. A pair's rank is the number of others scored
/// at least as high as its own (ties count against it, so a constant score recalls
/// nothing by chance).
pub fn recall(similarity: &[f32], n: usize, ks: &[usize]) -> Recall {
    let at = |i: usize, j: usize| similarity[i * n + j];
    let rank_by_audio = |i: usize| (0..n).filter(|&j| j != i && at(i, j) >= at(i, i)).count();
    let rank_by_text = |j: usize| (0..n).filter(|&i| i != j && at(i, j) >= at(j, j)).count();
    let share = |ranks: &[usize], k: usize| {
        ranks.iter().filter(|&&r| r < k).count() as f64 / ranks.len().max(1) as f64
    };
    let by_audio: Vec<usize> = (0..n).map(rank_by_audio).collect();
    let by_text: Vec<usize> = (0..n).map(rank_by_text).collect();
    Recall {
        ks: ks.to_vec(),
        audio_to_text: ks.iter().map(|&k| share(&by_audio, k)).collect(),
        text_to_audio: ks.iter().map(|&k| share(&by_text, k)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_counts_where_each_pair_ranks_its_own() {
        // Three pairs. Audio 0 ranks text 0 first; audio 1 ranks text 2 above its own
        // (rank 1); audio 2 ties its own with text 0 (the tie counts against it: rank 1).
        #[rustfmt::skip]
        let s = [
            0.9, 0.1, 0.2,
            0.3, 0.5, 0.6,
            0.4, 0.0, 0.4,
        ];
        let r = recall(&s, 3, &[1, 2, 3]);
        assert_eq!(r.audio_to_text, [1.0 / 3.0, 1.0, 1.0]);
        // By text: text 0's column (0.9, 0.3, 0.4): own first; text 1's (0.1, 0.5, 0.0):
        // first; text 2's (0.2, 0.6, 0.4): audio 1 above its own 0.4, rank 1.
        assert_eq!(r.text_to_audio, [2.0 / 3.0, 1.0, 1.0]);
        // A constant score recalls nothing.
        let flat = recall(&[0.5; 9], 3, &[1, 3]);
        assert_eq!(flat.audio_to_text, [0.0, 1.0]);
    }

    #[test]
    fn info_nce_is_log_n_for_embeddings_that_tell_nothing_apart() {
        use burn::tensor::TensorData;
        let device = crate::BackendKind::Flex.device().unwrap();
        let n = 4;
        let same = Tensor::<2>::ones([n, 3], &device);
        let zero = Tensor::<1>::from_data(TensorData::new(vec![0.0f32], [1]), &device);
        let loss = info_nce(unit(same.clone()), unit(same), zero.clone())
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()[0];
        assert!((loss - (n as f32).ln()).abs() < 1e-5, "{loss}");
        // Orthogonal pairs at a large scale: each finds its own, the loss near 0.
        let eye = Tensor::<2>::eye(n, &device);
        let scale = Tensor::<1>::from_data(TensorData::new(vec![5.0f32], [1]), &device);
        let loss = info_nce(eye.clone(), eye, scale)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap()[0];
        assert!(loss < 1e-3, "{loss}");
    }
}
