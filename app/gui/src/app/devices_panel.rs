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
                let name = format!(
                    "{} {}{}",
                    d.backend,
                    d.name,
                    if is_auto { "  (auto)" } else { "" }
                );
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
