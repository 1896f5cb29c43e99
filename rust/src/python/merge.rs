//! `deep_merge`, `strip_unsafe_keys` and `merge_json` for Python.
//!
//! The policy (modes, unsafe keys, depth limit, JSON equality, union index) comes from
//! `crate::merge`; this file only walks Python objects with it. The walk works on the objects
//! directly: it visits the nodes the patch reaches and nothing else, and the untouched subtrees
//! of `base` go into the result as the same objects. Converting the state to a Rust value and
//! back would cost more than the merge and lose that sharing.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::errors::{new_error, to_pyerr, IntoPyResult};
use crate::merge::trace::{Trace, WalkError};
use crate::merge::union::{self, ArrayHasher, ObjectHasher, UnionIndex, PAIRWISE_LIMIT};
use crate::merge::{
    value, ArrayMode, MergeOptions, NullMode, TopLevelNull, UnsafeKeys, DEFAULT_UNSAFE_KEYS,
    MAX_DEPTH,
};

/// A failure while walking: a Python exception raised by a callee, or bad data.
enum Fail {
    Py(PyErr),
    Walk(WalkError),
}

/// Boxed so that a `Walk<Bound>` is two words: the walk recurses once per nesting level, and
/// small frames are what let MAX_DEPTH levels fit in a thread's stack.
type Failure = Box<Trace<Fail>>;
type Walk<T> = Result<T, Failure>;

#[cold]
#[inline(never)]
fn fail<T>(error: WalkError) -> Walk<T> {
    Err(Box::new(Trace::new(Fail::Walk(error))))
}

#[cold]
#[inline(never)]
fn py_fail(error: PyErr) -> Failure {
    Box::new(Trace::new(Fail::Py(error)))
}

#[cold]
#[inline(never)]
fn at_index(mut failure: Failure, index: usize) -> Failure {
    failure.push_index(index);
    failure
}

fn finish<T>(py: Python<'_>, result: Walk<T>) -> PyResult<T> {
    result.map_err(|trace| {
        let mut kind = None;
        let trace = (*trace).map_kind(|k| match k {
            Fail::Py(e) => {
                kind = Some(e);
                WalkError::TooDeep
            }
            Fail::Walk(w) => w,
        });
        kind.unwrap_or_else(|| to_pyerr(py, trace.into_core()))
    })
}

fn key_segment(key: &Bound<'_, PyAny>) -> String {
    key.str()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

fn at_key<'a>(key: &'a Bound<'_, PyAny>) -> impl FnOnce(Failure) -> Failure + 'a {
    #[cold]
    #[inline(never)]
    fn add(mut failure: Failure, key: &Bound<'_, PyAny>) -> Failure {
        failure.push_key(&key_segment(key));
        failure
    }
    move |t| add(t, key)
}

fn check_depth(depth: usize) -> Walk<()> {
    if depth >= MAX_DEPTH {
        fail(WalkError::TooDeep)
    } else {
        Ok(())
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// What a Python object is as JSON data. Exact types are checked first: they are nearly all
/// values and the check is a pointer comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    Float,
    Str,
    Dict,
    Seq,
    Other,
}

fn classify(v: &Bound<'_, PyAny>) -> Kind {
    if v.is_exact_instance_of::<PyString>() {
        Kind::Str
    } else if v.is_exact_instance_of::<PyDict>() {
        Kind::Dict
    } else if v.is_exact_instance_of::<PyInt>() {
        Kind::Number
    } else if v.is_none() {
        Kind::Null
    } else if v.is_exact_instance_of::<PyList>() {
        Kind::Seq
    } else if v.is_exact_instance_of::<PyFloat>() {
        Kind::Float
    } else if v.is_exact_instance_of::<PyBool>() {
        Kind::Bool
    } else if v.is_instance_of::<PyString>() {
        Kind::Str
    } else if v.is_instance_of::<PyDict>() {
        Kind::Dict
    } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        Kind::Seq
    } else if v.is_instance_of::<PyFloat>() {
        Kind::Float
    } else if v.is_instance_of::<PyInt>() {
        Kind::Number
    } else {
        Kind::Other
    }
}

/// The items of a list or tuple (the caller has classified it as `Kind::Seq`).
fn seq_items<'py>(seq: &Bound<'py, PyAny>) -> Walk<Vec<Bound<'py, PyAny>>> {
    if let Ok(list) = seq.cast::<PyList>() {
        Ok(list.iter().collect())
    } else {
        let tuple = seq.cast::<PyTuple>().map_err(|e| py_fail(e.into()))?;
        Ok(tuple.iter().collect())
    }
}

/// The unsafe keys as Python strings with their (cached) hashes: a key from a patch is compared
/// by hash first, so the common case costs one integer comparison per unsafe key.
struct KeySet {
    keys: Vec<(isize, Py<PyString>)>,
}

impl KeySet {
    fn new(py: Python<'_>, keys: &[Bound<'_, PyString>]) -> PyResult<Self> {
        let mut out: Vec<(isize, Py<PyString>)> = Vec::with_capacity(keys.len());
        for key in keys {
            let hash = key.hash()?;
            let mut seen = false;
            for (_, k) in &out {
                seen |= k.bind(py).as_any().eq(key)?;
            }
            if !seen {
                out.push((hash, key.clone().unbind()));
            }
        }
        Ok(Self { keys: out })
    }

    fn contains(&self, key: &Bound<'_, PyString>) -> PyResult<bool> {
        if self.keys.is_empty() {
            return Ok(false);
        }
        let hash = key.hash()?;
        for (h, k) in &self.keys {
            if *h == hash {
                let k = k.bind(key.py());
                if k.is(key) || k.as_any().eq(key)? {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

static DEFAULT_KEY_TUPLE: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
static DEFAULT_KEY_SET: PyOnceLock<KeySet> = PyOnceLock::new();

fn default_key_tuple(py: Python<'_>) -> PyResult<&Bound<'_, PyTuple>> {
    Ok(DEFAULT_KEY_TUPLE
        .get_or_try_init(py, || {
            PyTuple::new(
                py,
                DEFAULT_UNSAFE_KEYS.iter().map(|k| PyString::intern(py, k)),
            )
            .map(Bound::unbind)
        })?
        .bind(py))
}

fn default_key_set(py: Python<'_>) -> PyResult<&KeySet> {
    DEFAULT_KEY_SET.get_or_try_init(py, || {
        let keys: Vec<Bound<'_, PyString>> = DEFAULT_UNSAFE_KEYS
            .iter()
            .map(|k| PyString::intern(py, k))
            .collect();
        KeySet::new(py, &keys)
    })
}

/// `unsafe_keys=` as given: the default (by omission or by passing `DEFAULT_UNSAFE_KEYS`
/// itself, which skips building a set) or any iterable of `str`.
enum KeysArg<'py> {
    Default,
    Custom(Vec<Bound<'py, PyString>>),
}

fn keys_arg<'py>(
    py: Python<'py>,
    what: &str,
    keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<KeysArg<'py>> {
    let Some(keys) = keys else {
        return Ok(KeysArg::Default);
    };
    if keys.is(default_key_tuple(py)?) {
        return Ok(KeysArg::Default);
    }
    let bad = |got: String| {
        new_error(
            py,
            "InvalidOptionError",
            format!("{what} must be an iterable of str (e.g. a tuple of keys), got {got}"),
            &[],
        )
    };
    if keys.is_instance_of::<PyString>() {
        return Err(bad(format!("the single str {}", keys.repr()?)));
    }
    let iter = keys
        .try_iter()
        .map_err(|_| bad(format!("a {}", type_name(keys))))?;
    let mut out = Vec::new();
    for key in iter {
        let key = key?;
        match key.cast_into::<PyString>() {
            Ok(key) => out.push(key),
            Err(e) => {
                let item = e.into_inner();
                return Err(bad(format!("an item of type {}", type_name(&item))));
            }
        }
    }
    Ok(KeysArg::Custom(out))
}

fn option_str(
    py: Python<'_>,
    what: &str,
    allowed: &str,
    value: &Bound<'_, PyAny>,
) -> PyResult<String> {
    match value.cast::<PyString>() {
        Ok(s) => Ok(s.to_cow()?.into_owned()),
        Err(_) => Err(new_error(
            py,
            "InvalidOptionError",
            format!(
                "{what} must be one of {allowed}, got {} of type {}",
                value.repr()?,
                type_name(value)
            ),
            &[],
        )),
    }
}

fn array_mode(py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<ArrayMode> {
    match value {
        None => Ok(ArrayMode::Replace),
        Some(v) => {
            ArrayMode::parse(&option_str(py, "arrays", ArrayMode::ALLOWED, v)?).into_py_result(py)
        }
    }
}

fn null_mode(py: Python<'_>, value: Option<&Bound<'_, PyAny>>) -> PyResult<NullMode> {
    match value {
        None => Ok(NullMode::Keep),
        Some(v) => {
            NullMode::parse(&option_str(py, "nulls", NullMode::ALLOWED, v)?).into_py_result(py)
        }
    }
}

/// What one patch entry does, decided by `Walker::entry`.
enum Entry<'py> {
    Skip,
    Set(Bound<'py, PyAny>),
    /// Recurse: into the existing value if there is one, else copy the patch value in.
    Descend(Option<Bound<'py, PyAny>>, Kind),
}

#[inline(never)]
fn store<'py>(
    out: &Bound<'py, PyDict>,
    key: &Bound<'py, PyAny>,
    value: Bound<'py, PyAny>,
) -> Walk<()> {
    out.set_item(key, value).map_err(py_fail)
}

#[inline(never)]
fn new_list<'py>(py: Python<'py>, items: Vec<Bound<'py, PyAny>>) -> Walk<Bound<'py, PyAny>> {
    Ok(PyList::new(py, items).map_err(py_fail)?.into_any())
}

/// What `strip` must change in one dict. The pushes are out of line to keep the recursive
/// frame small.
#[derive(Default)]
struct Edits<'py> {
    dropped: Vec<Bound<'py, PyAny>>,
    changed: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
}

impl<'py> Edits<'py> {
    #[inline(never)]
    fn drop_key(&mut self, key: Bound<'py, PyAny>) {
        self.dropped.push(key);
    }

    #[inline(never)]
    fn change(&mut self, key: Bound<'py, PyAny>, value: Bound<'py, PyAny>) {
        self.changed.push((key, value));
    }

    fn is_empty(&self) -> bool {
        self.dropped.is_empty() && self.changed.is_empty()
    }
}

/// A copy of `d` without the dropped keys and with the changed values.
#[inline(never)]
fn rebuild_dict<'py>(d: &Bound<'py, PyDict>, edits: Edits<'py>) -> Walk<Bound<'py, PyAny>> {
    let out = d.copy().map_err(py_fail)?;
    for key in edits.dropped {
        out.del_item(key).map_err(py_fail)?;
    }
    for (key, new) in edits.changed {
        out.set_item(key, new).map_err(py_fail)?;
    }
    Ok(out.into_any())
}

/// One merge or strip call: the options and the Python-side key set.
struct Walker<'a, 'py> {
    py: Python<'py>,
    arrays: ArrayMode,
    nulls: NullMode,
    allow_nan: bool,
    keys: &'a KeySet,
}

impl<'py> Walker<'_, 'py> {
    fn str_key<'k>(&self, key: &'k Bound<'py, PyAny>) -> Walk<&'k Bound<'py, PyString>> {
        if key.is_exact_instance_of::<PyString>() {
            // SAFETY: checked just above; under abi3 the subclass check is a function call.
            return Ok(unsafe { key.cast_unchecked::<PyString>() });
        }
        key.cast::<PyString>().or_else(|_| {
            fail(WalkError::UnsupportedType(format!(
                "{} (as an object key; JSON keys are str)",
                type_name(key)
            )))
        })
    }

    #[inline(never)]
    fn key_is_unsafe(&self, key: &Bound<'py, PyAny>) -> Walk<bool> {
        self.is_unsafe(self.str_key(key)?)
    }

    fn is_unsafe(&self, key: &Bound<'py, PyString>) -> Walk<bool> {
        self.keys.contains(key).map_err(py_fail)
    }

    /// A scalar as it goes into the result, after checking that it is JSON data.
    fn scalar(&self, value: &Bound<'py, PyAny>, kind: Kind) -> Walk<Bound<'py, PyAny>> {
        match kind {
            Kind::Float if !self.allow_nan => {
                let f = value
                    .cast::<PyFloat>()
                    .map_err(|e| py_fail(e.into()))?
                    .value();
                if !f.is_finite() {
                    let text = if f.is_nan() {
                        "NaN"
                    } else if f > 0.0 {
                        "Infinity"
                    } else {
                        "-Infinity"
                    };
                    return fail(WalkError::NonFinite(text.to_owned()));
                }
                Ok(value.clone())
            }
            Kind::Other => fail(WalkError::UnsupportedType(type_name(value))),
            _ => Ok(value.clone()),
        }
    }

    fn merge(
        &self,
        base: &Bound<'py, PyAny>,
        patch: &Bound<'py, PyAny>,
        kind: Kind,
        depth: usize,
    ) -> Walk<Bound<'py, PyAny>> {
        match kind {
            Kind::Dict => {
                // SAFETY: classify() saw a dict (or subclass).
                let patch = unsafe { patch.cast_unchecked::<PyDict>() };
                if base.is_exact_instance_of::<PyDict>() {
                    // SAFETY: checked just above; the exact check skips PyType_GetFlags.
                    return self.merge_dicts(
                        unsafe { base.cast_unchecked::<PyDict>() },
                        patch,
                        depth,
                    );
                }
                match base.cast::<PyDict>() {
                    Ok(base) => self.merge_dicts(base, patch, depth),
                    Err(_) => self.copy_dict(patch, depth),
                }
            }
            Kind::Seq if self.arrays == ArrayMode::Union && classify(base) == Kind::Seq => {
                self.union(base, patch, depth)
            }
            _ => self.copy_in(patch, kind, depth),
        }
    }

    fn merge_dicts(
        &self,
        base: &Bound<'py, PyDict>,
        patch: &Bound<'py, PyDict>,
        depth: usize,
    ) -> Walk<Bound<'py, PyAny>> {
        check_depth(depth)?;
        let out = self.copy_stripped(base)?;
        for (key, value) in patch.iter() {
            let merged = match self.entry(&out, &key, &value, true)? {
                Entry::Skip => continue,
                Entry::Set(v) => v,
                Entry::Descend(Some(existing), kind) => self
                    .merge(&existing, &value, kind, depth + 1)
                    .map_err(at_key(&key))?,
                Entry::Descend(None, kind) => self
                    .copy_in(&value, kind, depth + 1)
                    .map_err(at_key(&key))?,
            };
            store(&out, &key, merged)?;
        }
        Ok(out.into_any())
    }

    /// PyDict_Copy (a plain dict even when base is a subclass, and a memcpy for the common case)
    /// without the unsafe keys.
    #[inline(never)]
    fn copy_stripped(&self, base: &Bound<'py, PyDict>) -> Walk<Bound<'py, PyDict>> {
        let out = base.copy().map_err(py_fail)?;
        for (_, key) in &self.keys.keys {
            let key = key.bind(self.py);
            if out.contains(key).map_err(py_fail)? {
                out.del_item(key).map_err(py_fail)?;
            }
        }
        Ok(out)
    }

    /// Decides what one patch entry does to `out` (applying nulls and scalars directly). Kept
    /// out of line: its frame is gone before the walk recurses, so each nesting level costs
    /// only the small frame of the loop.
    #[inline(never)]
    fn entry(
        &self,
        out: &Bound<'py, PyDict>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        merging: bool,
    ) -> Walk<Entry<'py>> {
        if self.is_unsafe(self.str_key(key)?)? {
            return Ok(Entry::Skip);
        }
        let kind = classify(value);
        match kind {
            Kind::Null => {
                let delete = match (self.nulls, merging) {
                    (NullMode::Keep, _) => {
                        out.set_item(key, value).map_err(py_fail)?;
                        false
                    }
                    (NullMode::Delete, true) => out.contains(key).map_err(py_fail)?,
                    _ => false,
                };
                if delete {
                    out.del_item(key).map_err(py_fail)?;
                }
                Ok(Entry::Skip)
            }
            Kind::Dict | Kind::Seq => {
                let existing = if merging {
                    out.get_item(key).map_err(py_fail)?
                } else {
                    None
                };
                Ok(Entry::Descend(existing, kind))
            }
            _ => Ok(Entry::Set(self.scalar(value, kind).map_err(at_key(key))?)),
        }
    }

    /// A patch value entering the result with nothing to merge into: copied, stripped, with
    /// the null policy applied to the keys of its objects (none beneath an array: see
    /// [`Self::verbatim`]).
    fn copy_in(
        &self,
        value: &Bound<'py, PyAny>,
        kind: Kind,
        depth: usize,
    ) -> Walk<Bound<'py, PyAny>> {
        match kind {
            // SAFETY: classify() saw a dict (or subclass).
            Kind::Dict => self.copy_dict(unsafe { value.cast_unchecked::<PyDict>() }, depth),
            Kind::Seq => self.copy_seq(value, depth),
            _ => self.scalar(value, kind),
        }
    }

    /// The walker for the items of an array: an array is a value, kept verbatim, so the null
    /// policy (which is about the keys a patch merges) does not reach into it.
    fn verbatim(&self) -> Walker<'_, 'py> {
        Walker {
            nulls: NullMode::Keep,
            ..*self
        }
    }

    #[inline(never)]
    fn copy_seq(&self, value: &Bound<'py, PyAny>, depth: usize) -> Walk<Bound<'py, PyAny>> {
        check_depth(depth)?;
        let items = seq_items(value)?;
        let walker = self.verbatim();
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            out.push(
                walker
                    .copy_in(item, classify(item), depth + 1)
                    .map_err(|t| at_index(t, i))?,
            );
        }
        new_list(self.py, out)
    }

    fn copy_dict(&self, patch: &Bound<'py, PyDict>, depth: usize) -> Walk<Bound<'py, PyAny>> {
        check_depth(depth)?;
        let out = PyDict::new(self.py);
        for (key, value) in patch.iter() {
            let copied = match self.entry(&out, &key, &value, false)? {
                Entry::Skip => continue,
                Entry::Set(v) => v,
                Entry::Descend(_, kind) => self
                    .copy_in(&value, kind, depth + 1)
                    .map_err(at_key(&key))?,
            };
            store(&out, &key, copied)?;
        }
        Ok(out.into_any())
    }

    /// `arrays="union"`: the base items then the patch items, each value once (its first
    /// occurrence). The base is trusted, so only patch items are copied in.
    #[inline(never)]
    fn union(
        &self,
        base: &Bound<'py, PyAny>,
        patch: &Bound<'py, PyAny>,
        depth: usize,
    ) -> Walk<Bound<'py, PyAny>> {
        check_depth(depth)?;
        let base_items = seq_items(base)?;
        let patch_items = seq_items(patch)?;
        let base_len = base_items.len();
        let mut seen = Seen::new(base_len + patch_items.len(), depth + 1);
        for (i, item) in base_items.into_iter().enumerate() {
            seen.push_new(self, item).map_err(|t| at_index(t, i))?;
        }
        let walker = self.verbatim();
        for (i, item) in patch_items.iter().enumerate() {
            let at = |t: Failure| at_index(t, base_len + i);
            let item = walker
                .copy_in(item, classify(item), depth + 1)
                .map_err(at)?;
            seen.push_new(self, item).map_err(at)?;
        }
        new_list(self.py, seen.items)
    }

    /// JSON equality (see `crate::merge`): numbers compare exactly as Python does, except that
    /// a bool only equals the same bool.
    fn equal(&self, a: &Bound<'py, PyAny>, b: &Bound<'py, PyAny>, depth: usize) -> Walk<bool> {
        let (ka, kb) = (classify(a), classify(b));
        if ka == Kind::Other || kb == Kind::Other {
            let other = if ka == Kind::Other { a } else { b };
            return fail(WalkError::UnsupportedType(type_name(other)));
        }
        if a.is(b) {
            return Ok(true);
        }
        let numeric = |k: Kind| k == Kind::Number || k == Kind::Float;
        Ok(match (ka, kb) {
            (Kind::Null, Kind::Null) => true,
            (Kind::Str, Kind::Str) => a.eq(b).map_err(py_fail)?,
            (x, y) if numeric(x) && numeric(y) => a.eq(b).map_err(py_fail)?,
            (Kind::Bool, Kind::Bool) => {
                a.is_truthy().map_err(py_fail)? == b.is_truthy().map_err(py_fail)?
            }
            (Kind::Seq, Kind::Seq) => {
                check_depth(depth)?;
                let (xs, ys) = (seq_items(a)?, seq_items(b)?);
                if xs.len() != ys.len() {
                    return Ok(false);
                }
                for (x, y) in xs.iter().zip(&ys) {
                    if !self.equal(x, y, depth + 1)? {
                        return Ok(false);
                    }
                }
                true
            }
            (Kind::Dict, Kind::Dict) => {
                check_depth(depth)?;
                // SAFETY: both classified as dicts.
                let (x, y) =
                    unsafe { (a.cast_unchecked::<PyDict>(), b.cast_unchecked::<PyDict>()) };
                if x.len() != y.len() {
                    return Ok(false);
                }
                for (key, value) in x.iter() {
                    match y.get_item(&key).map_err(py_fail)? {
                        Some(other) if self.equal(&value, &other, depth + 1)? => {}
                        _ => return Ok(false),
                    }
                }
                true
            }
            _ => false,
        })
    }

    /// Structural hash consistent with [`Self::equal`]; Python's own hash already makes
    /// `hash(1) == hash(1.0)` and caches the hash of every str.
    fn hash(&self, v: &Bound<'py, PyAny>, depth: usize) -> Walk<u64> {
        let py_hash = |v: &Bound<'py, PyAny>| v.hash().map(|h| h as u64).map_err(py_fail);
        Ok(match classify(v) {
            Kind::Null => union::NULL_HASH,
            Kind::Bool => {
                if v.is_truthy().map_err(py_fail)? {
                    union::TRUE_HASH
                } else {
                    union::FALSE_HASH
                }
            }
            Kind::Number | Kind::Float => union::number_hash(py_hash(v)?),
            Kind::Str => union::string_hash(py_hash(v)?),
            Kind::Seq => {
                check_depth(depth)?;
                let mut h = ArrayHasher::default();
                for item in seq_items(v)? {
                    h.add(self.hash(&item, depth + 1)?);
                }
                h.finish()
            }
            Kind::Dict => {
                check_depth(depth)?;
                // SAFETY: classified as a dict.
                let d = unsafe { v.cast_unchecked::<PyDict>() };
                let mut h = ObjectHasher::default();
                for (key, value) in d.iter() {
                    h.add(py_hash(&key)?, self.hash(&value, depth + 1)?);
                }
                h.finish()
            }
            Kind::Other => return fail(WalkError::UnsupportedType(type_name(v))),
        })
    }

    /// The value without unsafe keys, or `None` when it can be shared as it is.
    fn strip(&self, value: &Bound<'py, PyAny>, depth: usize) -> Walk<Option<Bound<'py, PyAny>>> {
        match classify(value) {
            Kind::Dict => self.strip_dict(value, depth),
            Kind::Seq => self.strip_seq(value, depth),
            kind => self.scalar(value, kind).map(|_| None),
        }
    }

    #[inline(never)]
    fn strip_dict(
        &self,
        value: &Bound<'py, PyAny>,
        depth: usize,
    ) -> Walk<Option<Bound<'py, PyAny>>> {
        check_depth(depth)?;
        // SAFETY: classified as a dict by the caller.
        let d = unsafe { value.cast_unchecked::<PyDict>() };
        let mut edits = Edits::default();
        for (key, child) in d.iter() {
            if self.key_is_unsafe(&key)? {
                edits.drop_key(key);
                continue;
            }
            if let Some(new) = self.strip(&child, depth + 1).map_err(at_key(&key))? {
                edits.change(key, new);
            }
        }
        if edits.is_empty() && value.is_exact_instance_of::<PyDict>() {
            return Ok(None);
        }
        rebuild_dict(d, edits).map(Some)
    }

    #[inline(never)]
    fn strip_seq(
        &self,
        value: &Bound<'py, PyAny>,
        depth: usize,
    ) -> Walk<Option<Bound<'py, PyAny>>> {
        check_depth(depth)?;
        let mut items = seq_items(value)?;
        let mut any = !value.is_exact_instance_of::<PyList>();
        for (i, item) in items.iter_mut().enumerate() {
            if let Some(new) = self.strip(item, depth + 1).map_err(|t| at_index(t, i))? {
                *item = new;
                any = true;
            }
        }
        if !any {
            return Ok(None);
        }
        new_list(self.py, items).map(Some)
    }
}

/// The distinct values of a union so far. A few values are compared pairwise; past
/// [`PAIRWISE_LIMIT`] the hash index keeps the dedup linear.
struct Seen<'py> {
    items: Vec<Bound<'py, PyAny>>,
    index: Option<UnionIndex>,
    depth: usize,
}

impl<'py> Seen<'py> {
    fn new(capacity: usize, depth: usize) -> Self {
        Self {
            items: Vec::with_capacity(capacity),
            index: (capacity > PAIRWISE_LIMIT).then(|| UnionIndex::with_capacity(capacity)),
            depth,
        }
    }

    /// Appends `item` unless an equal value is already there.
    fn push_new(&mut self, walker: &Walker<'_, 'py>, item: Bound<'py, PyAny>) -> Walk<()> {
        let depth = self.depth;
        match &mut self.index {
            None => {
                for present in &self.items {
                    if walker.equal(present, &item, depth)? {
                        return Ok(());
                    }
                }
            }
            Some(index) => {
                let hash = walker.hash(&item, depth)?;
                let items = &self.items;
                if index.contains(hash, |j| walker.equal(&items[j], &item, depth))? {
                    return Ok(());
                }
                index.insert(hash, items.len());
            }
        }
        self.items.push(item);
        Ok(())
    }
}

fn with_key_set<'py, T>(
    py: Python<'py>,
    keys: KeysArg<'py>,
    f: impl FnOnce(&KeySet) -> PyResult<T>,
) -> PyResult<T> {
    match keys {
        KeysArg::Default => f(default_key_set(py)?),
        KeysArg::Custom(keys) => f(&KeySet::new(py, &keys)?),
    }
}

/// Deep-merges ``patch`` into ``base`` and returns the result; neither input is mutated.
///
/// Objects merge recursively, primitives overwrite, and a patch object replacing a non-object
/// is copied in. Untouched subtrees of ``base`` are shared with the result (the same objects),
/// so the cost follows the size of the patch, not of the state.
///
/// ``base`` is trusted to be JSON data already stripped of unsafe keys (stores strip on load
/// with :func:`strip_unsafe_keys`); only the parts the patch reaches are inspected. Every
/// object the merge creates or copies (patch subtrees, touched base objects) is stripped of
/// ``unsafe_keys`` at every depth, and every patch value is checked to be JSON data. Values
/// under an unsafe key are dropped without being inspected. Tuples are accepted as arrays and
/// become lists; dict subclasses merge as dicts and produce plain dicts.
///
/// Args:
///     base: The current state (any JSON value).
///     patch: The update. A top-level ``None`` gives ``None``, or ``base`` with
///         ``nulls="ignore"``.
///     arrays: ``"replace"``: a patch array replaces the old one. ``"union"``: the old array
///         followed by the patch array, each value once, at its first occurrence (so
///         duplicates already in the old array go too), by JSON equality (equal objects and
///         arrays count; ``True`` is not ``1``; ``1`` is ``1.0``).
///     nulls: What ``None`` under a key of a patch object does, at every depth: ``"keep"``
///         stores it, ``"delete"`` removes the key, ``"ignore"`` leaves the old value (for
///         OpenAI strict-mode tools that pad optional fields with null). An array is a value
///         stored verbatim: ``None`` inside it, even under a key of an object in it, is kept
///         in every mode.
///     unsafe_keys: Keys removed at every depth of what the merge produces.
///     allow_nan: Accept NaN and ±Infinity floats in the patch.
///
/// Returns:
///     The merged value.
///
/// Raises:
///     NestingTooDeepError: The patch nests deeper than :data:`MAX_DEPTH`.
///     UnsupportedTypeError: A patch value is not JSON data (set, bytes, object, non-str key).
///     NonFiniteNumberError: A patch float is NaN or infinite and ``allow_nan`` is false.
///     InvalidOptionError: ``arrays``, ``nulls`` or ``unsafe_keys`` is not an allowed value.
///
/// The errors carry the JSON path of the offending value in ``.path`` (``$.profile.tags[3]``).
#[pyfunction]
#[pyo3(
    signature = (base, patch, *, arrays=None, nulls=None, unsafe_keys=None, allow_nan=false),
    text_signature = "(base, patch, *, arrays='replace', nulls='keep', unsafe_keys=('__proto__', 'constructor'), allow_nan=False)"
)]
fn deep_merge<'py>(
    py: Python<'py>,
    base: &Bound<'py, PyAny>,
    patch: &Bound<'py, PyAny>,
    arrays: Option<&Bound<'py, PyAny>>,
    nulls: Option<&Bound<'py, PyAny>>,
    unsafe_keys: Option<&Bound<'py, PyAny>>,
    allow_nan: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let arrays = array_mode(py, arrays)?;
    let nulls = null_mode(py, nulls)?;
    let keys = keys_arg(py, "unsafe_keys", unsafe_keys)?;
    with_key_set(py, keys, |keys| {
        let walker = Walker {
            py,
            arrays,
            nulls,
            allow_nan,
            keys,
        };
        let kind = classify(patch);
        if kind == Kind::Null {
            return Ok(match nulls.top_level() {
                TopLevelNull::Base => base.clone(),
                TopLevelNull::Null => patch.clone(),
            });
        }
        finish(py, walker.merge(base, patch, kind, 0))
    })
}

/// Returns ``value`` without ``keys`` at any depth; ``value`` is not mutated.
///
/// Containers in which nothing had to change are shared with the result (the very same
/// object when nothing changed at all); dict subclasses become plain dicts and tuples lists.
///
/// Raises:
///     NestingTooDeepError: ``value`` nests deeper than :data:`MAX_DEPTH`.
///     UnsupportedTypeError: Something in ``value`` is not JSON data.
///     NonFiniteNumberError: A float is NaN or infinite and ``allow_nan`` is false.
///     InvalidOptionError: ``keys`` is not an iterable of str.
#[pyfunction]
#[pyo3(
    signature = (value, keys=None, *, allow_nan=false),
    name = "strip_unsafe_keys",
    text_signature = "(value, keys=('__proto__', 'constructor'), *, allow_nan=False)"
)]
fn strip_keys<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
    keys: Option<&Bound<'py, PyAny>>,
    allow_nan: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let keys = keys_arg(py, "keys", keys)?;
    with_key_set(py, keys, |keys| {
        let walker = Walker {
            py,
            arrays: ArrayMode::Replace,
            nulls: NullMode::Keep,
            allow_nan,
            keys,
        };
        Ok(finish(py, walker.strip(value, 0))?.unwrap_or_else(|| value.clone()))
    })
}

/// JSON text as bytes: `bytes` are borrowed, `str` is encoded.
enum Text<'py> {
    Bytes(Bound<'py, PyBytes>),
    Str(String),
}

impl Text<'_> {
    fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Bytes(b) => b.as_bytes(),
            Text::Str(s) => s.as_bytes(),
        }
    }
}

fn text_arg<'py>(py: Python<'py>, what: &str, value: &Bound<'py, PyAny>) -> PyResult<Text<'py>> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Text::Bytes(b.clone()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Text::Str(s.to_cow()?.into_owned()));
    }
    Err(new_error(
        py,
        "UnsupportedTypeError",
        format!(
            "{what} must be JSON text as bytes or str, got {}",
            type_name(value)
        ),
        &[],
    ))
}

/// :func:`deep_merge` on JSON text, for the storage path; returns compact UTF-8 JSON.
///
/// Both texts are parsed in full, so the whole result is stripped of ``unsafe_keys``, base
/// included. Key order is preserved, new keys come last. JSON text cannot hold NaN, so there
/// is no ``allow_nan``. The GIL is released while merging.
///
/// Raises:
///     InvalidJSONError: ``base`` or ``patch`` (named in the message) is not valid JSON.
///     NestingTooDeepError: A text nests deeper than :data:`MAX_DEPTH` (``.path`` says where).
///     UnsupportedTypeError: An argument is neither ``bytes`` nor ``str``.
///     InvalidOptionError: As for :func:`deep_merge`.
#[pyfunction]
#[pyo3(
    signature = (base, patch, *, arrays=None, nulls=None, unsafe_keys=None),
    text_signature = "(base, patch, *, arrays='replace', nulls='keep', unsafe_keys=('__proto__', 'constructor'))"
)]
fn merge_json<'py>(
    py: Python<'py>,
    base: &Bound<'py, PyAny>,
    patch: &Bound<'py, PyAny>,
    arrays: Option<&Bound<'py, PyAny>>,
    nulls: Option<&Bound<'py, PyAny>>,
    unsafe_keys: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let arrays = array_mode(py, arrays)?;
    let nulls = null_mode(py, nulls)?;
    let unsafe_keys = match keys_arg(py, "unsafe_keys", unsafe_keys)? {
        KeysArg::Default => UnsafeKeys::default(),
        KeysArg::Custom(keys) => UnsafeKeys::new(
            keys.iter()
                .map(|k| k.to_cow().map(|c| c.into_owned()))
                .collect::<PyResult<Vec<String>>>()?,
        ),
    };
    let options = MergeOptions {
        arrays,
        nulls,
        unsafe_keys,
    };
    let base = text_arg(py, "base", base)?;
    let patch = text_arg(py, "patch", patch)?;
    let (b, p) = (base.as_bytes(), patch.as_bytes());
    let out = py
        .detach(|| value::merge_json(b, p, &options))
        .into_py_result(py)?;
    Ok(PyBytes::new(py, &out))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("MAX_DEPTH", MAX_DEPTH)?;
    m.add("DEFAULT_UNSAFE_KEYS", default_key_tuple(py)?)?;
    m.add_function(wrap_pyfunction!(deep_merge, m)?)?;
    m.add_function(wrap_pyfunction!(strip_keys, m)?)?;
    m.add_function(wrap_pyfunction!(merge_json, m)?)?;
    Ok(())
}
