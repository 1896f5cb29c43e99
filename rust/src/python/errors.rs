//! The one place where core errors become Python exceptions.
//!
//! The classes are defined in Python (`memstrata/exceptions.py`) so users can import, subclass
//! and document them normally; the extension looks them up once and caches them.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use crate::CoreError;

static EXCEPTIONS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn exceptions_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    Ok(EXCEPTIONS
        .get_or_try_init(py, || {
            PyModule::import(py, "memstrata.exceptions").map(Bound::unbind)
        })?
        .bind(py))
}

/// Builds `memstrata.exceptions.<class_name>(message, **fields)`.
pub fn new_error(
    py: Python<'_>,
    class_name: &str,
    message: String,
    fields: &[(&str, Bound<'_, PyAny>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = exceptions_module(py)?.getattr(class_name)?;
        let kwargs = PyDict::new(py);
        for (name, value) in fields {
            kwargs.set_item(name, value)?;
        }
        let instance = class.call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|lookup_failure| lookup_failure)
}

/// Maps a core error to its exception class, carrying the structured fields as attributes.
pub fn to_pyerr(py: Python<'_>, error: CoreError) -> PyErr {
    let message = error.to_string();
    let s = |v: &str| -> Bound<'_, PyAny> { v.into_pyobject(py).unwrap().into_any() };
    let n = |v: usize| -> Bound<'_, PyAny> { v.into_pyobject(py).unwrap().into_any() };
    match &error {
        CoreError::NestingTooDeep { path, limit } => new_error(
            py,
            "NestingTooDeepError",
            message,
            &[("path", s(path)), ("limit", n(*limit))],
        ),
        CoreError::UnsupportedType { path, .. } => {
            new_error(py, "UnsupportedTypeError", message, &[("path", s(path))])
        }
        CoreError::NonFiniteNumber { path, .. } => {
            new_error(py, "NonFiniteNumberError", message, &[("path", s(path))])
        }
        CoreError::NonFiniteVector { what, .. } => {
            new_error(py, "NonFiniteNumberError", message, &[("path", s(what))])
        }
        CoreError::InvalidJson { .. } => new_error(py, "InvalidJSONError", message, &[]),
        CoreError::DimensionMismatch { expected, got, .. } => new_error(
            py,
            "DimensionMismatchError",
            message,
            &[("expected", n(*expected)), ("got", n(*got))],
        ),
        CoreError::ZeroVector { .. } => new_error(py, "ZeroVectorError", message, &[]),
        CoreError::InvalidOption { .. } => new_error(py, "InvalidOptionError", message, &[]),
        CoreError::InvalidArgument(_) => new_error(py, "InvalidInputError", message, &[]),
    }
}

/// `?`-friendly conversion for binding code: `kernel(...).map_err(|e| to_pyerr(py, e))?`.
pub trait IntoPyResult<T> {
    fn into_py_result(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for crate::CoreResult<T> {
    fn into_py_result(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}
