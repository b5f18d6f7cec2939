//! An exponential moving average of a run's weights (`--ema DECAY`, as seed 004's recipe
//! keeps one): after every optimizer step each value moves `1 - decay` of the way to the
//! network's. The run validates, evaluates, draws and generates with the average; it trains
//! the network as before. It holds one more copy of the parameters (4 bytes a value), which
//! the planner counts beside the steps ([`WeightAverage::bytes`]).

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Tensor;

/// The average's values, one flat tensor per float parameter in visiting order.
#[derive(Debug, Clone)]
pub struct WeightAverage {
    decay: f64,
    values: Vec<Tensor<1>>,
}

impl WeightAverage {
    /// An average that starts at `networks`' weights.
    pub fn new<M: Module>(networks: &M, decay: f64) -> Self {
        Self {
            decay,
            values: flat_values(networks),
        }
    }

    /// Bytes a run with `ema` holds for the average of a network of `parameters` values.
    pub fn bytes(ema: Option<f64>, parameters: u64) -> u64 {
        ema.map_or(0, |_| 4 * parameters)
    }

    /// Moves the average toward `networks`' weights after a step.
    pub fn update<M: Module>(&mut self, networks: &M) {
        let decay = self.decay;
        let now = flat_values(networks);
        for (average, now) in self.values.iter_mut().zip(now) {
            let moved = average.clone().mul_scalar(decay) + now.mul_scalar(1.0 - decay);
            *average = moved;
        }
    }

    /// `networks` with the average's weights, for validation, evaluation and generation.
    pub fn applied<M: Module>(&self, networks: &M) -> M {
        struct Put<'a>(std::slice::Iter<'a, Tensor<1>>);
        impl ModuleMapper for Put<'_> {
            fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
                match self.0.next() {
                    Some(flat) => param.map(|tensor| {
                        let shape = tensor.shape();
                        flat.clone().reshape(shape)
                    }),
                    None => param,
                }
            }
        }
        networks.clone().map(&mut Put(self.values.iter()))
    }
}

/// Each float parameter's values, flat, in visiting order, off the autodiff backend: ops
/// on an autodiff tensor record a node even untracked, and the average's, never part of a
/// backward pass, were never freed (0.9 MiB a step at seed 004's size on flex, 2026-12-07).
fn flat_values<M: Module>(networks: &M) -> Vec<Tensor<1>> {
    struct Collect(Vec<Tensor<1>>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let value = param.val().without_autodiff();
            let count = value.shape().num_elements();
            self.0.push(value.reshape([count]));
        }
    }
    let mut collect = Collect(Vec::new());
    networks.visit(&mut collect);
    collect.0
}

#[cfg(test)]
mod tests {
    use burn::nn::LinearConfig;

    use super::*;
    use crate::backend::BackendKind;
    use crate::model::flat_parameters;

    #[test]
    fn the_average_moves_a_decay_share_toward_each_step() {
        let device = BackendKind::Flex.device().unwrap();
        let start = LinearConfig::new(3, 2).init(&device);
        let mut average = WeightAverage::new(&start, 0.9);
        let later = LinearConfig::new(3, 2).init(&device);
        average.update(&later);
        average.update(&later);
        let (a, b) = (flat_parameters(&start), flat_parameters(&later));
        let applied = flat_parameters(&average.applied(&start));
        for ((a, b), got) in a.iter().zip(&b).zip(&applied) {
            // Two steps toward b: 0.81 of a stays.
            let expected = 0.81 * a + 0.19 * b;
            assert!((got - expected).abs() < 1e-6, "{got} against {expected}");
        }
        // The networks it is applied to keep their own weights.
        assert_eq!(flat_parameters(&start), a);
    }

    /// The planner holds the average beside the steps: one f32 copy of the parameters, on top
    /// of what was in use.
    #[test]
    fn the_plan_counts_the_average_beside_what_is_in_use() {
        let held = WeightAverage::bytes(Some(0.999), 1_000);
        assert_eq!(held, 4_000);
        assert_eq!(WeightAverage::bytes(None, 1_000), 0);
        let share = crate::plan::RunShare {
            resident_bytes: 10_000,
            held_bytes: held,
            ..Default::default()
        };
        assert_eq!(share.resident(2_000), 14_000);
        assert_eq!(share.resident(50_000), 54_000);
    }
}
