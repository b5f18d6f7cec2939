//! Patching: a spectrogram yields `n_patches` patches, each every mel band by a few
//! consecutive frames, `stride` frames apart along time (seed 001's `--n_patches` and
//! `--stride`). The patch's shape is the model's input: 64 x 64 for the default model, 128 x
//! 5 (a frame stack) for the DCASE baseline.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::spectrogram::Spectrogram;

/// The default model's patches are `PATCH_SIZE` mel bands by `PATCH_SIZE` frames.
pub const PATCH_SIZE: usize = 64;

/// A patch: `mels` bands (all of the spectrogram's) by `frames` consecutive frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchShape {
    pub mels: usize,
    pub frames: usize,
}

impl PatchShape {
    /// The default model's 64 x 64 patch.
    pub const SQUARE_64: PatchShape = PatchShape {
        mels: PATCH_SIZE,
        frames: PATCH_SIZE,
    };

    /// Values in one patch.
    pub fn values(&self) -> usize {
        self.mels * self.frames
    }
}

impl Default for PatchShape {
    fn default() -> Self {
        Self::SQUARE_64
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PatchError {
    #[error(
        "{n_patches} patches with stride {stride} span {span} frames, but the spectrogram has \
         only {frames}; lower the patches per spectrogram or the stride"
    )]
    TooLong {
        n_patches: usize,
        stride: usize,
        span: usize,
        frames: usize,
    },
    #[error(
        "the spectrogram has {n_mels} mel bands; the model takes patches of {expected} (compute \
         the features with {expected} mels)"
    )]
    WrongMels { n_mels: usize, expected: usize },
    #[error(
        "the patches per spectrogram and the stride must be at least 1 (got {n_patches} and \
         {stride})"
    )]
    Zero { n_patches: usize, stride: usize },
}

/// Where the run of patches starts inside a spectrogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PatchPlacement {
    /// Centred, the same every epoch.
    #[default]
    Even,
    /// A random start each time the spectrogram is drawn.
    Random,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchSpec {
    pub n_patches: usize,
    pub stride: usize,
    pub placement: PatchPlacement,
    #[serde(default)]
    pub shape: PatchShape,
}

impl PatchSpec {
    /// Frames covered by the run of patches.
    pub fn span(&self) -> usize {
        (self.n_patches.saturating_sub(1)) * self.stride + self.shape.frames
    }

    /// Checks that a spectrogram of this shape can give these patches.
    pub fn check(&self, n_mels: usize, frames: usize) -> Result<(), PatchError> {
        if self.n_patches == 0 || self.stride == 0 {
            return Err(PatchError::Zero {
                n_patches: self.n_patches,
                stride: self.stride,
            });
        }
        if n_mels != self.shape.mels {
            return Err(PatchError::WrongMels {
                n_mels,
                expected: self.shape.mels,
            });
        }
        if self.span() > frames {
            return Err(PatchError::TooLong {
                n_patches: self.n_patches,
                stride: self.stride,
                span: self.span(),
                frames,
            });
        }
        Ok(())
    }

    /// Appends the patches of `spec` to `out`, each `shape.values()` values, mel-major.
    pub fn extract_into(
        &self,
        spec: &Spectrogram,
        rng: &mut impl Rng,
        out: &mut Vec<f32>,
    ) -> Result<(), PatchError> {
        self.check(spec.n_mels, spec.frames)?;
        let slack = spec.frames - self.span();
        let first = match self.placement {
            PatchPlacement::Even => slack / 2,
            PatchPlacement::Random => rng.random_range(0..=slack),
        };
        for p in 0..self.n_patches {
            copy_patch(spec, self.shape, first + p * self.stride, out);
        }
        Ok(())
    }
}

/// Every patch of `shape`, `stride` frames apart over the whole clip: how a clip is scored.
pub fn all_patches(
    spec: &Spectrogram,
    shape: PatchShape,
    stride: usize,
    out: &mut Vec<f32>,
) -> Result<usize, PatchError> {
    let n_patches = if spec.frames >= shape.frames && stride > 0 {
        (spec.frames - shape.frames) / stride + 1
    } else {
        0
    };
    let whole = PatchSpec {
        n_patches,
        stride,
        placement: PatchPlacement::Even,
        shape,
    };
    whole.check(spec.n_mels, spec.frames)?;
    for p in 0..n_patches {
        copy_patch(spec, shape, p * stride, out);
    }
    Ok(n_patches)
}

fn copy_patch(spec: &Spectrogram, shape: PatchShape, start: usize, out: &mut Vec<f32>) {
    for mel in 0..shape.mels {
        let row = mel * spec.frames + start;
        out.extend_from_slice(&spec.data[row..row + shape.frames]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn ramp(frames: usize) -> Spectrogram {
        let mut s = Spectrogram::zeros(PATCH_SIZE, frames);
        for mel in 0..PATCH_SIZE {
            for f in 0..frames {
                s.data[mel * frames + f] = f as f32 + 1000.0 * mel as f32;
            }
        }
        s
    }

    #[test]
    fn even_patches_are_centred_and_stride_apart() {
        let spec = ramp(313);
        let ps = PatchSpec {
            n_patches: 4,
            stride: 32,
            placement: PatchPlacement::Even,
            shape: PatchShape::SQUARE_64,
        };
        let mut out = Vec::new();
        ps.extract_into(&spec, &mut ChaCha8Rng::seed_from_u64(0), &mut out)
            .unwrap();
        assert_eq!(out.len(), 4 * PATCH_SIZE * PATCH_SIZE);
        let first = (313 - ps.span()) / 2;
        for p in 0..4 {
            let patch = &out[p * 4096..(p + 1) * 4096];
            assert_eq!(patch[0], (first + p * 32) as f32);
            // Last value of the patch: mel 63, frame start + 63.
            assert_eq!(patch[4095], (first + p * 32 + 63) as f32 + 63_000.0);
        }
    }

    #[test]
    fn random_placement_varies_and_stays_inside() {
        let spec = ramp(200);
        let ps = PatchSpec {
            n_patches: 2,
            stride: 16,
            placement: PatchPlacement::Random,
            shape: PatchShape::SQUARE_64,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut starts = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let mut out = Vec::new();
            ps.extract_into(&spec, &mut rng, &mut out).unwrap();
            let start = out[0] as usize;
            assert!(start + ps.span() <= 200);
            starts.insert(start);
        }
        assert!(
            starts.len() > 10,
            "random starts should vary, got {starts:?}"
        );
    }

    #[test]
    fn too_many_patches_is_a_clear_error() {
        let spec = ramp(100);
        let ps = PatchSpec {
            n_patches: 4,
            stride: 32,
            placement: PatchPlacement::Even,
            shape: PatchShape::SQUARE_64,
        };
        let err = ps
            .extract_into(&spec, &mut ChaCha8Rng::seed_from_u64(0), &mut Vec::new())
            .unwrap_err();
        assert!(err.to_string().contains("lower the patches per"), "{err}");
    }

    #[test]
    fn all_patches_cover_the_clip() {
        let spec = ramp(313);
        let mut out = Vec::new();
        let n = all_patches(&spec, PatchShape::SQUARE_64, 32, &mut out).unwrap();
        assert_eq!(n, (313 - 64) / 32 + 1);
        assert_eq!(out.len(), n * 4096);
    }

    /// The DCASE baseline's frame stacks: every mel band by 5 frames, one frame apart.
    #[test]
    fn frame_stacks_are_narrow_patches() {
        let spec = ramp(313);
        let stack = PatchShape {
            mels: PATCH_SIZE,
            frames: 5,
        };
        let mut out = Vec::new();
        let n = all_patches(&spec, stack, 1, &mut out).unwrap();
        assert_eq!(n, 313 - 5 + 1);
        assert_eq!(out.len(), n * 64 * 5);
        // The second stack starts one frame later; its last value is mel 63, frame 1 + 4.
        assert_eq!(out[64 * 5], 1.0);
        assert_eq!(out[2 * 64 * 5 - 1], 5.0 + 63_000.0);
        let wrong = PatchShape {
            mels: 128,
            frames: 5,
        };
        let err = all_patches(&spec, wrong, 1, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("128 mels"), "{err}");
    }
}
