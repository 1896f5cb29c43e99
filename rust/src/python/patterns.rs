//! `PatternReplacer` for Python: the rules are `crate::patterns`; this converts them and the
//! texts, and releases the GIL around long texts.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use super::errors::{new_error, IntoPyResult};
use crate::patterns::{Replacer, RuleSpec};

/// Below this many bytes releasing and re-taking the GIL costs more than it lets others run.
const DETACH_ABOVE_BYTES: usize = 64 * 1024;

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

fn rule_spec(i: usize, rule: &Bound<'_, PyAny>) -> PyResult<RuleSpec> {
    let bad = || {
        new_error(
            rule.py(),
            "UnsupportedTypeError",
            format!(
                "rules[{i}] must be a tuple (pattern, replacement[, before[, after[, requires]]]) \
                 of str (before and after may be None, requires is a list of str), got {}",
                type_name(rule)
            ),
            &[],
        )
    };
    let parts = rule.cast::<PyTuple>().map_err(|_| bad())?;
    if !(2..=5).contains(&parts.len()) {
        return Err(bad());
    }
    let part = |k: usize| parts.get_item(k).ok();
    let text = |k: usize| part(k).and_then(|v| v.extract::<String>().ok());
    let optional = |k: usize| match part(k) {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<String>().map(Some).map_err(|_| bad()),
    };
    let requires = match part(4) {
        None => Vec::new(),
        Some(v) if v.is_instance_of::<PyString>() => return Err(bad()),
        Some(v) => v.extract::<Vec<String>>().map_err(|_| bad())?,
    };
    Ok(RuleSpec {
        pattern: text(0).ok_or_else(bad)?,
        replacement: text(1).ok_or_else(bad)?,
        before: optional(2)?,
        after: optional(3)?,
        requires,
    })
}

/// Regex rules compiled once and applied in order, each to the text the ones before it made.
///
/// A rule is ``(pattern, replacement[, before[, after[, requires]]])``. Patterns use the
/// syntax of Rust's ``regex`` crate: no look-around or back-references, and every search takes
/// time linear in the text it reads. In each match of ``pattern``, the longest beginning that
/// ``before`` matches and the longest end that ``after`` matches stay, and the text between
/// them is replaced by ``replacement``: so ``before`` stands for a kept prefix or a
/// look-behind, ``after`` for a look-ahead or a kept suffix. When ``after`` took at most 4
/// bytes, the next search starts where the replaced text ended, as after a look-ahead. A match
/// where ``before`` or ``after`` finds nothing, or with nothing left to replace between them,
/// stays as it is. ``requires``: patterns that must all be found in the text to replace.
/// ``before`` and ``after`` cannot use Unicode word boundaries (``(?-u:\b)`` works).
///
/// Raises:
///     InvalidInputError: A pattern does not compile or is over a size limit (the message
///         names it, ``rules[3].after``), or over 256 rules.
///     UnsupportedTypeError: ``rules`` is not a list of such tuples.
#[pyclass(name = "PatternReplacer", module = "memstrata._core", frozen)]
pub struct PyPatternReplacer {
    replacer: Replacer,
}

#[pymethods]
impl PyPatternReplacer {
    #[new]
    fn new(py: Python<'_>, rules: &Bound<'_, PyAny>) -> PyResult<Self> {
        if rules.is_instance_of::<PyString>() || rules.is_instance_of::<PyBytes>() {
            return Err(new_error(
                py,
                "UnsupportedTypeError",
                format!("rules must be a list of rules, got {}", type_name(rules)),
                &[],
            ));
        }
        let specs = rules
            .try_iter()
            .map_err(|_| {
                new_error(
                    py,
                    "UnsupportedTypeError",
                    format!("rules must be a list of rules, got {}", type_name(rules)),
                    &[],
                )
            })?
            .enumerate()
            .map(|(i, rule)| rule_spec(i, &rule?))
            .collect::<PyResult<Vec<_>>>()?;
        let replacer = py.detach(|| Replacer::new(&specs)).into_py_result(py)?;
        Ok(Self { replacer })
    }

    /// ``text`` rewritten by every rule in turn, and how many replacements were made (``text``
    /// itself when none was). The GIL is released for long texts.
    ///
    /// Raises:
    ///     UnsupportedTypeError: ``text`` is not a str.
    ///     InvalidInputError: ``text`` holds a lone surrogate (it is not Unicode text).
    fn replace<'py>(&self, text: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let py = text.py();
        let s = text.cast::<PyString>().map_err(|_| {
            new_error(
                py,
                "UnsupportedTypeError",
                format!("text must be a str, got {}", type_name(text)),
                &[],
            )
        })?;
        let bytes = s.encode_utf8().map_err(|_| {
            new_error(
                py,
                "InvalidInputError",
                "text contains a lone surrogate and is not valid Unicode text".to_owned(),
                &[],
            )
        })?;
        // Python's UTF-8 encoder only produces valid UTF-8, so this check cannot fail; it is
        // a fast SIMD pass that keeps the binding free of `unsafe`.
        let utf8 = std::str::from_utf8(bytes.as_bytes()).unwrap_or_default();
        let work = || {
            let (out, n) = self.replacer.replace(utf8);
            (n > 0).then(|| out.into_owned()).map(|out| (out, n))
        };
        let replaced = if utf8.len() > DETACH_ABOVE_BYTES {
            py.detach(work)
        } else {
            work()
        };
        match replaced {
            Some((out, n)) => (PyString::new(py, &out), n).into_pyobject(py),
            None => (s.clone(), 0usize).into_pyobject(py),
        }
    }

    fn __len__(&self) -> usize {
        self.replacer.len()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPatternReplacer>()?;
    Ok(())
}
