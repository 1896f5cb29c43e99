//! Binding of `hash_embed`.

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;

use crate::embed;
use crate::python::errors::{self, IntoPyResult};
use crate::python::vectors::str_list;

/// Unit-norm float32 rows of shape `(len(texts), dim)`; a zero row for a text with no word.
#[pyfunction]
#[pyo3(signature = (texts, dim=384))]
fn hash_embed<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    dim: i64,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    if !(1..=embed::MAX_DIM as i64).contains(&dim) {
        return Err(errors::new_error(
            py,
            "InvalidInputError",
            format!("dim must be between 1 and {}, got {dim}", embed::MAX_DIM),
            &[],
        ));
    }
    let dim = dim as usize;
    let texts = str_list(py, texts, "texts")?;
    let values = py
        .detach(|| embed::hash_embed(&texts, dim))
        .into_py_result(py)?;
    PyArray1::from_vec(py, values).reshape([texts.len(), dim])
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(hash_embed, m)?)?;
    Ok(())
}
