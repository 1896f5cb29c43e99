//! PyO3 bindings: thin wrappers that convert arguments, release the GIL around pure work and
//! map [`crate::CoreError`] to `memstrata.exceptions` (in `errors.rs`, the one place).

use pyo3::prelude::*;

mod embed;
mod errors;
mod merge;
mod patterns;
mod prune;
mod tokens;
pub(crate) mod vectors;

#[pymodule]
#[pyo3(name = "_core")]
fn core_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    embed::register(m)?;
    merge::register(m)?;
    patterns::register(m)?;
    prune::register(m)?;
    tokens::register(m)?;
    vectors::register(m)?;
    Ok(())
}
