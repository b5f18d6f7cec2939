//! Where to train, as the flags say it: `--backend` (auto probes the machine and says why it
//! chose) and the seeds' `--device`.

use clap::ValueEnum;
use headroom_core::auto;
use headroom_core::model::{ModelConfig, VqAutoencoderConfig};
use headroom_core::probe::gpus::ProbeSettings;
use headroom_core::probe::isolate;
use headroom_core::{BackendKind, Target};

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Let Headroom choose (and say why).
    Auto,
    Flex,
    Ndarray,
    Wgpu,
    Cuda,
}

/// A backend, resolved: what auto chose, why, and the probed device behind it.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub kind: BackendKind,
    pub reason: Option<String>,
    pub device: Option<headroom_core::probe::DeviceReport>,
}

impl Resolved {
    pub fn target(&self) -> Target {
        Target {
            backend: self.kind,
            device: self.device.as_ref().and_then(|d| d.target),
        }
    }
}

impl Backend {
    /// The backend to use, and the reason when Headroom chose it: auto probes the machine
    /// and, when a GPU fits, times a few steps of the default model on it and on the CPU.
    pub fn resolve(self) -> Resolved {
        self.resolve_for(VqAutoencoderConfig::NAME)
    }

    /// As [`Backend::resolve`], timing the built-in model `model`, the one the run trains.
    pub fn resolve_for(self, model: &str) -> Resolved {
        match self {
            Backend::Auto => {
                let report = isolate::probe_machine(isolate::TIMEOUT, ProbeSettings::AUTO);
                let choice = auto::resolve(&report, model);
                Resolved {
                    kind: choice.backend,
                    reason: Some(choice.reason),
                    device: choice.device,
                }
            }
            named => Resolved {
                kind: named.into(),
                reason: None,
                device: None,
            },
        }
    }
}

impl From<Backend> for BackendKind {
    fn from(b: Backend) -> Self {
        match b {
            // Only reached for a named backend: auto is resolved by probing.
            Backend::Auto => BackendKind::Flex,
            Backend::Flex => BackendKind::Flex,
            Backend::Ndarray => BackendKind::Ndarray,
            Backend::Wgpu => BackendKind::Wgpu,
            Backend::Cuda => BackendKind::Cuda,
        }
    }
}

impl From<BackendKind> for Backend {
    fn from(kind: BackendKind) -> Self {
        match kind {
            BackendKind::Flex => Backend::Flex,
            BackendKind::Ndarray => Backend::Ndarray,
            BackendKind::Wgpu => Backend::Wgpu,
            BackendKind::Cuda => Backend::Cuda,
        }
    }
}

/// The seeds' `--device`: `cpu`, `cuda`, `wgpu`, or one device as `trainer-cli probe` lists
/// it (`cuda:1`, `wgpu:0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceArg {
    pub kind: Backend,
    /// The probe's selector, when one device was named.
    pub selector: Option<String>,
}

impl std::str::FromStr for DeviceArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let (kind, index) = match lower.split_once(':') {
            Some((kind, index)) => (kind.to_string(), Some(index.to_string())),
            None => (lower.clone(), None),
        };
        let backend = match kind.as_str() {
            "cpu" if index.is_none() => Backend::Flex,
            "cuda" => Backend::Cuda,
            "wgpu" => Backend::Wgpu,
            _ => {
                return Err(format!(
                    "{s:?} is not a device; write cpu, cuda, wgpu, or one from `trainer-cli probe` such as wgpu:0"
                ));
            }
        };
        if let Some(i) = &index
            && i.parse::<usize>().is_err()
        {
            return Err(format!(
                "{s:?}: the device number must be a whole number, as in {kind}:0"
            ));
        }
        Ok(Self {
            kind: backend,
            selector: index.map(|_| lower),
        })
    }
}

impl DeviceArg {
    /// How the user wrote it, normalised: `cpu`, `cuda`, `wgpu:1`.
    pub fn label(&self) -> String {
        match (&self.selector, self.kind) {
            (Some(s), _) => s.clone(),
            (None, Backend::Flex) => "cpu".to_string(),
            (None, kind) => BackendKind::from(kind).name().to_string(),
        }
    }

    /// The backend `--device` means on its own.
    pub fn backend(&self) -> Backend {
        self.kind
    }

    /// Whether `--backend` agrees with it.
    pub fn accepts(&self, backend: Backend) -> bool {
        match self.kind {
            Backend::Flex => matches!(backend, Backend::Flex | Backend::Ndarray),
            kind => kind == backend,
        }
    }

    /// The named device, from the probe; an error lists the devices there are.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let Some(selector) = &self.selector else {
            return Ok(self.kind.resolve());
        };
        let report = isolate::probe_machine(isolate::TIMEOUT, ProbeSettings::AUTO);
        let listed = || {
            report
                .devices
                .iter()
                .filter(|d| d.usable && d.target.is_some())
                .map(|d| format!("{} ({})", d.selector, d.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(device) = report.devices.iter().find(|d| &d.selector == selector) else {
            anyhow::bail!(
                "there is no device {selector} on this machine; devices Headroom can train on: cpu, {}",
                listed()
            );
        };
        if !device.usable || device.target.is_none() {
            anyhow::bail!(
                "{selector} ({}) cannot be trained on in this build: {}; usable devices: cpu, {}",
                device.name,
                device.notes.join("; "),
                listed()
            );
        }
        Ok(Resolved {
            kind: device.backend,
            reason: None,
            device: Some(device.clone()),
        })
    }
}
