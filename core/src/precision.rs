//! Floating-point precision: of what a device computes in, and of a training step's compute.
//! Below the probe, the planner and the training loop, which all speak of it.

use serde::{Deserialize, Serialize};

/// Floating-point precision of a device, and of a training step's compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    F16,
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Bf16 => "bf16",
        }
    }

    /// The dtype encoder and decoder compute in; `None` for f32, the parameters' own.
    pub fn compute_dtype(self) -> Option<burn::tensor::FloatDType> {
        match self {
            Precision::F32 => None,
            Precision::F16 => Some(burn::tensor::FloatDType::F16),
            Precision::Bf16 => Some(burn::tensor::FloatDType::BF16),
        }
    }

    /// Factor the loss is multiplied by before backward, and the gradients divided by after,
    /// so that small f16 gradients do not flush to zero. bf16 has f32's range and needs none.
    pub fn loss_scale(self) -> f32 {
        match self {
            Precision::F16 => 1024.0,
            _ => 1.0,
        }
    }

    /// Whether `device` computes in this precision.
    pub fn supported_on(self, device: &burn::tensor::Device) -> bool {
        match self.compute_dtype() {
            None => true,
            Some(dt) => device.supports_dtype(burn::tensor::DType::from(dt)),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" => Ok(Precision::F32),
            "f16" | "fp16" | "half" => Ok(Precision::F16),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!("unknown precision {s:?}; choose f32, f16 or bf16")),
        }
    }
}
