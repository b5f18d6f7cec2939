//! Whole networks' parameters at once: read out in order (to compare two models in tests and
//! tools), and a copy that runs untracked.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;

/// Every parameter value in visiting order: for comparing models in tests and tools.
pub fn flat_parameters<M: Module>(model: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let values = param.val().into_data().convert::<f32>();
            self.0.extend(values.as_slice::<f32>().unwrap_or(&[]));
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

/// The largest absolute difference between two models' [`flat_parameters`].
///
/// # Panics
/// When the two hold different numbers of values (they are not the same networks).
pub fn largest_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "two models of different sizes");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A copy of `networks` whose forward records nothing for backward, for a pass whose
/// gradient is not wanted (a GAN's generator in the discriminator's phase, the embeddings
/// of a gradient-cached step). Every parameter is initialised first: one not yet
/// initialised shares its lazy initialisation with its clones, so untracking the copy
/// would untrack `networks` themselves.
pub fn untracked<M: Module>(networks: &M) -> M {
    struct Read;
    impl ModuleVisitor for Read {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let _ = param.val();
        }
    }
    networks.visit(&mut Read);
    networks.clone().no_grad()
}
