use burn::module::Module;

use super::*;
use crate::BackendKind;

#[test]
fn the_parameter_count_is_what_the_networks_hold() {
    let device = BackendKind::Flex.device().unwrap();
    for shape in [
        GanShape::SMALL,
        GanShape {
            mels: 96,
            frames: 100,
            latent: 16,
            width: 8,
        },
    ] {
        let config = GanConfig {
            shape,
            ..GanConfig::default()
        };
        let networks = config.networks(&device);
        assert_eq!(
            networks.num_params() as u64,
            config.parameters(),
            "{shape:?}"
        );
    }
}
