//! The devices panel: the probe's table, the auto choice and its reason, the user's pick.

use super::*;

impl HeadroomApp {
    pub(super) fn devices_panel(&mut self, ui: &mut egui::Ui) {
        ui.heading("Devices");
        let Some(machine) = &self.machine else {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("Probing CUDA, wgpu adapters and the CPU...");
            });
            return;
        };
        let auto = self.choice.as_ref().and_then(|c| c.device.clone());
        let mut pick = None;
        egui::Grid::new("devices").striped(true).show(ui, |ui| {
            for h in ["device", "kind", "free / total", "precisions"] {
                ui.label(RichText::new(h).strong());
            }
            ui.end_row();
            for (i, d) in machine.devices.iter().enumerate() {
                let is_auto = auto.as_ref() == Some(d)
                    || (auto.is_none()
                        && self
                            .choice
                            .as_ref()
                            .is_some_and(|c| c.backend == d.backend && d.target.is_none()));
                let name = device_label(d, is_auto);
                if ui
                    .add_enabled(
                        d.usable && !self.session.is_running(),
                        egui::RadioButton::new(self.selected == Some(i), name),
                    )
                    .on_disabled_hover_text(d.notes.join("; "))
                    .clicked()
                {
                    pick = Some(i);
                }
                ui.label(d.class.label());
                let figure = |m: &headroom_core::probe::MemoryFigure| {
                    m.bytes.map_or("?".to_string(), |b| {
                        format!("{}{}", if m.at_least { ">= " } else { "" }, human(b))
                    })
                };
                ui.label(format!(
                    "{} / {}",
                    figure(&d.free_memory),
                    figure(&d.total_memory)
                ));
                ui.label(
                    d.precisions
                        .iter()
                        .map(|p| p.name())
                        .collect::<Vec<_>>()
                        .join(" "),
                );
                ui.end_row();
            }
        });
        if let Some(c) = &self.choice {
            ui.small(&c.reason);
        }
        if let Some(i) = pick {
            self.selected = Some(i);
            self.calibrate_selected();
        }
    }
}

/// A device's row in the table: its backend, for a wgpu adapter the graphics API it is
/// reached on (one adapter often shows up once per API: "wgpu/Vulkan llvmpipe ...",
/// "wgpu/GL llvmpipe ..."), its name, and whether auto chose it.
pub(crate) fn device_label(d: &DeviceReport, is_auto: bool) -> String {
    let api = if d.backend == headroom_core::BackendKind::Wgpu && !d.api.is_empty() {
        format!("/{}", d.api)
    } else {
        String::new()
    };
    format!(
        "{}{api} {}{}",
        d.backend,
        d.name,
        if is_auto { "  (auto)" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::BackendKind;
    use headroom_core::probe::{DeviceClass, MemoryFigure};

    fn adapter(api: &str) -> DeviceReport {
        DeviceReport {
            backend: BackendKind::Wgpu,
            selector: "wgpu:0".into(),
            name: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            class: DeviceClass::SoftwareAdapter,
            api: api.into(),
            total_memory: MemoryFigure::unknown("none"),
            free_memory: MemoryFigure::unknown("none"),
            precisions: vec![Precision::F32],
            max_allocation_bytes: None,
            usable: true,
            target: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_wgpu_row_names_its_graphics_api() {
        assert_eq!(
            device_label(&adapter("Vulkan"), false),
            "wgpu/Vulkan llvmpipe (LLVM 15.0.6, 256 bits)"
        );
        assert_eq!(
            device_label(&adapter("GL"), true),
            "wgpu/GL llvmpipe (LLVM 15.0.6, 256 bits)  (auto)"
        );
        // The CPU backends and CUDA say their API in their backend's name already.
        let cpu = DeviceReport {
            backend: BackendKind::Flex,
            name: "AMD EPYC (1 cores, 2 threads, AVX2+FMA)".into(),
            api: "CPU".into(),
            ..adapter("CPU")
        };
        assert_eq!(
            device_label(&cpu, false),
            "flex AMD EPYC (1 cores, 2 threads, AVX2+FMA)"
        );
    }
}
