//! `prune_sliding_window` for Python: the policy is `crate::prune`; this walks the message dicts.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use pyo3::Borrowed;

use super::errors::{new_error, IntoPyResult};
use crate::prune::{keep_recent as check_keep_recent, outside_window, Placeholder};

static NAMES: PyOnceLock<[Py<PyString>; 4]> = PyOnceLock::new();

/// The dict keys and the role value, interned once: lookups with interned keys hit the
/// pointer-equality fast path of dict lookup.
fn names(py: Python<'_>) -> &[Py<PyString>; 4] {
    NAMES.get_or_init(py, || {
        ["role", "tool", "tool_call_id", "content"].map(|s| PyString::intern(py, s).unbind())
    })
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Replaces the content of older tool messages by a placeholder; ``messages`` is not mutated.
///
/// The ``keep_recent`` most recent ``role == "tool"`` messages (by position, pruned or not)
/// stay verbatim. Each older one becomes a new dict with the same keys whose ``content`` is
/// ``placeholder`` with ``{call_id}`` replaced by its ``tool_call_id`` (only ``{call_id}`` is
/// substituted; other braces are literal). A message whose content already equals its
/// placeholder is left as it is and not counted, so pruning twice prunes nothing more. Every
/// other message is the same object in the returned (new) list.
///
/// Args:
///     messages: OpenAI-style chat messages.
///     keep_recent: How many of the latest tool messages to keep verbatim (``>= 0``).
///     placeholder: Template of the replacement content; must contain ``{call_id}``.
///
/// Returns:
///     The new list and how many messages were replaced.
///
/// Raises:
///     UnsupportedTypeError: ``messages`` is not a list, or a message is not a dict.
///     InvalidInputError: ``keep_recent < 0``, ``placeholder`` lacks ``{call_id}``, or a tool
///         message to replace has no str ``tool_call_id`` (``.path`` names it).
#[pyfunction]
#[pyo3(
    signature = (messages, *, keep_recent=3, placeholder=None),
    text_signature = "(messages, *, keep_recent=3, placeholder='[summarized: call_id={call_id}]')"
)]
fn prune_sliding_window<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyAny>,
    keep_recent: i64,
    placeholder: Option<String>,
) -> PyResult<Bound<'py, PyTuple>> {
    let keep = check_keep_recent(keep_recent).into_py_result(py)?;
    let template = Placeholder::parse(
        placeholder
            .as_deref()
            .unwrap_or(crate::prune::DEFAULT_PLACEHOLDER),
    )
    .into_py_result(py)?;
    let messages = messages.cast::<PyList>().map_err(|_| {
        new_error(
            py,
            "UnsupportedTypeError",
            format!(
                "messages must be a list of message dicts, got {}",
                type_name(messages)
            ),
            &[("path", PyString::new(py, "$").into_any())],
        )
    })?;
    let template = PyTemplate::new(py, &template);
    let [role, tool, tool_call_id, content] = names(py);
    let (role, tool) = (role.bind(py), tool.bind(py));
    let tool_hash = tool.hash()?;

    // Borrowed references throughout this scan: it touches every message, and nothing in it
    // runs Python code except comparing a role that is not an exact str, for which the role is
    // held by a strong reference. The length is re-read each step for the same reason.
    let mut tools: Vec<usize> = Vec::new();
    let mut i = 0usize;
    while i < messages.len() {
        // SAFETY: `i` is in bounds; the borrowed item lives as long as the list holds it.
        let message = unsafe {
            Borrowed::from_ptr_or_err(
                py,
                ffi::PyList_GetItem(messages.as_ptr(), i as ffi::Py_ssize_t),
            )?
        };
        if !message.is_exact_instance_of::<PyDict>() && !message.is_instance_of::<PyDict>() {
            return Err(new_error(
                py,
                "UnsupportedTypeError",
                format!(
                    "$[{i}]: messages[{i}] must be a message dict, got {}",
                    type_name(&message)
                ),
                &[("path", PyString::new(py, &format!("$[{i}]")).into_any())],
            ));
        }
        // SAFETY: `message` is a dict and `role` a str; the result is borrowed or NULL.
        let found = unsafe { ffi::PyDict_GetItemWithError(message.as_ptr(), role.as_ptr()) };
        if found.is_null() {
            if let Some(error) = PyErr::take(py) {
                return Err(error);
            }
        } else if found == tool.as_ptr() {
            tools.push(i);
        } else {
            // SAFETY: a live value of `message`, used before any Python code runs.
            let r = unsafe { Borrowed::from_ptr(py, found) };
            // Roles are short str: a differing cached hash rules most of them out without a
            // string comparison.
            let is_tool = if r.is_exact_instance_of::<PyString>() {
                r.hash()? == tool_hash && r.eq(tool)?
            } else {
                r.to_owned().eq(tool)?
            };
            if is_tool {
                tools.push(i);
            }
        }
        i += 1;
    }

    let out = messages.get_slice(0, messages.len());
    let mut pruned = 0usize;
    for &i in &tools[..outside_window(tools.len(), keep)] {
        let item = out.get_item(i)?;
        // SAFETY: every message was checked to be a dict above, and `out` is our own copy.
        let message = unsafe { item.cast_unchecked::<PyDict>() };
        let call_id = message
            .get_item(tool_call_id)?
            .and_then(|id| id.cast_into::<PyString>().ok())
            .ok_or_else(|| {
                let path = format!("$[{i}].tool_call_id");
                new_error(
                    py,
                    "InvalidInputError",
                    format!(
                        "{path}: tool message {i} must have a str tool_call_id to be replaced by a placeholder"
                    ),
                    &[("path", PyString::new(py, &path).into_any())],
                )
            })?;
        let id_len = call_id.len()?;
        if let Some(current) = message.get_item(content)? {
            if template.is_rendered(&current, &call_id, id_len)? {
                continue;
            }
        }
        let rendered = template.render(py, &call_id, id_len)?;
        let replaced = message.copy()?;
        replaced.set_item(content, rendered)?;
        out.set_item(i, replaced)?;
        pruned += 1;
    }
    PyTuple::new(py, [out.into_any(), pruned.into_pyobject(py)?.into_any()])
}

/// The placeholder's pieces as Python strings with their lengths (in code points): rendering
/// is str concatenation, with no UTF-8 round trip of the call id, and recognising an already
/// rendered placeholder is an in-place comparison.
struct PyTemplate<'py> {
    pieces: Vec<(Bound<'py, PyString>, usize)>,
    fixed_len: usize,
}

impl<'py> PyTemplate<'py> {
    fn new(py: Python<'py>, template: &Placeholder) -> Self {
        let pieces: Vec<_> = template
            .pieces()
            .iter()
            .map(|piece| (PyString::new(py, piece), piece.chars().count()))
            .collect();
        let fixed_len = pieces.iter().map(|(_, len)| len).sum();
        Self { pieces, fixed_len }
    }

    /// Whether `content` is exactly the placeholder for `call_id`. Already pruned messages are
    /// the common case on every later turn, and this check allocates nothing.
    fn is_rendered(
        &self,
        content: &Bound<'py, PyAny>,
        call_id: &Bound<'py, PyString>,
        id_len: usize,
    ) -> PyResult<bool> {
        let Ok(content) = content.cast::<PyString>() else {
            return Ok(false);
        };
        if content.len()? != self.fixed_len + id_len * (self.pieces.len() - 1) {
            return Ok(false);
        }
        let matches_at = |part: &Bound<'py, PyString>, at: usize, len: usize| -> PyResult<bool> {
            if len == 0 {
                return Ok(true);
            }
            // SAFETY: both are str objects; -1 asks whether `part` is a prefix of
            // content[at..at + len], which has exactly its length.
            let found = unsafe {
                ffi::PyUnicode_Tailmatch(
                    content.as_ptr(),
                    part.as_ptr(),
                    at as ffi::Py_ssize_t,
                    (at + len) as ffi::Py_ssize_t,
                    -1,
                )
            };
            if found < 0 {
                return Err(PyErr::fetch(content.py()));
            }
            Ok(found == 1)
        };
        let mut at = 0usize;
        for (i, (piece, len)) in self.pieces.iter().enumerate() {
            if i > 0 {
                if !matches_at(call_id, at, id_len)? {
                    return Ok(false);
                }
                at += id_len;
            }
            if !matches_at(piece, at, *len)? {
                return Ok(false);
            }
            at += len;
        }
        Ok(true)
    }

    /// The pieces joined with `call_id` between consecutive pieces.
    fn render(
        &self,
        py: Python<'py>,
        call_id: &Bound<'py, PyString>,
        id_len: usize,
    ) -> PyResult<Bound<'py, PyString>> {
        let concat = |acc: Option<Bound<'py, PyString>>, next: &Bound<'py, PyString>| {
            let Some(acc) = acc else {
                return Ok(next.clone());
            };
            // SAFETY: both are str objects; PyUnicode_Concat returns a new reference or NULL.
            unsafe {
                Bound::from_owned_ptr_or_err(py, ffi::PyUnicode_Concat(acc.as_ptr(), next.as_ptr()))
                    .map(|s| s.cast_into_unchecked::<PyString>())
            }
        };
        let mut acc: Option<Bound<'py, PyString>> = None;
        for (i, (piece, len)) in self.pieces.iter().enumerate() {
            if i > 0 && id_len > 0 {
                acc = Some(concat(acc, call_id)?);
            }
            if *len > 0 {
                acc = Some(concat(acc, piece)?);
            }
        }
        Ok(acc.unwrap_or_else(|| PyString::new(py, "")))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(prune_sliding_window, m)?)?;
    Ok(())
}
