//! Bindings of `cosine_top_k`, `VectorSet`, `decode_vectors_b64` and `split_vector_members`: numpy arrays in and out,
//! the GIL released during scans and decoding.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use numpy::{
    PyArray1, PyArray2, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::python::errors::{self, IntoPyResult};
use crate::vectors::{self, SharedRows};

fn invalid(py: Python<'_>, message: String) -> PyErr {
    errors::new_error(py, "InvalidInputError", message, &[])
}

/// `obj` as a float32 C-contiguous array of `ndim` dimensions.
///
/// Such arrays are used in place; any other real-valued array-like (float64, integers, a
/// Fortran-ordered or strided view, nested lists) is converted with
/// `numpy.ascontiguousarray(obj, dtype=numpy.float32)`, which copies it.
pub(crate) fn f32_array<'py>(
    py: Python<'py>,
    obj: &Bound<'py, PyAny>,
    name: &str,
    ndim: usize,
    shape: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, f32>> {
    if let Ok(array) = obj.cast::<PyArrayDyn<f32>>() {
        if array.is_c_contiguous() && array.ndim() == ndim {
            return borrow(py, array, name);
        }
    }
    let numpy = py.import("numpy")?;
    let not_real = |detail: String| {
        errors::new_error(
            py,
            "UnsupportedTypeError",
            format!("{name} must be an array of real numbers {shape}, got {detail}"),
            &[],
        )
    };
    let array = numpy.call_method1("asarray", (obj,)).map_err(|e| {
        not_real(format!(
            "{} ({e})",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    let dtype = array.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    if !matches!(kind.as_str(), "f" | "i" | "u") {
        return Err(not_real(format!("an array of dtype {}", dtype.str()?)));
    }
    let got: usize = array.getattr("ndim")?.extract()?;
    if got != ndim {
        return Err(invalid(
            py,
            format!(
                "{name} must be a {ndim}-D array {shape}, got shape {}",
                array.getattr("shape")?.repr()?
            ),
        ));
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("dtype", numpy.getattr("float32")?)?;
    let converted = numpy.call_method("ascontiguousarray", (array,), Some(&kwargs))?;
    borrow(py, &converted.cast_into::<PyArrayDyn<f32>>()?, name)
}

/// A shared borrow: `readonly()` would panic if Rust code elsewhere held the array mutably.
fn borrow<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyArrayDyn<f32>>,
    name: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, f32>> {
    array
        .try_readonly()
        .map_err(|e| invalid(py, format!("{name} cannot be read now: {e}")))
}

fn positive_k(py: Python<'_>, k: i64) -> PyResult<usize> {
    if k <= 0 {
        return Err(invalid(py, format!("k must be at least 1, got {k}")));
    }
    Ok(usize::try_from(k).unwrap_or(usize::MAX))
}

type TopKArrays<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f32>>);

/// Row indices (int64) and cosine similarities (float32) of the best rows, best first.
#[pyfunction]
#[pyo3(signature = (matrix, query, k, *, threshold=None))]
fn cosine_top_k<'py>(
    py: Python<'py>,
    matrix: &Bound<'py, PyAny>,
    query: &Bound<'py, PyAny>,
    k: i64,
    threshold: Option<f64>,
) -> PyResult<TopKArrays<'py>> {
    let k = positive_k(py, k)?;
    let matrix = f32_array(py, matrix, "matrix", 2, "(n, d)")?;
    let query = f32_array(py, query, "query", 1, "(d,)")?;
    let (rows, dim) = (matrix.shape()[0], matrix.shape()[1]);
    let (m, q) = (matrix.as_slice()?, query.as_slice()?);
    // More than `rows` can never be returned; capping keeps allocations proportional.
    let k = k.min(rows.max(1));
    let hits = py
        .detach(|| vectors::cosine_top_k(m, rows, dim, q, k, threshold))
        .into_py_result(py)?;
    let indices: Vec<i64> = hits.iter().map(|s| s.index as i64).collect();
    let scores: Vec<f32> = hits.iter().map(|s| s.score).collect();
    Ok((
        PyArray1::from_vec(py, indices),
        PyArray1::from_vec(py, scores),
    ))
}

/// `ids` as Rust strings: a list or other iterable of str (a lone str is refused, since
/// iterating it would add one id per character).
pub(crate) fn str_list(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    name: &str,
) -> PyResult<Vec<String>> {
    let unsupported = |message: String, path: Option<String>| {
        let fields: Vec<(&str, Bound<'_, PyAny>)> = path
            .map(|p| vec![("path", PyString::new(py, &p).into_any())])
            .unwrap_or_default();
        errors::new_error(py, "UnsupportedTypeError", message, &fields)
    };
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyBytes>() {
        return Err(unsupported(
            format!(
                "{name} must be a list of str, not a single {}",
                obj.get_type().name()?
            ),
            None,
        ));
    }
    let iter = obj.try_iter().map_err(|_| {
        unsupported(
            format!(
                "{name} must be a list of str, got {}",
                obj.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ),
            None,
        )
    })?;
    let mut out = Vec::new();
    for (i, item) in iter.enumerate() {
        let item = item?;
        let Ok(s) = item.cast::<PyString>() else {
            return Err(unsupported(
                format!("{name}[{i}] must be a str, got {}", item.get_type().name()?),
                Some(format!("{name}[{i}]")),
            ));
        };
        out.push(s.to_cow().map(|c| c.into_owned()).map_err(|_| {
            invalid(
                py,
                format!("{name}[{i}] is not valid Unicode (it holds a lone surrogate)"),
            )
        })?);
    }
    Ok(out)
}

/// A float32 C-contiguous numpy matrix a `VectorSet` reads in place: the reference keeps the
/// array (and so its buffer) alive, and numpy refuses to resize an array referenced elsewhere.
#[derive(Debug)]
struct ArrayRows {
    _array: Py<PyArray2<f32>>,
    data: *const f32,
    len: usize,
}

// SAFETY: the buffer lives as long as `_array`, and only `values` reads it, shared. Callers of
// `VectorSet.add_rows` promise not to write the rows the set holds (documented there).
unsafe impl Send for ArrayRows {}
unsafe impl Sync for ArrayRows {}

impl SharedRows for ArrayRows {
    fn values(&self) -> &[f32] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `data` points at `len` float32 values of the C-contiguous array kept alive.
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

/// `blocks` (a sequence of float32 C-contiguous `(n, dim)` arrays) as sources a set can keep.
fn array_rows(
    py: Python<'_>,
    blocks: &Bound<'_, PyAny>,
    dim: usize,
) -> PyResult<Vec<Arc<dyn SharedRows>>> {
    if blocks.is_instance_of::<PyString>() || blocks.cast::<numpy::PyUntypedArray>().is_ok() {
        return Err(errors::new_error(
            py,
            "UnsupportedTypeError",
            "blocks must be a list of arrays, not a single one".into(),
            &[],
        ));
    }
    let mut out: Vec<Arc<dyn SharedRows>> = Vec::new();
    for (b, block) in blocks.try_iter()?.enumerate() {
        let block = block?;
        let array = block
            .cast::<PyArray2<f32>>()
            .ok()
            .filter(|a| a.is_c_contiguous() && a.shape()[1] == dim)
            .ok_or_else(|| {
                invalid(
                    py,
                    format!(
                        "blocks[{b}] must be a float32 C-contiguous array of shape (n, {dim}) \
                         (it is read in place, never converted)"
                    ),
                )
            })?;
        let len = array.shape()[0] * dim;
        out.push(Arc::new(ArrayRows {
            // SAFETY (of the pointer's later use): see `ArrayRows`.
            data: array.data().cast_const(),
            _array: array.clone().unbind(),
            len,
        }));
    }
    Ok(out)
}

/// A growable set of id-keyed unit vectors with exact cosine top-k and duplicate search.
#[pyclass(name = "VectorSet", module = "memstrata._core", frozen)]
pub struct PyVectorSet {
    // A lock rather than pyo3's borrow flag: a scan runs without the GIL, and another thread
    // calling `add` then waits for it instead of failing with "already borrowed".
    inner: RwLock<vectors::VectorSet>,
    dim: usize,
}

impl PyVectorSet {
    fn read(&self) -> RwLockReadGuard<'_, vectors::VectorSet> {
        // No code path panics while holding the lock, so a poisoned one still holds a valid set.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, vectors::VectorSet> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn query<'py>(
        &self,
        py: Python<'py>,
        obj: &Bound<'py, PyAny>,
        name: &str,
    ) -> PyResult<PyReadonlyArrayDyn<'py, f32>> {
        f32_array(py, obj, name, 1, "(dim,)")
    }
}

#[pymethods]
impl PyVectorSet {
    #[new]
    fn new(py: Python<'_>, dim: i64) -> PyResult<Self> {
        let set = vectors::VectorSet::new(usize::try_from(dim).unwrap_or(0))
            .map_err(|_| invalid(py, format!("dim must be between 1 and 65536, got {dim}")))?;
        Ok(Self {
            dim: set.dim(),
            inner: RwLock::new(set),
        })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    #[pyo3(signature = (ids, vectors, *, biases=None))]
    fn add(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        biases: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ids = str_list(py, ids, "ids")?;
        let array = f32_array(py, vectors, "vectors", 2, "(n, dim)")?;
        let biases = biases
            .map(|b| f32_array(py, b, "biases", 1, "(n,)"))
            .transpose()?;
        let (rows, dim) = (array.shape()[0], array.shape()[1]);
        if dim != self.dim {
            return Err(errors::to_pyerr(
                py,
                crate::CoreError::DimensionMismatch {
                    what: "vectors".into(),
                    expected: self.dim,
                    got: dim,
                },
            ));
        }
        if rows != ids.len() {
            return Err(invalid(
                py,
                format!("ids has {} entries but vectors has {rows} rows", ids.len()),
            ));
        }
        let values = array.as_slice()?;
        let biases = biases.as_ref().map(|b| b.as_slice()).transpose()?;
        py.detach(|| self.write().add_with_biases(&ids, values, biases))
            .into_py_result(py)
    }

    #[pyo3(signature = (ids, blocks, rows, *, biases=None))]
    fn add_rows(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        blocks: &Bound<'_, PyAny>,
        rows: &Bound<'_, PyAny>,
        biases: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ids = str_list(py, ids, "ids")?;
        let sources = array_rows(py, blocks, self.dim)?;
        let numpy = py.import("numpy")?;
        let rows: Vec<i64> = numpy
            .call_method1("asarray", (rows, "int64"))
            .and_then(|a| a.call_method0("ravel"))
            .and_then(|a| a.call_method0("tolist"))
            .and_then(|a| a.extract())
            .map_err(|e| invalid(py, format!("rows must be whole row numbers: {e}")))?;
        let rows = rows
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                usize::try_from(r)
                    .map_err(|_| invalid(py, format!("rows[{i}] must be at least 0, got {r}")))
            })
            .collect::<PyResult<Vec<usize>>>()?;
        let biases = biases
            .map(|b| f32_array(py, b, "biases", 1, "(n,)"))
            .transpose()?;
        let biases = biases.as_ref().map(|b| b.as_slice()).transpose()?;
        py.detach(|| self.write().add_shared(&ids, &sources, &rows, biases))
            .into_py_result(py)
    }

    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let ids = str_list(py, ids, "ids")?;
        Ok(py.detach(|| self.write().remove(&ids)))
    }

    #[pyo3(signature = (query, k, *, threshold=None, weight=1.0))]
    fn top_k(
        &self,
        py: Python<'_>,
        query: &Bound<'_, PyAny>,
        k: i64,
        threshold: Option<f64>,
        weight: f64,
    ) -> PyResult<Vec<(String, f32)>> {
        if !(weight.is_finite() && (0.0..=f64::from(f32::MAX)).contains(&weight)) {
            return Err(invalid(
                py,
                format!("weight must be a finite number >= 0, got {weight}"),
            ));
        }
        let k = positive_k(py, k)?;
        let query = self.query(py, query, "query")?;
        let q = query.as_slice()?;
        py.detach(|| {
            let set = self.read();
            let k = k.min(set.len().max(1));
            set.top_k_weighted(q, k, threshold, weight as f32)
                .map(|hits| hits.into_iter().map(|(id, s)| (id.to_owned(), s)).collect())
        })
        .into_py_result(py)
    }

    fn find_duplicate(
        &self,
        py: Python<'_>,
        vector: &Bound<'_, PyAny>,
        threshold: f64,
    ) -> PyResult<Option<(String, f32)>> {
        let vector = self.query(py, vector, "vector")?;
        let v = vector.as_slice()?;
        py.detach(|| {
            self.read()
                .find_duplicate(v, threshold)
                .map(|hit| hit.map(|(id, s)| (id.to_owned(), s)))
        })
        .map_err(|e| match e {
            // The query is called `vector` here.
            crate::CoreError::DimensionMismatch { expected, got, .. } => {
                crate::CoreError::DimensionMismatch {
                    what: "vector".into(),
                    expected,
                    got,
                }
            }
            crate::CoreError::ZeroVector { .. } => crate::CoreError::ZeroVector {
                what: "vector".into(),
            },
            crate::CoreError::NonFiniteVector { what, value } => {
                crate::CoreError::NonFiniteVector {
                    what: what.replacen("query", "vector", 1),
                    value,
                }
            }
            other => other,
        })
        .into_py_result(py)
    }

    fn __len__(&self) -> usize {
        self.read().len()
    }

    fn __contains__(&self, id: &Bound<'_, PyAny>) -> bool {
        id.cast::<PyString>()
            .ok()
            .and_then(|s| s.to_cow().ok().map(|s| self.read().contains(&s)))
            .unwrap_or(false)
    }

    fn __repr__(&self) -> String {
        format!("VectorSet(dim={}, len={})", self.dim, self.read().len())
    }
}

/// Texts with their vector member cut out (`None` where not) and the vectors.
type Split<'py> = (Vec<Option<Bound<'py, PyBytes>>>, Bound<'py, PyArray2<f32>>);

/// `dim` as a vector dimension, between 1 and `MAX_DIM`.
fn checked_dim(py: Python<'_>, dim: i64) -> PyResult<usize> {
    if !(1..=crate::embed::MAX_DIM as i64).contains(&dim) {
        return Err(invalid(
            py,
            format!(
                "dim must be between 1 and {}, got {dim}",
                crate::embed::MAX_DIM
            ),
        ));
    }
    Ok(dim as usize)
}

/// A decoded matrix and, per row, whether its text was a vector.
type Decoded<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray1<bool>>);

/// Stored base64 float32 vectors of dimension `dim` as one `(len(texts), dim)` matrix and a
/// mask of the texts that were such vectors (the other rows are zero).
#[pyfunction]
#[pyo3(signature = (texts, dim))]
fn decode_vectors_b64<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    dim: i64,
) -> PyResult<Decoded<'py>> {
    let dim = checked_dim(py, dim)?;
    let unsupported = |message: String| errors::new_error(py, "UnsupportedTypeError", message, &[]);
    if texts.is_instance_of::<PyString>() || texts.is_instance_of::<PyBytes>() {
        return Err(unsupported(format!(
            "texts must be a sequence of values, not a single {}",
            texts.get_type().name()?
        )));
    }
    let chars = vectors::encoded_len(4 * dim);
    // Only a str of the one possible length is worth its UTF-8 copy (the limited API of
    // Python 3.9 cannot lend a str's buffer).
    let encoded: Vec<Option<Bound<'py, PyBytes>>> = texts
        .try_iter()
        .map_err(|_| {
            unsupported(format!(
                "texts must be a sequence of values, got {}",
                texts
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?
        .map(|item| {
            let item = item?;
            Ok(match item.cast::<PyString>() {
                Ok(s) if s.len()? == chars => s.encode_utf8().ok(),
                _ => None,
            })
        })
        .collect::<PyResult<_>>()?;
    let views: Vec<Option<&[u8]>> = encoded
        .iter()
        .map(|b| b.as_ref().map(|b| b.as_bytes()))
        .collect();
    let (matrix, ok) = py.detach(|| vectors::decode_f32_rows(&views, dim));
    let rows = views.len();
    Ok((
        PyArray1::from_vec(py, matrix).reshape([rows, dim])?,
        PyArray1::from_vec(py, ok),
    ))
}

/// Stored JSON objects with their vector member cut out: for each text (bytes or str), the
/// text without its top-level string member `key` when that member is a stored vector of
/// dimension `dim` (decoded into the row of the same number), else `None` (a zero row).
/// Without `dim`, the length most members share sets it (no columns when none is a vector).
#[pyfunction]
#[pyo3(signature = (texts, key, dim=None))]
fn split_vector_members<'py>(
    py: Python<'py>,
    texts: &Bound<'py, PyAny>,
    key: &str,
    dim: Option<i64>,
) -> PyResult<Split<'py>> {
    let dim = dim.map(|d| checked_dim(py, d)).transpose()?;
    let unsupported = |message: String| errors::new_error(py, "UnsupportedTypeError", message, &[]);
    if texts.is_instance_of::<PyString>() || texts.is_instance_of::<PyBytes>() {
        return Err(unsupported(format!(
            "texts must be a sequence of JSON texts, not a single {}",
            texts.get_type().name()?
        )));
    }
    // Bytes are read in place; a str is copied out as UTF-8 (the limited API of Python 3.9
    // cannot lend a str's buffer). A str with no UTF-8 form (a lone surrogate) is no JSON
    // text: it stands as an empty text, declined, for the caller's parser to refuse.
    let held: Vec<Bound<'py, PyBytes>> = texts
        .try_iter()?
        .map(|item| {
            let item = item?;
            if let Ok(b) = item.cast::<PyBytes>() {
                return Ok(b.clone());
            }
            match item.cast::<PyString>() {
                Ok(s) => Ok(s.encode_utf8().unwrap_or_else(|_| PyBytes::new(py, b""))),
                Err(_) => Err(unsupported(format!(
                    "each text must be bytes or str, got {}",
                    item.get_type().name()?
                ))),
            }
        })
        .collect::<PyResult<_>>()?;
    let views: Vec<&[u8]> = held.iter().map(|b| b.as_bytes()).collect();
    let (matrix, cuts, dim) = py.detach(|| vectors::split_f32_members(&views, key.as_bytes(), dim));
    let rests = views
        .iter()
        .zip(cuts)
        .map(|(text, cut)| {
            cut.map(|cut| {
                let (head, tail) = (&text[..cut.start], &text[cut.end..]);
                PyBytes::new_with(py, head.len() + tail.len(), |out| {
                    out[..head.len()].copy_from_slice(head);
                    out[head.len()..].copy_from_slice(tail);
                    Ok(())
                })
            })
            .transpose()
        })
        .collect::<PyResult<_>>()?;
    let rows = views.len();
    Ok((rests, PyArray1::from_vec(py, matrix).reshape([rows, dim])?))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cosine_top_k, m)?)?;
    m.add_function(wrap_pyfunction!(decode_vectors_b64, m)?)?;
    m.add_function(wrap_pyfunction!(split_vector_members, m)?)?;
    m.add_class::<PyVectorSet>()?;
    Ok(())
}
