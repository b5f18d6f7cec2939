mod base;
pub use base::*;
