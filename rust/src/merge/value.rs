//! The merge over `serde_json::Value`: `merge_json` and the reference for the unit tests.
//!
//! Values are owned, so the merge moves base subtrees into the result instead of copying them.

use serde::Deserialize;
use serde_json::{Map, Number, Value};

use super::scan::nesting_depth;
use super::trace::{Trace, WalkError};
use super::union::{self, ArrayHasher, ObjectHasher, UnionIndex, PAIRWISE_LIMIT};
use super::{ArrayMode, MergeOptions, NullMode, TopLevelNull, UnsafeKeys, MAX_DEPTH};
use crate::{CoreError, CoreResult};

type Walk<T> = Result<T, Trace<WalkError>>;

/// The stack of the thread that parses text nested past serde_json's own limit: ample for
/// [`MAX_DEPTH`] levels, and only reserved, not committed, until used.
const DEEP_STACK_BYTES: usize = 256 << 20;

/// Merges `patch` into `base` (both JSON text) and returns compact JSON text.
///
/// Both texts are parsed in full, so unlike the Python-object merge the whole result is
/// stripped of unsafe keys, base included. Key order is preserved; new keys come last.
pub fn merge_json(base: &[u8], patch: &[u8], options: &MergeOptions) -> CoreResult<Vec<u8>> {
    // Nearly every document nests less than serde_json's own limit (128), which its parser
    // enforces safely on any stack; only when that limit is hit does the text get scanned for
    // its real depth and parsed without the limit on a thread with a stack sized for it.
    match merge_texts(base, patch, options, Depth::Shallow) {
        Err(CoreError::InvalidJson { detail, .. }) if detail.starts_with(RECURSION_LIMIT) => {}
        done => return done,
    }
    nesting_depth(base)?;
    nesting_depth(patch)?;
    let work = || merge_texts(base, patch, options, Depth::UpToMax);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("memstrata-merge-json".into())
            .stack_size(DEEP_STACK_BYTES)
            .spawn_scoped(scope, work)
            .map_err(|e| CoreError::InvalidArgument(format!("cannot start the parser: {e}")))?
            .join()
            .unwrap_or_else(|_| {
                Err(CoreError::InvalidArgument(
                    "merge_json failed unexpectedly".into(),
                ))
            })
    })
}

/// serde_json's message when its recursion limit stops a parse.
const RECURSION_LIMIT: &str = "recursion limit exceeded";

/// Whether the parser keeps serde_json's recursion limit or relies on a prior depth scan.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Depth {
    Shallow,
    UpToMax,
}

fn merge_texts(
    base: &[u8],
    patch: &[u8],
    options: &MergeOptions,
    depth: Depth,
) -> CoreResult<Vec<u8>> {
    let mut base = parse_with(base, "base", depth)?;
    let patch = parse_with(patch, "patch", depth)?;
    strip_in_place(&mut base, &options.unsafe_keys, 0).map_err(Trace::into_core)?;
    let merged = merge_values(base, patch, options)?;
    serde_json::to_vec(&merged).map_err(|e| CoreError::InvalidArgument(e.to_string()))
}

/// Parses JSON text nested up to [`MAX_DEPTH`] (the caller has checked the depth).
pub fn parse(text: &[u8], what: &str) -> CoreResult<Value> {
    parse_with(text, what, Depth::UpToMax)
}

fn parse_with(text: &[u8], what: &str, depth: Depth) -> CoreResult<Value> {
    let invalid = |e: serde_json::Error| CoreError::InvalidJson {
        what: what.to_owned(),
        detail: e.to_string(),
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    if depth == Depth::UpToMax {
        de.disable_recursion_limit();
    }
    let value = Value::deserialize(&mut de).map_err(invalid)?;
    de.end().map_err(invalid)?;
    Ok(value)
}

/// Deep-merges `patch` into `base`. `base` is trusted (already stripped); every object that
/// comes from `patch` or that the patch touches is stripped.
pub fn merge_values(base: Value, patch: Value, options: &MergeOptions) -> CoreResult<Value> {
    if patch.is_null() {
        return Ok(match options.nulls.top_level() {
            TopLevelNull::Base => base,
            TopLevelNull::Null => Value::Null,
        });
    }
    merge_node(base, patch, options, 0).map_err(Trace::into_core)
}

fn merge_node(base: Value, patch: Value, options: &MergeOptions, depth: usize) -> Walk<Value> {
    match (base, patch) {
        (Value::Object(mut base), Value::Object(patch)) => {
            check_depth(depth)?;
            for key in options.unsafe_keys.iter() {
                base.shift_remove(key);
            }
            for (key, value) in patch {
                if options.unsafe_keys.contains(&key) {
                    continue;
                }
                if value.is_null() {
                    match options.nulls {
                        NullMode::Keep => {
                            base.insert(key, Value::Null);
                        }
                        NullMode::Delete => {
                            base.shift_remove(&key);
                        }
                        NullMode::Ignore => {}
                    }
                    continue;
                }
                let merged = match base.get_mut(&key) {
                    Some(slot) => merge_node(slot.take(), value, options, depth + 1)
                        .map_err(|t| t.at_key(&key))?,
                    None => copy_in(value, options, options.nulls, depth + 1)
                        .map_err(|t| t.at_key(&key))?,
                };
                base.insert(key, merged);
            }
            Ok(Value::Object(base))
        }
        (Value::Array(base), Value::Array(patch)) if options.arrays == ArrayMode::Union => {
            check_depth(depth)?;
            union_arrays(base, patch, options, depth)
        }
        (_, patch) => copy_in(patch, options, options.nulls, depth),
    }
}

/// A patch value entering the result where there is nothing to merge with: stripped, with
/// `nulls` applied to the keys of its objects. An array is a value, kept verbatim, so its items
/// are copied with `NullMode::Keep`.
fn copy_in(value: Value, options: &MergeOptions, nulls: NullMode, depth: usize) -> Walk<Value> {
    match value {
        Value::Object(map) => {
            check_depth(depth)?;
            let mut out = Map::with_capacity(map.len());
            for (key, value) in map {
                if options.unsafe_keys.contains(&key) {
                    continue;
                }
                if value.is_null() {
                    if nulls == NullMode::Keep {
                        out.insert(key, Value::Null);
                    }
                    continue;
                }
                let value =
                    copy_in(value, options, nulls, depth + 1).map_err(|t| t.at_key(&key))?;
                out.insert(key, value);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => {
            check_depth(depth)?;
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| {
                    copy_in(item, options, NullMode::Keep, depth + 1).map_err(|t| t.at_index(i))
                })
                .collect::<Walk<Vec<_>>>()
                .map(Value::Array)
        }
        scalar => Ok(scalar),
    }
}

/// `arrays="union"`: the base items then the patch items, each value once (its first
/// occurrence). The base is trusted, so only patch items are copied in.
fn union_arrays(
    base: Vec<Value>,
    patch: Vec<Value>,
    options: &MergeOptions,
    depth: usize,
) -> Walk<Value> {
    let base_len = base.len();
    let mut seen = Seen::new(base_len + patch.len(), depth + 1);
    for (i, item) in base.into_iter().enumerate() {
        seen.push_new(item).map_err(|t| t.at_index(i))?;
    }
    for (i, item) in patch.into_iter().enumerate() {
        let at = |t: Trace<WalkError>| t.at_index(base_len + i);
        let item = copy_in(item, options, NullMode::Keep, depth + 1).map_err(at)?;
        seen.push_new(item).map_err(at)?;
    }
    Ok(Value::Array(seen.items))
}

/// The distinct values of a union so far. A few values are compared pairwise; past
/// [`PAIRWISE_LIMIT`] the hash index keeps the dedup linear.
struct Seen {
    items: Vec<Value>,
    index: Option<UnionIndex>,
    depth: usize,
}

impl Seen {
    fn new(capacity: usize, depth: usize) -> Self {
        Self {
            items: Vec::with_capacity(capacity),
            index: (capacity > PAIRWISE_LIMIT).then(|| UnionIndex::with_capacity(capacity)),
            depth,
        }
    }

    /// Appends `item` unless an equal value is already there.
    fn push_new(&mut self, item: Value) -> Walk<()> {
        let depth = self.depth;
        match &mut self.index {
            None => {
                for present in &self.items {
                    if json_equal(present, &item, depth)? {
                        return Ok(());
                    }
                }
            }
            Some(index) => {
                let hash = json_hash(&item, depth)?;
                let items = &self.items;
                if index.contains(hash, |j| json_equal(&items[j], &item, depth))? {
                    return Ok(());
                }
                index.insert(hash, items.len());
            }
        }
        self.items.push(item);
        Ok(())
    }
}

/// Removes unsafe keys at every depth, in place.
pub fn strip_in_place(value: &mut Value, keys: &UnsafeKeys, depth: usize) -> Walk<()> {
    match value {
        Value::Object(map) => {
            check_depth(depth)?;
            for key in keys.iter() {
                map.shift_remove(key);
            }
            for (key, child) in map.iter_mut() {
                strip_in_place(child, keys, depth + 1).map_err(|t| t.at_key(key))?;
            }
        }
        Value::Array(items) => {
            check_depth(depth)?;
            for (i, child) in items.iter_mut().enumerate() {
                strip_in_place(child, keys, depth + 1).map_err(|t| t.at_index(i))?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_depth(depth: usize) -> Walk<()> {
    if depth >= MAX_DEPTH {
        Err(Trace::new(WalkError::TooDeep))
    } else {
        Ok(())
    }
}

/// A number as an exact integer when it has an integral value, so `1` and `1.0` agree.
fn integral(n: &Number) -> Option<i128> {
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    // 2^127: beyond it `as` would saturate and make unequal floats look equal.
    (f.fract() == 0.0 && f.abs() < 1.7014118346046923e38).then_some(f as i128)
}

fn numbers_equal(a: &Number, b: &Number) -> bool {
    match (integral(a), integral(b)) {
        (Some(x), Some(y)) => x == y,
        (None, None) => a.as_f64() == b.as_f64(),
        _ => false,
    }
}

/// JSON equality: booleans never equal numbers, `1 == 1.0`, objects ignore key order.
pub fn json_equal(a: &Value, b: &Value, depth: usize) -> Walk<bool> {
    Ok(match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            check_depth(depth)?;
            if x.len() != y.len() {
                return Ok(false);
            }
            for (p, q) in x.iter().zip(y) {
                if !json_equal(p, q, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
        (Value::Object(x), Value::Object(y)) => {
            check_depth(depth)?;
            if x.len() != y.len() {
                return Ok(false);
            }
            for (key, p) in x {
                match y.get(key) {
                    Some(q) if json_equal(p, q, depth + 1)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        _ => false,
    })
}

fn bytes_hash(bytes: &[u8]) -> u64 {
    // FNV-1a: short keys dominate; the result is mixed again by the callers.
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Structural hash consistent with [`json_equal`].
pub fn json_hash(value: &Value, depth: usize) -> Walk<u64> {
    Ok(match value {
        Value::Null => union::NULL_HASH,
        Value::Bool(true) => union::TRUE_HASH,
        Value::Bool(false) => union::FALSE_HASH,
        Value::Number(n) => union::number_hash(match integral(n) {
            Some(i) => (i as u64) ^ ((i >> 64) as u64).rotate_left(1),
            None => n.as_f64().map_or(0, f64::to_bits),
        }),
        Value::String(s) => union::string_hash(bytes_hash(s.as_bytes())),
        Value::Array(items) => {
            check_depth(depth)?;
            let mut h = ArrayHasher::default();
            for item in items {
                h.add(json_hash(item, depth + 1)?);
            }
            h.finish()
        }
        Value::Object(map) => {
            check_depth(depth)?;
            let mut h = ObjectHasher::default();
            for (key, item) in map {
                h.add(bytes_hash(key.as_bytes()), json_hash(item, depth + 1)?);
            }
            h.finish()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn opts(arrays: ArrayMode, nulls: NullMode) -> MergeOptions {
        MergeOptions {
            arrays,
            nulls,
            unsafe_keys: UnsafeKeys::default(),
        }
    }

    fn merge(base: Value, patch: Value, o: &MergeOptions) -> Value {
        merge_values(base, patch, o).unwrap()
    }

    /// Debug builds use far bigger frames than release, and test threads have 2 MiB stacks.
    fn on_big_stack(f: impl FnOnce() + Send) {
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(DEEP_STACK_BYTES)
                .spawn_scoped(s, f)
                .unwrap()
                .join()
                .unwrap();
        });
    }

    #[test]
    fn objects_merge_recursively_and_primitives_overwrite() {
        let o = MergeOptions::default();
        let out = merge(
            json!({"a": {"x": 1, "y": 2}, "b": [1, 2], "c": "old"}),
            json!({"a": {"y": 3, "z": {"k": true}}, "b": [3], "c": 4, "d": {"e": null}}),
            &o,
        );
        assert_eq!(
            out,
            json!({"a": {"x": 1, "y": 3, "z": {"k": true}}, "b": [3], "c": 4, "d": {"e": null}})
        );
        let keys: Vec<_> = out["a"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["x", "y", "z"]);
    }

    #[test]
    fn null_modes() {
        let base = json!({"a": 1, "b": {"c": 2, "d": 3}});
        let patch = json!({"a": null, "b": {"c": null}, "n": {"x": null, "y": [null]}});
        assert_eq!(
            merge(
                base.clone(),
                patch.clone(),
                &opts(ArrayMode::Replace, NullMode::Keep)
            ),
            json!({"a": null, "b": {"c": null, "d": 3}, "n": {"x": null, "y": [null]}})
        );
        assert_eq!(
            merge(
                base.clone(),
                patch.clone(),
                &opts(ArrayMode::Replace, NullMode::Delete)
            ),
            json!({"b": {"d": 3}, "n": {"y": [null]}})
        );
        assert_eq!(
            merge(
                base.clone(),
                patch,
                &opts(ArrayMode::Replace, NullMode::Ignore)
            ),
            json!({"a": 1, "b": {"c": 2, "d": 3}, "n": {"y": [null]}})
        );
        let ignore = opts(ArrayMode::Replace, NullMode::Ignore);
        assert_eq!(merge(base.clone(), Value::Null, &ignore), base);
        assert_eq!(
            merge(base, Value::Null, &MergeOptions::default()),
            Value::Null
        );
    }

    #[test]
    fn union_dedups_structurally_with_json_equality() {
        let o = opts(ArrayMode::Union, NullMode::Keep);
        let out = merge(
            json!({"t": [1, "a", {"k": [1, 2], "j": 0}, [true]]}),
            json!({"t": [1.0, true, {"j": 0.0, "k": [1, 2]}, [true], [1], "a", "b", "b"]}),
            &o,
        );
        assert_eq!(
            out,
            json!({"t": [1, "a", {"k": [1, 2], "j": 0}, [true], true, [1], "b"]})
        );
    }

    #[test]
    fn union_of_long_arrays_uses_the_index() {
        let o = opts(ArrayMode::Union, NullMode::Keep);
        let base: Vec<Value> = (0..500)
            .map(|i| json!({"id": i, "tags": [i % 7]}))
            .collect();
        let patch: Vec<Value> = (250..750)
            .map(|i| json!({"tags": [i % 7], "id": f64::from(i)}))
            .collect();
        let out = merge(Value::Array(base), Value::Array(patch), &o);
        let out = out.as_array().unwrap();
        assert_eq!(out.len(), 750);
        assert_eq!(out[749], json!({"tags": [749 % 7], "id": 749.0}));
    }

    #[test]
    fn union_drops_duplicates_already_in_the_base() {
        let o = opts(ArrayMode::Union, NullMode::Keep);
        let out = merge(json!({"a": [1, 1, 2]}), json!({"a": [2, 3]}), &o);
        assert_eq!(out, json!({"a": [1, 2, 3]}));
        let out = merge(
            json!([{"k": 1}, 1, {"k": 1.0}, 1.0, true, [1]]),
            json!([1, {"k": 1}, true, 2, 2]),
            &o,
        );
        assert_eq!(out, json!([{"k": 1}, 1, true, [1], 2]));
    }

    #[test]
    fn union_drops_base_duplicates_past_the_pairwise_limit() {
        let o = opts(ArrayMode::Union, NullMode::Keep);
        let base: Vec<Value> = (0..3 * PAIRWISE_LIMIT)
            .map(|i| json!({"id": i % PAIRWISE_LIMIT}))
            .collect();
        let patch: Vec<Value> = (0..2 * PAIRWISE_LIMIT)
            .map(|i| json!({"id": i as f64}))
            .collect();
        let out = merge(Value::Array(base), Value::Array(patch), &o);
        let want: Vec<Value> = (0..2 * PAIRWISE_LIMIT)
            .map(|i| {
                if i < PAIRWISE_LIMIT {
                    json!({"id": i})
                } else {
                    json!({"id": i as f64})
                }
            })
            .collect();
        assert_eq!(out, Value::Array(want));
    }

    #[test]
    fn nulls_inside_arrays_are_kept_verbatim_in_every_null_mode() {
        for nulls in [NullMode::Keep, NullMode::Delete, NullMode::Ignore] {
            for arrays in [ArrayMode::Replace, ArrayMode::Union] {
                let o = opts(arrays, nulls);
                let patch = json!({"a": [null, {"x": null, "y": [{"z": null}]}]});
                assert_eq!(merge(json!({}), patch.clone(), &o), patch);
                let out = merge(json!({"a": [1]}), patch.clone(), &o);
                let want = match arrays {
                    ArrayMode::Replace => patch.clone(),
                    ArrayMode::Union => {
                        json!({"a": [1, null, {"x": null, "y": [{"z": null}]}]})
                    }
                };
                assert_eq!(out, want, "{arrays:?} {nulls:?}");
                let top = json!([{"x": null, "__proto__": 1}]);
                assert_eq!(merge(json!({}), top, &o), json!([{"x": null}]));
            }
        }
    }

    #[test]
    fn nulls_inside_arrays_still_lose_their_unsafe_keys() {
        let o = opts(ArrayMode::Union, NullMode::Delete);
        let out = merge(
            json!({"a": []}),
            json!({"a": [{"__proto__": null, "constructor": {"x": 1}, "k": null}]}),
            &o,
        );
        assert_eq!(out, json!({"a": [{"k": null}]}));
    }

    #[test]
    fn unsafe_keys_are_stripped_from_patch_objects_at_any_depth() {
        on_big_stack(unsafe_keys_at_depth);
    }

    fn unsafe_keys_at_depth() {
        let o = MergeOptions::default();
        let mut deep = json!({"__proto__": {"polluted": true}, "ok": 1});
        for _ in 0..900 {
            deep = json!({"a": deep, "constructor": 1});
        }
        let out = merge(json!({"a": {"__proto__": 1, "keep": 2}}), deep, &o);
        let mut cursor = &out;
        for _ in 0..900 {
            assert!(cursor.get("constructor").is_none());
            cursor = &cursor["a"];
        }
        assert_eq!(cursor, &json!({"ok": 1}));
        assert!(out["a"].get("keep").is_some() && out["a"].get("__proto__").is_none());
    }

    #[test]
    fn too_deep_patch_is_an_error_with_a_path() {
        on_big_stack(too_deep_patch);
    }

    fn too_deep_patch() {
        let mut deep = json!(1);
        for _ in 0..=MAX_DEPTH {
            deep = json!([deep]);
        }
        let err = merge_values(json!({}), json!({"p": deep}), &MergeOptions::default());
        match err.unwrap_err() {
            CoreError::NestingTooDeep { path, limit } => {
                assert!(path.starts_with("$.p[0][0]"));
                assert_eq!(limit, MAX_DEPTH);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn merge_json_dedups_union_and_keeps_nulls_in_arrays() {
        let o = opts(ArrayMode::Union, NullMode::Delete);
        let out = merge_json(
            br#"{"a": [1, 1, 2], "b": {"c": 1}}"#,
            br#"{"a": [2, 3, null, {"x": null}], "b": {"c": null, "d": [{"e": null}]}}"#,
            &o,
        )
        .unwrap();
        assert_eq!(
            out,
            br#"{"a":[1,2,3,null,{"x":null}],"b":{"d":[{"e":null}]}}"#
        );
    }

    #[test]
    fn merge_json_round_trips_and_names_bad_arguments() {
        let o = opts(ArrayMode::Union, NullMode::Delete);
        let out = merge_json(
            br#"{"b": 1, "a": {"__proto__": 1, "x": [1]}, "constructor": 2}"#,
            br#"{"a": {"x": [1, 2], "y": null}, "c": "z"}"#,
            &o,
        )
        .unwrap();
        assert_eq!(out, br#"{"b":1,"a":{"x":[1,2]},"c":"z"}"#);
        let err = merge_json(b"{}", b"{", &o).unwrap_err();
        assert!(matches!(err, CoreError::InvalidJson { ref what, .. } if what == "patch"));
        let err = merge_json(b"[1] x", b"{}", &o).unwrap_err();
        assert!(matches!(err, CoreError::InvalidJson { ref what, .. } if what == "base"));
    }

    #[test]
    fn merge_json_handles_the_depth_limit() {
        let o = MergeOptions::default();
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        let out = merge_json(b"{}", ok.as_bytes(), &o).unwrap();
        assert_eq!(out, ok.as_bytes());
        let nested = format!("{}{}", "{\"a\":".repeat(MAX_DEPTH), "{}") + &"}".repeat(MAX_DEPTH);
        let err = merge_json(b"{}", nested.as_bytes(), &o).unwrap_err();
        assert!(matches!(err, CoreError::NestingTooDeep { .. }));
        let huge = "[".repeat(100_000);
        assert!(merge_json(huge.as_bytes(), b"1", &o).is_err());
    }

    #[test]
    fn numbers_compare_as_json_numbers() {
        assert!(json_equal(&json!(1), &json!(1.0), 0).unwrap());
        assert!(!json_equal(&json!(1), &json!(true), 0).unwrap());
        assert!(!json_equal(&json!(1.5), &json!(1), 0).unwrap());
        assert!(json_equal(&json!(u64::MAX), &json!(u64::MAX), 0).unwrap());
        assert_eq!(
            json_hash(&json!(3), 0).unwrap(),
            json_hash(&json!(3.0), 0).unwrap()
        );
        assert_ne!(
            json_hash(&json!(1), 0).unwrap(),
            json_hash(&json!(true), 0).unwrap()
        );
    }
}
