//! Bindings of the tokens kernel: text and chat messages in, integers out.
//!
//! The exact counter needs UTF-8, which the 3.9 stable ABI only offers as a fresh bytes object
//! (`PyUnicode_AsUTF8String`, an encoding pass). The estimator instead reads UCS-4 code points
//! (`PyUnicode_AsUCS4`, a plain widening copy several times cheaper than encoding), except for
//! ASCII strs, whose UTF-8 is a plain copy a quarter that size. The GIL is released around
//! passes over long texts.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::json_path::JsonPath;
use crate::python::errors::{new_error, IntoPyResult};
use crate::tokens::{
    self, count_messages, encoding_for_model, ContentPart, Encoding, Message, ToolCall,
};
use crate::CoreError;

/// Below this many bytes releasing and re-taking the GIL costs more than it lets others run.
const DETACH_ABOVE_BYTES: usize = 64 * 1024;

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

fn unsupported(py: Python<'_>, what: &str, path: Option<&str>, value: &Bound<'_, PyAny>) -> PyErr {
    let msg = format!("{what} must be a str, got {}", type_name(value));
    let path_obj = path.map(|p| PyString::new(py, p).into_any());
    let fields: Vec<(&str, Bound<'_, PyAny>)> = path_obj.into_iter().map(|p| ("path", p)).collect();
    new_error(py, "UnsupportedTypeError", msg, &fields)
}

/// The UTF-8 bytes of a `str` argument; anything else is an `UnsupportedTypeError` naming it.
fn utf8<'py>(
    value: &Bound<'py, PyAny>,
    what: &str,
    path: Option<&str>,
) -> PyResult<Bound<'py, PyBytes>> {
    let py = value.py();
    let s = value
        .cast::<PyString>()
        .map_err(|_| unsupported(py, what, path, value))?;
    s.encode_utf8().map_err(|_| {
        new_error(
            py,
            "InvalidInputError",
            format!("{what} contains a lone surrogate and is not valid Unicode text"),
            &[],
        )
    })
}

fn as_str<'a>(bytes: &'a Bound<'_, PyBytes>) -> &'a str {
    // Python's UTF-8 encoder only produces valid UTF-8, so this check cannot fail; it is a
    // fast SIMD pass that keeps the binding free of `unsafe`.
    std::str::from_utf8(bytes.as_bytes()).unwrap_or_default()
}

fn with_text<T: Send>(
    py: Python<'_>,
    bytes: &Bound<'_, PyBytes>,
    work: impl FnOnce(&str) -> T + Send,
) -> T {
    let text = as_str(bytes);
    if text.len() > DETACH_ABOVE_BYTES {
        py.detach(|| work(text))
    } else {
        work(text)
    }
}

/// The code points of a `str` argument; anything else is an `UnsupportedTypeError` naming it.
/// Lone surrogates come through as code points and are estimated like other BMP characters.
fn ucs4(value: &Bound<'_, PyAny>, what: &str, path: Option<&str>) -> PyResult<Vec<u32>> {
    let py = value.py();
    let s = value
        .cast::<PyString>()
        .map_err(|_| unsupported(py, what, path, value))?;
    // SAFETY: `s` is a live str (we hold the GIL); the buffer has room for exactly `len`
    // code points, `PyUnicode_AsUCS4` writes at most `buflen` of them and reports failure
    // with NULL, and we only expose the `len` units it filled.
    unsafe {
        let len = pyo3::ffi::PyUnicode_GetLength(s.as_ptr());
        if len < 0 {
            return Err(PyErr::fetch(py));
        }
        let mut buf: Vec<u32> = Vec::with_capacity(len as usize);
        if len > 0 {
            let out = pyo3::ffi::PyUnicode_AsUCS4(s.as_ptr(), buf.as_mut_ptr(), len, 0);
            if out.is_null() {
                return Err(PyErr::fetch(py));
            }
            buf.set_len(len as usize);
        }
        Ok(buf)
    }
}

/// The text of a `str` as the estimator reads it.
enum Units<'py> {
    /// An ASCII str's UTF-8 encoding: a plain copy, a quarter the size of UCS-4.
    Ascii(Bound<'py, PyBytes>),
    /// Anything else's code points: a widening copy, cheaper than encoding to UTF-8.
    Ucs4(Vec<u32>),
}

/// `str.isascii`, looked up on the type so that a subclass cannot override it.
static STR_ISASCII: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn units<'py>(value: &Bound<'py, PyAny>, what: &str) -> PyResult<Units<'py>> {
    let py = value.py();
    let s = value
        .cast::<PyString>()
        .map_err(|_| unsupported(py, what, None, value))?;
    let isascii = STR_ISASCII.get_or_try_init(py, || {
        py.get_type::<PyString>()
            .getattr("isascii")
            .map(Bound::unbind)
    })?;
    // O(1): CPython keeps whether a str is ASCII in its header.
    if isascii.bind(py).call1((s,))?.is_truthy()? {
        return Ok(Units::Ascii(utf8(value, what, None)?));
    }
    Ok(Units::Ucs4(ucs4(value, what, None)?))
}

fn detach_if_long<T: Send>(py: Python<'_>, bytes: usize, work: impl FnOnce() -> T + Send) -> T {
    if bytes > DETACH_ABOVE_BYTES {
        py.detach(work)
    } else {
        work()
    }
}

fn estimate_units(py: Python<'_>, units: &Units<'_>, encoding: Encoding) -> usize {
    match units {
        Units::Ascii(bytes) => {
            let bytes = bytes.as_bytes();
            detach_if_long(py, bytes.len(), || {
                tokens::estimate::estimate_units(bytes, encoding)
            })
        }
        Units::Ucs4(units) => detach_if_long(py, units.len() * 4, || {
            tokens::estimate::estimate_units(units.as_slice(), encoding)
        }),
    }
}

fn encoding_arg(py: Python<'_>, encoding: &str) -> PyResult<Encoding> {
    Encoding::from_name(encoding).into_py_result(py)
}

/// Estimated token count of `text` for `model`'s encoding.
#[pyfunction]
#[pyo3(signature = (text, *, model=None))]
fn estimate_tokens(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    model: Option<&str>,
) -> PyResult<usize> {
    let encoding = encoding_for_model(model);
    let units = units(text, "text")?;
    Ok(estimate_units(py, &units, encoding))
}

/// The length in code points of the longest prefix of `text` whose `estimate_tokens` is at
/// most `max_tokens` (see [`tokens::estimate::estimate_prefix_units`]), found in one pass.
#[pyfunction]
#[pyo3(signature = (text, max_tokens, *, model=None))]
fn estimate_prefix(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    max_tokens: &Bound<'_, PyAny>,
    model: Option<&str>,
) -> PyResult<usize> {
    let encoding = encoding_for_model(model);
    let max_tokens = count_arg(py, "max_tokens", max_tokens)?;
    // Both kinds of units index code points: an ASCII str's bytes are its code points.
    Ok(match units(text, "text")? {
        Units::Ascii(bytes) => {
            let bytes = bytes.as_bytes();
            detach_if_long(py, bytes.len(), || {
                tokens::estimate::estimate_prefix_units(bytes, max_tokens, encoding)
            })
        }
        Units::Ucs4(units) => detach_if_long(py, units.len() * 4, || {
            tokens::estimate::estimate_prefix_units(units.as_slice(), max_tokens, encoding)
        }),
    })
}

/// A non-negative int argument named `what` (a bool is refused), saturated at `usize::MAX`.
fn count_arg(py: Python<'_>, what: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    if value.is_instance_of::<pyo3::types::PyBool>()
        || !value.is_instance_of::<pyo3::types::PyInt>()
    {
        return Err(new_error(
            py,
            "UnsupportedTypeError",
            format!("{what} must be an int, got {}", type_name(value)),
            &[],
        ));
    }
    let value: i128 = value.extract()?;
    if value < 0 {
        return Err(CoreError::InvalidArgument(format!(
            "{what} must be >= 0, got {value}"
        )))
        .into_py_result(py);
    }
    Ok(usize::try_from(value).unwrap_or(usize::MAX))
}

/// Exact token count of `text`.
#[pyfunction]
#[pyo3(signature = (text, *, encoding="o200k_base"))]
fn count_tokens(py: Python<'_>, text: &Bound<'_, PyAny>, encoding: &str) -> PyResult<usize> {
    let encoding = encoding_arg(py, encoding)?;
    let bytes = utf8(text, "text", None)?;
    Ok(with_text(py, &bytes, |t| tokens::count_tokens(t, encoding)))
}

/// Whether `text` is at most `limit` tokens, at a cost that grows with `limit`.
#[pyfunction]
#[pyo3(signature = (text, limit, *, encoding="o200k_base"))]
fn fits_within(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    limit: &Bound<'_, PyAny>,
    encoding: &str,
) -> PyResult<bool> {
    let encoding = encoding_arg(py, encoding)?;
    let text = text
        .cast::<PyString>()
        .map_err(|_| unsupported(py, "text", None, text))?;
    let limit = count_arg(py, "limit", limit)?;
    // Converting a 10 MB str to UTF-8 alone would cost more than counting a few thousand
    // tokens: read growing prefixes until one settles the answer, then the whole text.
    let chars = text.len()?;
    let mut window = limit.saturating_add(1).saturating_mul(8).max(4096);
    while window < chars {
        let end = isize::try_from(window).unwrap_or(isize::MAX);
        let prefix = text.get_item(pyo3::types::PySlice::new(py, 0, end, 1))?;
        let bytes = utf8(&prefix, "text", None)?;
        if let Some(answer) = with_text(py, &bytes, |t| {
            tokens::count::prefix_exceeds(t, limit, encoding)
        }) {
            return Ok(answer);
        }
        window = window.saturating_mul(4);
    }
    let bytes = utf8(text.as_any(), "text", None)?;
    Ok(with_text(py, &bytes, |t| {
        tokens::fits_within(t, limit, encoding)
    }))
}

/// The name of the encoding `model` uses (`None` and unknown models: o200k_base).
#[pyfunction]
#[pyo3(signature = (model=None))]
fn encoding_for(model: Option<&str>) -> &'static str {
    encoding_for_model(model).name()
}

/// The estimator's feature counts, for the reference tests, read as `estimate_tokens` reads
/// the text (UTF-8 if it is ASCII, UCS-4 code points otherwise) or from UTF-8 (as
/// `estimate_messages` and Rust callers do).
#[pyfunction]
#[pyo3(signature = (text, *, encoding="o200k_base", via_utf8=false))]
fn _token_features(
    py: Python<'_>,
    text: &Bound<'_, PyAny>,
    encoding: &str,
    via_utf8: bool,
) -> PyResult<Vec<u64>> {
    let encoding = encoding_arg(py, encoding)?;
    if via_utf8 {
        let bytes = utf8(text, "text", None)?;
        return Ok(tokens::estimate::features(as_str(&bytes), encoding).to_vec());
    }
    Ok(match units(text, "text")? {
        Units::Ascii(bytes) => tokens::estimate::features_of_units(bytes.as_bytes(), encoding),
        Units::Ucs4(units) => tokens::estimate::features_of_units(units.as_slice(), encoding),
    }
    .to_vec())
}

/// Walks the Python messages into [`Message`]s, naming the first bad value by its path.
struct MessageReader<'py> {
    py: Python<'py>,
    path: JsonPath,
}

impl<'py> MessageReader<'py> {
    fn text(&self, value: &Bound<'py, PyAny>) -> PyResult<String> {
        let rendered = self.path.render();
        let bytes = utf8(value, &format!("messages {rendered}"), Some(&rendered))?;
        Ok(as_str(&bytes).to_owned())
    }

    fn dict(&self, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        value.cast::<PyDict>().cloned().map_err(|_| {
            let rendered = self.path.render();
            new_error(
                self.py,
                "UnsupportedTypeError",
                format!(
                    "messages {rendered} must be a dict, got {}",
                    type_name(value)
                ),
                &[("path", PyString::new(self.py, &rendered).into_any())],
            )
        })
    }

    fn items(&self, value: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if let Ok(list) = value.cast::<PyList>() {
            return Ok(list.iter().collect());
        }
        if let Ok(tuple) = value.cast::<PyTuple>() {
            return Ok(tuple.iter().collect());
        }
        let rendered = self.path.render();
        Err(new_error(
            self.py,
            "UnsupportedTypeError",
            format!(
                "messages {rendered} must be a list, got {}",
                type_name(value)
            ),
            &[("path", PyString::new(self.py, &rendered).into_any())],
        ))
    }

    /// `dict[key]` when present and not None.
    fn get(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(dict.get_item(key)?.filter(|v| !v.is_none()))
    }

    fn optional_text(&mut self, dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<String>> {
        let Some(value) = Self::get(dict, key)? else {
            return Ok(None);
        };
        self.path.push_key(key);
        let text = self.text(&value)?;
        self.path.pop();
        Ok(Some(text))
    }

    fn required_text(&mut self, dict: &Bound<'py, PyDict>, key: &str) -> PyResult<String> {
        match self.optional_text(dict, key)? {
            Some(text) => Ok(text),
            None => {
                self.path.push_key(key);
                let rendered = self.path.render();
                self.path.pop();
                Err(new_error(
                    self.py,
                    "InvalidInputError",
                    format!("messages {rendered} is missing"),
                    &[("path", PyString::new(self.py, &rendered).into_any())],
                ))
            }
        }
    }

    fn content(&mut self, value: &Bound<'py, PyAny>) -> PyResult<Vec<ContentPart>> {
        if value.is_instance_of::<PyString>() {
            return Ok(vec![ContentPart::Text(self.text(value)?)]);
        }
        let mut parts = Vec::new();
        for (i, part) in self.items(value)?.iter().enumerate() {
            self.path.push_index(i);
            let part = self.dict(part)?;
            let kind = self.required_text(&part, "type")?;
            match kind.as_str() {
                "text" => parts.push(ContentPart::Text(self.required_text(&part, "text")?)),
                "refusal" => parts.push(ContentPart::Text(self.required_text(&part, "refusal")?)),
                // Anthropic's blocks: a call is priced like an OpenAI tool call, and a result
                // by what it contains (often the bulk of a prompt), not as an opaque part.
                "tool_use" => parts.push(ContentPart::ToolUse(ToolCall {
                    name: self.required_text(&part, "name")?,
                    arguments: self.json_text(&part, "input")?,
                })),
                "tool_result" => {
                    if let Some(content) = Self::get(&part, "content")? {
                        self.path.push_key("content");
                        parts.extend(self.content(&content)?);
                        self.path.pop();
                    }
                }
                _ => parts.push(ContentPart::NonText),
            }
            self.path.pop();
        }
        Ok(parts)
    }

    /// `dict[key]` as JSON text (a tool_use block's `input` is an object, not a string).
    fn json_text(&mut self, dict: &Bound<'py, PyDict>, key: &str) -> PyResult<String> {
        match Self::get(dict, key)? {
            None => Ok(String::new()),
            Some(value) if value.is_instance_of::<PyString>() => self.text(&value),
            Some(value) => {
                let json = PyModule::import(self.py, "json")?;
                json.call_method1("dumps", (value,))?.extract::<String>()
            }
        }
    }

    fn call(&mut self, value: &Bound<'py, PyAny>) -> PyResult<ToolCall> {
        let function = self.dict(value)?;
        Ok(ToolCall {
            name: self.required_text(&function, "name")?,
            arguments: self
                .optional_text(&function, "arguments")?
                .unwrap_or_default(),
        })
    }

    fn message(&mut self, value: &Bound<'py, PyAny>) -> PyResult<Message> {
        let dict = self.dict(value)?;
        let mut message = Message {
            role: self.required_text(&dict, "role")?,
            name: self.optional_text(&dict, "name")?,
            tool_call_id: self.optional_text(&dict, "tool_call_id")?,
            ..Message::default()
        };
        if let Some(content) = Self::get(&dict, "content")? {
            self.path.push_key("content");
            message.content = self.content(&content)?;
            self.path.pop();
        }
        if let Some(calls) = Self::get(&dict, "tool_calls")? {
            self.path.push_key("tool_calls");
            for (i, call) in self.items(&calls)?.iter().enumerate() {
                self.path.push_index(i);
                let call = self.dict(call)?;
                let Some(function) = Self::get(&call, "function")? else {
                    return Err(new_error(
                        self.py,
                        "InvalidInputError",
                        format!("messages {}.function is missing", self.path.render()),
                        &[],
                    ));
                };
                self.path.push_key("function");
                message.tool_calls.push(self.call(&function)?);
                self.path.pop();
                self.path.pop();
            }
            self.path.pop();
        }
        if let Some(function) = Self::get(&dict, "function_call")? {
            self.path.push_key("function_call");
            message.tool_calls.push(self.call(&function)?);
            self.path.pop();
        }
        Ok(message)
    }

    fn read(py: Python<'py>, messages: &Bound<'py, PyAny>) -> PyResult<Vec<Message>> {
        let mut reader = Self {
            py,
            path: JsonPath::new(),
        };
        let items = reader.items(messages)?;
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            reader.path.push_index(i);
            out.push(reader.message(item)?);
            reader.path.pop();
        }
        Ok(out)
    }
}

/// Estimated prompt tokens of chat `messages` (OpenAI's counting convention).
#[pyfunction]
#[pyo3(signature = (messages, *, model=None))]
fn estimate_messages(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    model: Option<&str>,
) -> PyResult<usize> {
    let encoding = encoding_for_model(model);
    let messages = MessageReader::read(py, messages)?;
    Ok(count_messages(&messages, |t| {
        tokens::estimate_tokens(t, encoding)
    }))
}

/// Exact prompt tokens of chat `messages` (OpenAI's counting convention).
#[pyfunction]
#[pyo3(signature = (messages, *, encoding="o200k_base"))]
fn count_message_tokens(
    py: Python<'_>,
    messages: &Bound<'_, PyAny>,
    encoding: &str,
) -> PyResult<usize> {
    let encoding = encoding_arg(py, encoding)?;
    let messages = MessageReader::read(py, messages)?;
    Ok(py.detach(|| count_messages(&messages, |t| tokens::count_tokens(t, encoding))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(estimate_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_messages, m)?)?;
    m.add_function(wrap_pyfunction!(estimate_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(count_message_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(fits_within, m)?)?;
    m.add_function(wrap_pyfunction!(encoding_for, m)?)?;
    m.add_function(wrap_pyfunction!(_token_features, m)?)?;
    Ok(())
}
